"""ORACLE_BACKEND=meta_tests.faulty:<factory> makes `pytest property_tests` fail from the command
line, with the one-line reproduction command and Hypothesis's reproduce blob in the output; the
reference passes the same test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST = "property_tests/test_rng_props.py::test_rng_events_follow_policy"


def _pytest(backend: str):
    # the ci profile without shrinking (its reduction of a found failure is what takes the time)
    env = dict(os.environ, HYPOTHESIS_PROFILE="ci-first-failure", ORACLE_BACKEND=backend)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", TEST],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_faulty_backend_fails_from_the_command_line():
    spec = "meta_tests.faulty:make_bonus_after_rejection"
    r = _pytest(spec)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    assert f"ORACLE_BACKEND={spec} python -m pytest -q {TEST}" in out, out[-3000:]  # reproduce line
    assert "@reproduce_failure(" in out, out[-3000:]  # Hypothesis blob
    assert "the policy requires nothing more" in out
    assert f"oracle backend: ORACLE_BACKEND={spec} -> faulty:bonus_after_rejection" in out  # report header
