"""The plug-in path of an engine author: the example backend passes `check`, its
one-line faulty variant fails with the logit index and both values named, the reproduce line
re-imports the plug-in, `--timeout` names the call that hung, sys.exit() in a call is a
failure, a backend is loaded before the model is built, `--list-cases`, and `trace record
--backend` + `trace diff` judged by the recorded row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.cli import main

pytestmark = pytest.mark.time_limit(120)  # runs plug-ins: a hang fails here, not the suite (conftest.py)

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--counts", "2,1", "--rounds", "1"]


def run_main(argv, capsys):
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Writes plug-in modules into a folder on sys.path: plugins(name, source) -> name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ORACLE_BACKEND", raising=False)

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source)
        return name

    return write


WRAPPED = """
from examples.plugin_backend import PluginBackend, PluginSession
class Session(PluginSession):
    def step(self, counts):
        {step}
class Backend(PluginBackend):
    policies = {policies}
    def session(self, model, d, D, mode, policy="sequential"):
        inner = super().session(model, d, D, mode, policy)
        return Session(inner.inner, None)
def make():
    return Backend()
"""


def wrapped(step: str = "return self.inner.step(counts)", policies=("sequential", "fixed")) -> str:
    return WRAPPED.format(step=step, policies=tuple(policies))


def test_example_plugin_passes(capsys):
    rc, out, err = run_main(["check", "--backend", "examples.plugin_backend:make_backend", "--json"], capsys)
    j = json.loads(out)
    assert rc == 0, [c for c in j["checks"] if not c["ok"]][:2]
    assert j["ok"] and j["backend"] == "example-plugin" and j["tolerance_row"] == "float32"
    assert j["request_rounds"] > 0 and j["timeout_s"] == 300


def test_example_faulty_plugin_fails_naming_index_and_values(capsys):
    rc, out, err = run_main(
        ["check", "--backend", "examples.plugin_backend:make_faulty_backend", "--no-shrink", *SMALL], capsys
    )
    assert rc == 1
    line = next(x for x in out.splitlines() if "FAIL [verify_logits]" in x)
    assert "largest difference at index 17: backend " in line and " vs reference " in line
    values = line.split("largest difference at index 17: backend ")[1].split(" (reproduce")[0].split(" [+")[0]
    got, ref = values.split(" vs reference ")  # then, where more checks failed alike, their count
    assert float(got) - float(ref) == pytest.approx(0.5, abs=1e-4)


def test_reproduce_line_carries_the_plugin_path(tmp_path):
    """Run from another folder with PYTHONPATH pointing at the repository: the reproduce line
    sets it, and runs as it is printed."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "oracle",
            "check",
            "--backend",
            "examples.plugin_backend:make_faulty_backend",
            "--no-shrink",
        ]
        + SMALL,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1, r.stderr
    repro = r.stdout.split("(reproduce: ", 1)[1].split(")\n", 1)[0]
    assert repro.startswith(f"PYTHONPATH={REPO} python -m oracle check ")
    again = subprocess.run(
        repro,
        shell=True,
        cwd=tmp_path,
        # the printed line says `python`: this interpreter's, as in an activated venv
        env=dict(
            os.environ,
            OMP_NUM_THREADS="1",
            PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 1 and "largest difference at index 17" in again.stdout, again.stderr


def test_timeout_names_the_call_that_hung(plugins, capsys):
    name = plugins("plug_hang", wrapped("import time; time.sleep(30)"))
    rc, out, err = run_main(["check", "--backend", f"{name}:make", "--timeout", "0.5", "--json", *SMALL], capsys)
    details = [c["detail"] for c in json.loads(out)["checks"] if not c["ok"]]  # the text folds them in one line
    assert rc == 1
    assert any("step() did not return within 0.5 s (--timeout)" in d for d in details), details
    assert any("not run: step() earlier did not return" in d for d in details), details  # later calls fail at once


def test_sys_exit_in_a_call_is_a_failure(plugins, capsys):
    name = plugins("plug_exit", wrapped("import sys; sys.exit(0)"))
    rc, out, err = run_main(["check", "--backend", f"{name}:make", *SMALL], capsys)
    assert rc == 1 and "step() called sys.exit(0)" in out


def test_no_supported_policy_compares_nothing_and_fails(plugins, capsys):
    name = plugins("plug_nopolicy", wrapped(policies=()))
    rc, out, err = run_main(["check", "--backend", f"{name}:make"], capsys)
    assert rc == 1 and "nothing compared" in out and "OK" not in out.splitlines()[-1]


def test_reference_that_raises_is_reported_as_the_reference(plugins, capsys):
    name = plugins("plug_badjudge", wrapped("raise RuntimeError('judge broke')"))
    rc, out, err = run_main(
        ["check", "--backend", "examples.plugin_backend:make_backend", "--reference", f"{name}:make", *SMALL], capsys
    )
    lines = [x for x in err.strip().splitlines() if not x.startswith("check: ")]  # after the progress lines
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: the reference --reference {name}:make failed: step() raised RuntimeError")
    assert "the backend raised" not in out + err


def test_backend_is_loaded_before_the_model_is_built(plugins, capsys, monkeypatch):
    import oracle.cli.cmd_check as cc

    monkeypatch.setattr(cc, "build_model", lambda *a: pytest.fail("the model was built before the backend loaded"))
    name = plugins("plug_raises", "def make():\n    raise RuntimeError('no device')\n")
    rc, out, err = run_main(
        ["check", "--backend", f"{name}:make", "--preset", "ouro-1.4b", "--allow-large", *SMALL], capsys
    )
    assert rc == 2 and "no device" in err


def test_list_cases(capsys):
    from oracle.cli.catalogue import default_cases

    rc, out, err = run_main(["check", "--list-cases"], capsys)
    assert rc == 0 and out.splitlines() == [c.name for c in default_cases(64)]


def test_record_a_backend_and_diff_by_its_recorded_row(tmp_path, capsys):
    a, b, c = (str(tmp_path / n) for n in ("a.json", "b.json", "c.json"))
    assert main(["trace", "record", *SMALL, "--mode", "block", "--out", a]) == 0
    assert (
        main(
            [
                "trace",
                "record",
                *SMALL,
                "--mode",
                "block",
                "--out",
                b,
                "--backend",
                "examples.plugin_backend:make_backend",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "trace",
                "record",
                *SMALL,
                "--mode",
                "block",
                "--out",
                c,
                "--backend",
                "examples.plugin_backend:make_faulty_backend",
            ]
        )
        == 0
    )
    meta = json.loads(Path(b).read_text())["meta"]
    assert meta["backend"] == "examples.plugin_backend:make_backend" and meta["tolerance_row"] == "float32"
    assert "--backend examples.plugin_backend:make_backend" in meta["reproduce"]
    rc, out, err = run_main(["trace", "diff", a, b, "--json"], capsys)
    assert rc == 0 and json.loads(out)["tolerance_row"] == "float32"
    rc, out, err = run_main(["trace", "diff", a, c], capsys)
    assert rc == 1 and "tolerance row 'float32' (recorded with B)" in out and "largest difference at index 17" in out


RAISES_BF16 = """
from kernels.backend import make_torch_cpu_bf16
class Session:
    def __init__(self, inner):
        self.inner = inner
    def __getattr__(self, name):
        return getattr(self.inner, name)
    def step(self, counts):
        raise RuntimeError("kernel crashed")
class Backend:
    fork_safe = FORK_SAFE
    def __init__(self):
        self.inner = make_torch_cpu_bf16()
        self.name = "raises-bf16"
    def __getattr__(self, name):
        return getattr(self.inner, name)
    def session(self, *args, **kwargs):
        return Session(self.inner.session(*args, **kwargs))
def make():
    return Backend()
"""


@pytest.mark.parametrize("fork_safe", [True, False])  # the probe in a forked child, or in this process
def test_a_bf16_backend_that_raises_fails_the_check_and_its_drift_probe(plugins, capsys, fork_safe):
    pytest.importorskip("torch")
    name = plugins(f"plug_raises_bf16_{fork_safe}", RAISES_BF16.replace("FORK_SAFE", str(fork_safe)))
    rc, out, err = run_main(["check", "--backend", f"{name}:make", *SMALL], capsys)
    assert rc == 1, (out, err)
    assert "the backend raised RuntimeError: kernel crashed" in out
    assert "drift probe: the backend raised RuntimeError: kernel crashed" in out
    assert "internal error" not in out + err
