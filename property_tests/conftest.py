"""Hypothesis profiles, backend selection and failure reproduction for the property suite.

Profiles (pick with HYPOTHESIS_PROFILE=dev|ci|nightly or --hypothesis-profile=...; default dev):
    dev      random search, example database (.hypothesis/) replays failures
    ci       derandomize=True, deadline=None, database=None, print_blob=True (.ci/run)
    ci-slow-backend  ci with a quarter of the examples (for a backend too slow for ci)
    ci-first-failure ci without the shrink phase: a failure is reported as first found (a quick
             red on a faulty backend; meta_tests/test_cli.py)
    nightly  10x the ci examples, random, long stateful runs (stateful_step_count=200),
             and the size caps of property_tests/strategies.py at their full ranges

Backend under test: ORACLE_BACKEND (or --oracle-backend) = a name of oracle.runtime.backends.NAMED or
package.module:factory, loaded by oracle.runtime.backends.load_backend().

Documented command (statistics show examples per property and the event() coverage of
rejection positions):
    HYPOTHESIS_PROFILE=ci python -m pytest -q --hypothesis-show-statistics property_tests meta_tests
Every failing test prints a one-line `reproduce` section with the command that reruns it;
Hypothesis prints the failing example and its @reproduce_failure blob (print_blob=True).
Other Hypothesis knobs are the plugin's options: --hypothesis-seed, --hypothesis-verbosity,
--hypothesis-show-statistics, --hypothesis-profile.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.internal.conjecture import providers as _providers
from sortedcontainers import SortedSet

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # meta_tests.faulty:make_* as ORACLE_BACKEND
    sys.path.insert(0, str(REPO))

from oracle.runtime.backends import names_help  # noqa: E402
from property_tests.harness import CI_EXAMPLES  # noqa: E402  (tests scale with harness.examples())

_NO_LOCAL_CONSTANTS = _providers.Constants(
    integers=SortedSet(), floats=SortedSet(key=_providers.float_to_int), bytes=SortedSet(), strings=SortedSet()
)
settings.register_profile(
    "dev",
    max_examples=CI_EXAMPLES,
    deadline=None,
    print_blob=True,
    stateful_step_count=30,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("ci", parent=settings.get_profile("dev"), derandomize=True, database=None)
# ci for a backend whose rounds are slow on the host at hand (a user's engine behind a slow
# link, say): the same properties, derandomized, a quarter of the examples (every test's
# harness.examples(n) scales with max_examples). make test runs the JAX backend with it (its
# XLA compiles per drawn shape: 50 s against 106 s under ci on 2 cores, 2026-12-04).
settings.register_profile("ci-slow-backend", parent=settings.get_profile("ci"), max_examples=CI_EXAMPLES // 4)
settings.register_profile(
    "ci-first-failure", parent=settings.get_profile("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate]
)
settings.register_profile(
    "nightly", parent=settings.get_profile("dev"), max_examples=10 * CI_EXAMPLES, database=None, stateful_step_count=200
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Hypothesis (pinned, 6.170.17) also draws, with probability 0.05 per choice, constants it finds in
# the project's modules loaded so far (providers._get_local_constants). Which modules are loaded
# depends on what ran before in the process (pytest-xdist hands tests out as workers free up), so the
# derandomized ci profile drew other examples with another test order, and a failure's reproduce line
# could rerun other examples than the suite had. The pool is kept empty: a test's examples are its own.
_providers._get_local_constants = lambda: _NO_LOCAL_CONSTANTS


def pytest_addoption(parser):
    parser.addoption(
        "--oracle-backend",
        default=None,
        help=f"implementation under test (overrides ORACLE_BACKEND): {names_help()}",
    )


def pytest_configure(config):
    spec = config.getoption("--oracle-backend", default=None)
    if spec:
        os.environ["ORACLE_BACKEND"] = spec


def pytest_report_header(config):
    from property_tests import harness
    from property_tests.strategies import caps, profile_name

    try:
        bk = harness.backend()
        desc = (
            f"{bk.name} (dtype {bk.dtype}, exact={bk.exact}, policies {'/'.join(bk.policies)}"
            f"{', host RNG' if harness.host_rng(bk) else ', device RNG: reference in replay mode'})"
        )
    except Exception as e:  # the tests will report it too
        desc = f"cannot load: {type(e).__name__}: {e}"
    return [
        f"oracle backend: ORACLE_BACKEND={harness.backend_spec()} -> {desc}",
        f"hypothesis profile: {profile_name()}; size caps: " + ", ".join(f"{k}={v}" for k, v in caps().items()),
    ]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and call.when == "call":
        from property_tests import harness

        rep.sections.append(("reproduce", harness.reproduce_line(item.nodeid)))
