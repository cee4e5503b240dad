"""Issue 62, the user's path without surprises: a plug-in that prints, raises KeyboardInterrupt, signals
the oracle or returns the wrong type; a run cancelled by SIGTERM or SIGHUP; outputs written whole; a
closed stdout, an ASCII-only terminal; a session that breaks the contract; piped progress; the time
estimate on a busy machine; checkpoint keys the reference does not model. Every run of the CLI in a
child process has its own time limit (subprocess timeout), and the module a time limit per test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from oracle.cli import main

pytestmark = pytest.mark.time_limit(120)  # runs plug-ins: a hang fails here, not the suite (conftest.py)

REPO = Path(__file__).resolve().parents[1]
CHECK = ["check", "--counts", "2,1", "--rounds", "1", "--no-shrink"]

WRAP = """
import os, signal, subprocess, sys, ctypes
from examples.plugin_backend import PluginBackend, PluginSession
{top}

class S(PluginSession):
    def step(self, counts):
{step}
        return self.inner.step(counts)


class B(PluginBackend):
    def session(self, *args, **kwargs):
        s = super().session(*args, **kwargs)
        return S(s.inner, s.perturb)


def make():
    return B(None)
"""


def plugin(tmp_path: Path, name: str, step: str, top: str = "") -> str:
    """A plug-in module NAME.py in tmp_path whose session's step() runs `step` first (an indented block)."""
    body = "\n".join("        " + line for line in step.strip().splitlines())
    (tmp_path / f"{name}.py").write_text(WRAP.format(top=top, step=body))
    return f"{name}:make"


def oracle(argv, tmp_path, timeout=60, **kw):
    """python -m oracle ARGV in a child process, the plug-ins of tmp_path importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("ORACLE_BACKEND",)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path)])
    env.update(kw.pop("env", {}))
    return subprocess.run(
        [sys.executable, "-m", "oracle", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def run_main(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ORACLE_BACKEND", raising=False)
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


# ---- 1. a plug-in cannot corrupt the oracle's output ----


def test_a_printing_plugin_leaves_stdout_json_and_its_lines_on_stderr_prefixed_and_bounded(tmp_path):
    spec = plugin(
        tmp_path,
        "loud_plugin",
        'print("hello from step()")\n'
        'os.write(1, b"a raw write to fd 1\\n")\n'
        'ctypes.CDLL(None).puts(b"a C write")\n'
        'for n in range(100):\n    print("line", n, file=sys.stderr)',
        top='print("banner at import")',
    )
    run = oracle([*CHECK, "--backend", spec, "--json", "--quiet"], tmp_path)
    assert run.returncode == 0, run.stderr
    json.loads(run.stdout)  # one JSON object: nothing of the plug-in's in it
    check = subprocess.run([sys.executable, "-m", "json.tool"], input=run.stdout, capture_output=True, text=True)
    assert check.returncode == 0
    lines = run.stderr.splitlines()
    mine = [x for x in lines if x.startswith("plug-in: ")]
    assert mine == lines, run.stderr  # every line of stderr is the plug-in's, prefixed
    for text in ("banner at import", "hello from step()", "a raw write to fd 1", "a C write", "line 0"):
        assert f"plug-in: {text}" in lines, text
    from oracle.runtime.plugin_output import MAX_LINES

    assert len(mine) <= MAX_LINES + 2  # the cap, and one note per plug-in process
    notes = [x for x in mine if x.startswith("plug-in: ... ") and x.endswith("more lines not shown")]
    assert (
        len(notes) == 1 and int(notes[0].split()[2]) + len(mine) - 1 == 1 + 2 * 103
    )  # every line counted: banner, 2 x (3 + 100)


def test_a_keyboard_interrupt_inside_the_plugin_is_its_failure(tmp_path, capsys, monkeypatch):
    spec = plugin(tmp_path, "kbint_plugin", 'raise KeyboardInterrupt("the plug-in\'s own")')
    rc, out, err = run_main([*CHECK, "--backend", spec, "--quiet"], capsys, monkeypatch, tmp_path)
    assert rc == 1, (out, err)
    assert "FAIL [backend]" in out and "raised KeyboardInterrupt: the plug-in's own" in out


def test_a_plugin_that_sends_sigterm_to_the_oracle_fails_as_the_backend(tmp_path):
    spec = plugin(tmp_path, "term_plugin", "os.kill(os.getppid(), signal.SIGTERM)\nimport time\ntime.sleep(30)")
    run = oracle([*CHECK, "--backend", spec, "--quiet"], tmp_path)
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "FAIL [backend]" in run.stdout and "sent SIGTERM to the oracle's process" in run.stdout
    assert "interrupted" not in run.stderr


def test_a_step_returning_a_str_is_named_as_the_plugins_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "str_plugin.py").write_text(
        WRAP.format(top="", step="        self.inner.step(counts)\n        return 'a str'")
    )
    rc, out, err = run_main([*CHECK, "--backend", "str_plugin:make", "--quiet"], capsys, monkeypatch, tmp_path)
    assert rc == 1 and "the backend's step() returned str, expected RoundTrace" in out, (out, err)
    assert "AttributeError" not in out


# ---- 2. cancellation leaves nothing running ----


def _descendants(root: int) -> set[int]:
    """Every process below root, read from /proc (parent pids)."""
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = set(), [root]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parent.items() if pp == p} - found
        found |= kids
        todo += kids
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie runs nothing


def _of_run(tmp_path: Path) -> list[int]:
    """The live processes of a run in tmp_path: its working folder, or tmp_path in its command line."""
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                mine = (
                    os.readlink(entry / "cwd") == str(tmp_path)
                    or str(tmp_path).encode() in (entry / "cmdline").read_bytes()
                )
            except OSError:
                continue
            if mine and _running(int(entry.name)):
                left.append(int(entry.name))
    return left


SPIN = (  # step() starts a spinner (tmp_path in its command line) and spins; a line per step begun
    'p = subprocess.Popen([sys.executable, "-c", "while True: pass", {tmp!r}])\n'
    'open({mark!r}, "a").write(f"{{p.pid}} {{os.getpid()}} {{os.getppid()}}\\n")\n'
    "while True:\n    pass"
)
# a bfloat16 plug-in that may be forked: the drift probe runs in a forked verdict child, whose own
# copy of the plug-in (a grandchild of the oracle, in a group of its own) spins beside the cases'
FORKED_PROBE = "\nB.dtype, B.fork_safe = 'bfloat16', True\n"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="lists processes through /proc")
@pytest.mark.parametrize(
    "signo,code,probe",
    [(signal.SIGTERM, 143, False), (signal.SIGHUP, 129, False), (signal.SIGTERM, 143, True)],
    ids=["SIGTERM", "SIGHUP", "SIGTERM-forked-probe"],
)
def test_sigterm_or_sighup_during_a_spinning_plugin_leaves_no_process(signo, code, probe, tmp_path):
    mark = tmp_path / "spinning"
    spec = plugin(tmp_path, "spin_plugin", SPIN.format(tmp=str(tmp_path), mark=str(mark)))
    if probe:
        with open(tmp_path / "spin_plugin.py", "a") as f:
            f.write(FORKED_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "ORACLE_BACKEND"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "oracle", *CHECK, "--backend", spec, "--quiet"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def steps() -> list[list[int]]:  # [spinner, plug-in process, its parent] of each step() begun
        return [[int(w) for w in line.split()] for line in (mark.read_text() if mark.exists() else "").splitlines()]

    def spinning() -> bool:  # the cases' plug-in spins, and with probe the forked probe's copy too
        parents = {line[2] for line in steps()}
        return proc.pid in parents and (not probe or len(parents) >= 2)

    try:
        deadline = time.monotonic() + 60
        while not spinning() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spinning(), f"the plug-in never spun as planned: {steps()}"
        run = _descendants(proc.pid)
        assert {pid for line in steps() for pid in line[:2]} <= run and len(run) >= 2
        proc.send_signal(signo)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == code, (proc.returncode, err)
        assert err.strip() == f"error: interrupted by {signal.Signals(signo).name}", err
        time.sleep(2)
        assert [pid for pid in run if _running(pid)] == [], "still running 2 s later"
        assert _of_run(tmp_path) == [], "a process of the run still running 2 s later"
    finally:  # a failing run leaves no spinner behind to slow the rest of the suite
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in {*_of_run(tmp_path), *(pid for line in steps() for pid in line[:2])}:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_no_fork_begins_once_a_cancel_has_taken_the_gate():
    """A thread that would start a verdict child while a cancel runs waits at the gate (forking),
    so the cancel's stop_children cannot miss a child started beside it."""
    import threading

    from oracle.runtime import cancel
    from oracle.judge.plans import worker

    started: list = []
    gate = cancel._GATE[0]
    gate.acquire()  # what cancel() does first
    thread = threading.Thread(target=lambda: started.append(worker.Child(os.getpid, (), {})), daemon=True)
    try:
        thread.start()
        thread.join(0.5)
        assert thread.is_alive() and started == [], "a fork began while the gate was held"
    finally:
        gate.release()
        thread.join(10)
    assert started and started[0].result() == started[0].pid  # the child ran once the gate opened


def test_a_cancelled_run_removes_its_temporary_files(tmp_path):
    from oracle import atomic
    from oracle.runtime import cancel

    with atomic.replacing(tmp_path / "out.json", tmp_path / "out.json.npz") as temps:
        assert all(Path(t).exists() for t in temps)
        cancel.remove_temporary()  # what a SIGTERM does before it exits
        assert not any(Path(t).exists() for t in temps)
        Path(temps[0]).write_text("x")  # the block may finish; its renames fail
        Path(temps[1]).write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.json.npz"]


# ---- 3. outputs checked before the work, written whole or not at all ----


def test_trace_cut_onto_its_input_leaves_the_input_as_it_was(tmp_path, capsys, monkeypatch):
    a = tmp_path / "a.json"
    assert main(["trace", "record", "--counts", "2,1", "--rounds", "2", "--out", str(a)]) == 0
    before = a.read_bytes(), Path(f"{a}.npz").read_bytes()
    rc, out, err = run_main(["trace", "cut", str(a), "--round", "0", "--out", str(a)], capsys, monkeypatch, tmp_path)
    assert rc == 2 and err.startswith(f"error: --out {a}: ") and "is an input of the command" in err
    assert (a.read_bytes(), Path(f"{a}.npz").read_bytes()) == before


def test_a_failed_trace_write_leaves_nothing(tmp_path, capsys, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", disk_full)
    out = tmp_path / "t.json"
    rc, _, err = run_main(["trace", "record", "--counts", "2,1", "--out", str(out)], capsys, monkeypatch, tmp_path)
    assert rc == 2 and "No space left on device" in err
    assert list(tmp_path.glob("*t.json*")) == []  # no JSON, no NPZ, no temporary file


def test_a_saved_checkpoint_and_a_trace_are_written_with_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        assert main(["model", "--preset", "tiny", "--save", str(tmp_path / "ck")]) == 0
        assert main(["trace", "record", "--counts", "2", "--out", str(tmp_path / "t.json")]) == 0
    finally:
        os.umask(old)
    for p in [*(tmp_path / "ck").iterdir(), tmp_path / "t.json", tmp_path / "t.json.npz"]:
        assert p.stat().st_mode & 0o777 == 0o644, p
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # no temporary file left


# ---- 4. bad values, encodings, a closed stdout ----


def test_names_in_any_encoding_and_a_closed_stdout(tmp_path):
    a = tmp_path / "trace_\u00fc_\u65e5\u672c.json"
    assert main(["trace", "record", "--counts", "2,1", "--rounds", "2", "--out", str(a)]) == 0
    ascii_env = {"PYTHONIOENCODING": "ascii"}
    cut = oracle(["trace", "cut", a.name, "--round", "0", "--out", "c\u00e9.json"], tmp_path, env=ascii_env)
    assert cut.returncode == 0 and "trace_\\xfc_\\u65e5\\u672c.json" in cut.stdout, cut.stderr
    missing = oracle(["trace", "diff", a.name, "b\u00e9.json"], tmp_path, env=ascii_env)
    assert missing.returncode == 2 and missing.stderr == "error: trace file b\\xe9.json does not exist\n"
    closed = oracle([*CHECK], tmp_path, preexec_fn=lambda: os.close(1))
    assert (
        closed.returncode == 2
        and closed.stderr.startswith("error: stdout is closed")
        and "Traceback" not in closed.stderr
    )
    assert len(closed.stderr.splitlines()) == 1


def test_a_temperature_at_the_edge_of_the_range_runs_without_numeric_warnings(tmp_path):
    run = oracle(["check", "--counts", "2,1", "--rounds", "1", "--temperature", "1e30", "--quiet"], tmp_path)
    assert run.returncode == 0 and run.stderr == "", run.stderr


# ---- 5. the session's contract at load ----


def test_a_session_whose_add_takes_no_depths_is_refused_before_any_case(tmp_path, capsys, monkeypatch):
    (tmp_path / "nodepths_plugin.py").write_text(
        WRAP.format(top="", step="        pass").replace(
            "class B(PluginBackend):",
            "    def add(self, rid, prompt, params, replay=None):\n"
            "        return self.inner.add(rid, prompt, params, replay=replay)\n\n\nclass B(PluginBackend):",
        )
    )
    rc, out, err = run_main([*CHECK, "--backend", "nodepths_plugin:make", "--quiet"], capsys, monkeypatch, tmp_path)
    assert rc == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and "session.add does not take the runner's arguments" in err and "depths" in err


@pytest.mark.time_limit(1)
def test_a_plugin_call_that_hangs_fails_its_test_at_the_time_limit(tmp_path, capsys, monkeypatch):
    """The guard itself (conftest.py time_limit): a plug-in call that never returns (no --timeout)
    ends this test at its 1 s limit with pytest's failure, which the oracle does not catch."""
    from oracle.runtime import isolated

    spec = plugin(tmp_path, "hang_plugin", "import time\ntime.sleep(3600)")
    t0 = time.monotonic()
    try:
        with pytest.raises(pytest.fail.Exception, match="ran past its time limit of 1 s"):
            run_main([*CHECK, "--backend", spec, "--quiet"], capsys, monkeypatch, tmp_path)
    finally:
        isolated.stop_all()  # the hung child: killed, its call's thread let go
    assert time.monotonic() - t0 < 60  # seconds, not the 25 minutes a broken guard hung for (loaded CI: 25 s)


# ---- 6. progress that moves; the estimate on a busy machine ----


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_piped_progress_prints_a_line_per_case_and_a_long_cases_steps(monkeypatch):
    import io

    from oracle.cli import progress as progress_mod

    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "perf_counter", clock)
    out = io.StringIO()
    p = progress_mod.Progress(out)
    for n in range(9):  # fast cases: a line each, their steps not
        p.phase("case", f"{n + 1}/9 c{n}")
        for step in ("block round", "loop round", "compare"):
            clock.t += 0.01
            p.phase("case", f"{n + 1}/9 c{n}: {step}")
    assert [x.split(" (")[0] for x in out.getvalue().splitlines()] == [f"check: case: {n + 1}/9 c{n}" for n in range(9)]
    out.truncate(0), out.seek(0)
    p.phase("case", "1/1 ouro")
    for step, took in (("block round", 0.5), ("loop round", 40), ("compare", 40), ("cache-free recompute", 0.5)):
        clock.t += took  # a long case: each step shows as it starts, once the case has run STEP_S
        p.phase("case", f"1/1 ouro: {step}")
    lines = out.getvalue().splitlines()
    assert [x.split(" (")[0] for x in lines] == ["check: case: 1/1 ouro"] + [
        f"check: case: 1/1 ouro: {s}" for s in ("loop round", "compare", "cache-free recompute")
    ]


def test_the_estimate_counts_the_machines_load(monkeypatch, capsys):
    from oracle.cli import environment, limits
    from oracle.config import preset

    monkeypatch.setattr(environment, "usable_cores", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    limits.check_work(preset("ouro-1.4b"), [2], 4, 1, 8)  # about 69 s idle: under the limit
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 6.0, 6.0))
    with pytest.raises(Exception, match=r"about \d+ s at load 6.0 on 2 cores .*--allow-large"):
        limits.check_work(preset("ouro-1.4b"), [2], 4, 1, 8)
    rc = main(["check", "--preset", "ouro-1.4b", "--counts", "2", "--rounds", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: this run would take about") and "at load 6.0 on 2 cores" in err


# ---- 7. checkpoints: keys not modelled refused, absent keys as Ouro's OuroConfig ----


def test_absent_config_keys_take_ouros_defaults():
    from oracle.config import ModelConfig

    base = {"vocab_size": 64, "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1}
    cfg = ModelConfig.from_hf({**base, "num_attention_heads": 32})
    assert cfg.rope_theta == 10000.0 and cfg.num_kv_heads == 32
    with pytest.raises(Exception, match="num_heads 4 is not a multiple of num_kv_heads 32"):
        ModelConfig.from_hf({**base, "num_attention_heads": 4})
    for key, value in (
        ("rope_scaling", {"type": "yarn"}),
        ("use_sliding_window", True),
        ("layer_types", ["sliding_attention"]),
    ):
        with pytest.raises(Exception, match=f"config.json: {key}"):
            ModelConfig.from_hf({**base, "num_attention_heads": 32, key: value})
    assert ModelConfig.from_hf({**base, "num_attention_heads": 32, "rope_scaling": None, "use_sliding_window": False})
