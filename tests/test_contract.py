"""The backend contract in code (oracle/judge/contract.py): every in-repo backend and every
meta_tests factory keeps it, and an object that breaks it is told where."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from oracle.backends import REQUIRED, load_backend
from oracle.judge.contract import Backend, Session, contract_problems, session_problems
from oracle.checkpoint import build_model

import meta_tests.faulty as faulty
import meta_tests.plugins as plugins


def factories(module) -> list[str]:
    return [f"{module.__name__}:{n}" for n, f in vars(module).items()
            if n.startswith("make_") and inspect.isfunction(f) and f.__module__ == module.__name__]


NEEDS = {"torch-cpu": "torch", "torch-cpu-bf16": "torch", "jax": "jax"}
SPECS = ["reference", "torch-cpu", "torch-cpu-bf16", "jax", "examples.plugin_backend:make_backend",
         *factories(faulty), *factories(plugins)]


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", seed=0)


@pytest.mark.parametrize("spec", SPECS)
def test_every_in_repo_backend_keeps_the_contract(spec, tiny):
    if spec in NEEDS:
        pytest.importorskip(NEEDS[spec])
    bk = load_backend(spec)
    assert isinstance(bk, Backend)
    assert contract_problems(bk) == []
    for policy in bk.policies:
        s = bk.session(tiny, 1, 2, "block", policy)
        assert isinstance(s, Session)
        assert session_problems(s) == [], spec


def test_the_meta_factories_are_all_listed():
    for module in (faulty, plugins):
        text = Path(module.__file__).read_text()
        assert len(factories(module)) == text.count("\ndef make_") > 0


def test_the_contract_names_what_load_backend_requires():
    assert set(REQUIRED) == {"name", "dtype", "exact", "policies", "session"}
    assert set(REQUIRED) <= set(Backend.__annotations__) | {"session"}


def test_a_broken_backend_is_told_where():
    class NoDepths:
        def add(self, rid, prompt, params, replay=None):
            pass

        def step(self, counts):
            pass

        def remove(self, rid):
            return []

        def submit(self, counts):
            pass

    class Broken:
        name, dtype, exact, policies = "broken", "int8", False, ("sequential", "shuffled")
        host_rng = "yes"

        def session(self, model):
            return NoDepths()

    problems = contract_problems(Broken(), Broken().session(None))
    text = "\n".join(problems)
    for part in ("dtype 'int8' has no tolerance row", "policies", "session(model, d, D, mode, policy)",
                 "optional host_rng", "session.add", "session lacks tokens()", "submit/collect"):
        assert part in text, (part, problems)
    assert contract_problems(object()) == [f"backend lacks {a}" for a in REQUIRED]
