"""A plug-in backend runs in a child process (oracle/runtime/isolated.py): a segfault, an abort or an
os._exit in it is a failed `backend` check (exit 1) naming the signal or exit code, with the
reproduce line, never the oracle's end (exit 139 or 134, nothing printed); a death while loading is
one error line (exit 2). A correct plug-in still passes, a Python exception is still reported with
its text, the contract and the capabilities are read in the child, --timeout kills a child that
hangs, a forked copy of the proxy (the drift probe's child) starts a child of its own, and the
"spawn" start method works where there is no fork. The CLI runs in a subprocess with a timeout."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from oracle.runtime import isolated
from oracle.runtime.backends import BackendCallFailed, GuardedBackend, load_backend
from oracle.checkpoint import build_model
from oracle.runtime.contract import Capabilities, LoadedBackend, capabilities, contract_problems, unwrap
from oracle.errors import OracleError
from oracle.judge.plans import worker
from oracle.judge.runner import run_scenario
from oracle.judge.scenario import make_case
from oracle.sampling_params import SamplingParams as SP

pytestmark = pytest.mark.time_limit(120)  # runs plug-ins: a hang fails here, not the suite (conftest.py)

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--counts", "2,1", "--rounds", "1"]


def cli(*argv, pythonpath: str | None = None, timeout: float = 240):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("ORACLE_BACKEND", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "oracle", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "factory, death, call",
    [
        ("dies_segfault_in_step", "died with SIGSEGV (signal 11)", "step()"),
        ("dies_abort_in_step", "died with SIGABRT (signal 6)", "step()"),
        ("dies_exit_in_step", "exited with exit code 3", "step()"),
        ("dies_segfault_in_session", "died with SIGSEGV (signal 11)", "session()"),
    ],
)
def test_a_plugin_that_kills_its_process_is_a_failed_check(factory, death, call):
    spec = f"meta_tests.plugins:{factory}"
    r = cli("check", "--backend", spec, "--no-drift", *SMALL)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    fails = [x for x in r.stdout.splitlines() if x.startswith("  FAIL [backend] ")]
    # block and loop (the second mode starts a new child) fail alike: one line with the count
    assert len(fails) == 1 and "[+1 more alike: 1 case, block, loop]" in fails[0], r.stdout
    for line in fails:
        assert f"the backend's process {death} during {call}" in line, line
        repro = line.split("(reproduce: ", 1)[1]
        assert "python -m oracle check " in repro and f"--backend {spec}" in repro, line
    assert r.stdout.rstrip().endswith("s") and "FAILED in" in r.stdout.splitlines()[-1]


def test_a_correct_plugin_still_passes():
    r = cli("check", "--backend", "examples.plugin_backend:make_backend", *SMALL)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stdout.splitlines()[-1].startswith("  OK in ")


def test_an_exception_is_still_reported_with_its_text():
    """PluginFault is a class of the plug-in's module, which the oracle does not import: it comes
    back as a stand-in with the same name and text."""
    r = cli("check", "--backend", "meta_tests.plugins:make_raises_in_step", "--no-drift", *SMALL)
    assert r.returncode == 1, (r.stdout, r.stderr)
    fail = next(x for x in r.stdout.splitlines() if x.startswith("  FAIL [backend] "))
    assert "the backend raised PluginFault: round 0: the engine's step failed [+1 more alike" in fail, fail
    assert fail.split(" (reproduce: ", 1)[1].startswith("PYTHONPATH="), fail


def test_a_death_while_loading_is_one_error_line(tmp_path):
    (tmp_path / "plug_dies_import.py").write_text("import ctypes\nctypes.string_at(0)\ndef make():\n    pass\n")
    (tmp_path / "plug_dies_factory.py").write_text("import os\ndef make():\n    os._exit(5)\n")
    for spec, why in [
        ("plug_dies_import:make", "died with SIGSEGV (signal 11) while importing plug_dies_import"),
        ("plug_dies_factory:make", "exited with exit code 5 in plug_dies_factory:make()"),
    ]:
        r = cli("check", "--backend", spec, *SMALL, pythonpath=str(tmp_path))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and lines[-1] == f"error: backend {spec!r}: the backend's process {why}", r.stderr


# ---- the proxy in this process ----


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", seed=0)


@pytest.fixture(scope="module")
def case():
    return make_case("iso", [{0: 4, 1: 2}] * 2, 2, 4, [SP(), SP(0.8, seed=1)], seed=3)


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Writes plug-in modules into a folder on sys.path: plugins(name, source) -> name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source)
        return name

    return write


def same_runs(a, b) -> bool:
    if a.tokens != b.tokens or len(a.traces) != len(b.traces):
        return False
    for x, y in zip(a.traces, b.traces):
        if x.emitted != y.emitted or x.verify_logits.keys() != y.verify_logits.keys():
            return False
        if not all(np.array_equal(x.verify_logits[k], y.verify_logits[k]) for k in x.verify_logits):
            return False
    return True


def test_the_proxy_keeps_the_contract_and_the_caps(tiny, case):
    spec = "examples.plugin_backend:make_backend"
    bk = isolated.load(spec)
    assert isinstance(bk, LoadedBackend) and isinstance(unwrap(bk), isolated.IsolatedBackend)
    assert contract_problems(bk) == [] and contract_problems(unwrap(bk)) == []
    here = load_backend(spec)
    assert (bk.name, bk.dtype, bk.exact, tuple(bk.policies)) == (here.name, here.dtype, here.exact, here.policies)
    assert bk.caps == here.caps == Capabilities.read(unwrap(bk)) and capabilities(bk) is bk.caps
    assert unwrap(bk)._proc.pid != os.getpid()
    assert same_runs(run_scenario(bk, tiny, case, "loop"), run_scenario(here, tiny, case, "loop"))
    assert isolated.load("reference").__wrapped__.__class__.__name__ == "ReferenceBackend"  # in-tree: here


def test_a_contract_break_is_refused_as_load_backend_refuses_it(plugins):
    name = plugins(
        "plug_strpol",
        "from examples.plugin_backend import PluginBackend\n"
        "class B(PluginBackend):\n    policies = 'sequential'\ndef make():\n    return B()\n",
    )
    with pytest.raises(OracleError) as here:
        load_backend(f"{name}:make")
    with pytest.raises(OracleError) as there:
        isolated.load(f"{name}:make")
    assert str(there.value) == str(here.value)


def test_a_hook_object_is_called_in_the_child(plugins):
    name = plugins(
        "plug_sampler",
        "import oracle.sampling\nfrom examples.plugin_backend import PluginBackend\n"
        "class B(PluginBackend):\n    sampling = oracle.sampling\ndef make():\n    return B()\n",
    )
    import oracle.sampling as sampling

    bk = isolated.load(f"{name}:make")
    remote = bk.caps.sampling
    assert isinstance(remote, isolated.Remote) and contract_problems(bk) == []
    logits, params = np.linspace(-2, 2, 16).astype(np.float32), SP(0.7, top_k=5, seed=1)
    assert np.array_equal(remote.filtered_probs(logits, params), sampling.filtered_probs(logits, params))


def test_a_load_past_the_timeout_names_the_stage_and_kills_the_child(plugins):
    name = plugins("plug_slow_import", "import time\ntime.sleep(60)\ndef make():\n    pass\n")
    before = set(isolated._LIVE)
    with pytest.raises(OracleError) as e:
        isolated.load(f"{name}:make", timeout=0.5)
    assert str(e.value) == f"backend '{name}:make': importing {name} did not finish within 0.5 s (--timeout)"
    assert set(isolated._LIVE) <= before  # killed and reaped


def test_a_call_past_the_timeout_kills_the_child(plugins, tiny, case):
    name = plugins(
        "plug_spin",
        "from examples.plugin_backend import PluginBackend, PluginSession\n"
        "class S(PluginSession):\n    def step(self, counts):\n        while True:\n            pass\n"
        "class B(PluginBackend):\n    def session(self, *a):\n        return S(super().session(*a).inner, None)\n"
        "def make():\n    return B()\n",
    )
    bk = isolated.load(f"{name}:make")
    proc = unwrap(bk)._proc
    with pytest.raises(BackendCallFailed, match=r"step\(\) did not return within 0.5 s"):
        run_scenario(GuardedBackend(bk, 0.5), tiny, case, "block")
    deadline = time.monotonic() + 30
    while proc.exitcode is None and time.monotonic() < deadline:  # the guard's thread reaps it
        time.sleep(0.05)
    assert proc.exitcode == -9  # SIGKILL: it does not spin on


def test_sessions_of_a_dead_child_fail_at_once_and_the_next_session_starts_a_new_one(tiny, case):
    bk = isolated.load("meta_tests.plugins:dies_segfault_in_step")
    first = unwrap(bk)._proc.pid
    s = bk.session(tiny, case.d, case.D, "block", case.policy)
    s.add(0, list(case.prompts[0]), case.params_for(tiny)[0])
    with pytest.raises(isolated.BackendDied, match=r"died with SIGSEGV \(signal 11\) during step\(\)"):
        s.step({0: 2})
    with pytest.raises(isolated.BackendDied, match=r"tokens\(\) not run: .* died with SIGSEGV"):
        s.tokens(0)
    s2 = bk.session(tiny, case.d, case.D, "block", case.policy)
    assert unwrap(bk)._proc.pid != first and s2.tokens is not None


def test_a_forked_copy_starts_a_child_of_its_own(tiny, case):
    """The drift probe of a fork_safe backend runs in a forked child (worker.background): its copy
    of the proxy must not share the parent's pipe."""
    if not worker.forks():
        pytest.skip("no fork here")
    bk = isolated.load("examples.plugin_backend:make_backend")
    here = run_scenario(bk, tiny, case, "block")  # the parent's child is in use
    pid = unwrap(bk)._proc.pid

    def in_fork():
        run = run_scenario(bk, tiny, case, "block")
        run.session = None  # lives in the forked copy's child
        return run, unwrap(bk)._proc.pid

    there = worker.Child(in_fork, (), {}).result()
    assert same_runs(here, there[0]) and there[1] != pid
    assert same_runs(here, run_scenario(bk, tiny, case, "block")) and unwrap(bk)._proc.pid == pid


def test_the_spawn_start_method(monkeypatch, tiny, case):
    monkeypatch.setattr(isolated, "_context", lambda: multiprocessing.get_context("spawn"))
    bk = isolated.load("examples.plugin_backend:make_backend")
    assert same_runs(run_scenario(bk, tiny, case, "loop"), run_scenario(load_backend("reference"), tiny, case, "loop"))
    dying = isolated.load("meta_tests.plugins:dies_abort_in_step")
    with pytest.raises(isolated.BackendDied, match=r"died with SIGABRT"):
        run_scenario(dying, tiny, case, "loop")


def test_a_round_in_flight_stays_in_the_child(plugins, tiny, case):
    """submit() returns a handle that cannot be pickled (a closure): it stays in the child and
    collect(handle) finds it there."""
    name = plugins(
        "plug_submit",
        "from examples.plugin_backend import PluginBackend, PluginSession\n"
        "class S(PluginSession):\n"
        "    def submit(self, counts):\n        return lambda: self.inner.step(counts)\n"
        "    def collect(self, handle):\n        return handle()\n"
        "class B(PluginBackend):\n    def session(self, *a):\n        return S(super().session(*a).inner, None)\n"
        "def make():\n    return B()\n",
    )
    bk = isolated.load(f"{name}:make")
    s = bk.session(tiny, case.d, case.D, "loop", case.policy)
    assert callable(s.submit) and callable(s.collect) and not hasattr(s, "kv_frontiers")
    got = run_scenario(bk, tiny, case, "loop", submit_ahead=True)
    assert same_runs(got, run_scenario(load_backend("reference"), tiny, case, "loop"))
