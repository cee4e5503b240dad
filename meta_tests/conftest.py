"""Meta-tests: the property suite's own power (meta_tests/test_faults.py). Profiles come from
property_tests/conftest.py; a table of which property caught which fault (and how) is printed
at the end of the run."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import property_tests.conftest  # noqa: E402,F401  (registers and loads the Hypothesis profiles)

RESULTS: list = []  # (fault factory, property, Outcome), filled by test_faults.py


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and call.when == "call":
        from hypothesis import settings

        profile = settings.get_current_profile_name()
        rep.sections.append(
            ("reproduce", f"HYPOTHESIS_PROFILE={profile} python -m pytest -q {shlex.quote(item.nodeid)}")
        )


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    tr = terminalreporter
    tr.section("faults caught by the property suite (meta_tests)")
    for fault, prop, o in RESULTS:
        tr.write_line(
            f"{'CAUGHT' if o.caught else 'MISSED'} {fault.removeprefix('make_'):26s} {prop:70s} {o.seconds:5.1f}s"
        )
        tr.write_line(f"        {o.message[:150]}")
    if os.environ.get("ORACLE_META_VERBOSE"):
        tr.write_line(f"{len(RESULTS)} fault/property pairs")
