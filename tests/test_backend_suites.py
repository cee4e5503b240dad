"""The property suite against every named backend CI can run (oracle.runtime.backends.suite_runs:
torch FP32, BF16 and invariant BF16 on the CPU and the JAX FP32 backend, each in its profile), each in
a pytest process of its own with one torch thread (suite_command). They are tests of `make test`'s one
xdist session, collected first (conftest.py), so that the session's other tests fill the cores around
these long ones instead of leaving a core idle at the end. `python scripts/backend_suites.py` runs the
same processes outside pytest; `-m "not backend_suite"` leaves them out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from oracle.runtime.backends import suite_command, suite_runs

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.backend_suite
@pytest.mark.time_limit(1500)
@pytest.mark.parametrize("name,profile", suite_runs())
def test_the_property_suite_passes_on(name, profile):
    argv, env = suite_command(name, profile, dict(os.environ))
    run = subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    tail = (run.stdout[-30000:] + run.stderr[-5000:]).rstrip()
    assert run.returncode == 0, f"ORACLE_BACKEND={name} HYPOTHESIS_PROFILE={profile} pytest property_tests:\n{tail}"
    assert " passed" in run.stdout, tail  # it ran tests, not none
