"""A derandomized property draws the same examples whatever modules the process has loaded
(property_tests/conftest.py keeps Hypothesis's pool of local constants empty). Without that,
importing a module that holds the constant 123456789 made the same @given test draw it: the
ci profile's examples then depended on what an xdist worker had run before, and a failure's
reproduce line could rerun other examples."""

from __future__ import annotations

import importlib

from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import property_tests.conftest  # noqa: F401  (the profiles, and the pool kept empty)


def draws() -> list[int]:
    seen: list[int] = []

    @settings(derandomize=True, database=None, max_examples=300, phases=[Phase.generate])
    @given(st.integers(0, 10**9))
    def prop(x):
        seen.append(x)

    prop()
    return seen


def test_examples_do_not_depend_on_the_modules_loaded(tmp_path, monkeypatch):
    before = draws()
    (tmp_path / "odd_constants_mod.py").write_text("A = 987654321\nB = 123456789\nC = 555555555\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("odd_constants_mod")
    after = draws()
    assert after == before, f"new examples after an import: {[x for x in after if x not in before][:5]}"
