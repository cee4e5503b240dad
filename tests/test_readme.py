"""Every command in the README's ```bash blocks runs here, on the CPU, in the order the README
gives them, in one temp folder (so `trace diff a.json b.json` reads what the lines before it
recorded). A line whose comment starts with `# exit 1` must exit 1, every other line 0. Lines
that need a GPU (torch-cuda, `bench` on its default CUDA device, the GPU make targets) must
stop without one: non-zero, with one line naming the missing CUDA device (`no CUDA device:
...` from make's guard, `error: ... no CUDA device ...` from the oracle). The few lines not
run (the set-up and the test suite itself) are listed in NOT_RUN with the reason.

Takes about two minutes on the 2-core CI machine (the jax and BF16 checks and the CPU dry run
of scripts/gpu_parity_full.py are most of it).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOT_RUN = {
    "python3 -m venv .venv && . .venv/bin/activate && make install": "the set-up (what .ci/run does first)",
    "make test": "the whole suite, of which this test is part (.ci/run)",
    "HYPOTHESIS_PROFILE=ci ORACLE_BACKEND=judge_jax.backend:make_jax_backend "
    "python -m pytest -q property_tests": "a part of `make test`",
    "python -m pytest -q tests/test_jax_model.py tests/test_jax_sharding.py": "tests `make test` runs",
}
GPU_MARKS = ("--backend torch-cuda", "make gpu-parity", "bench c-table", "bench rounds", "bench sweep")


def readme_commands(text: str) -> list[tuple[str, str]]:
    """(command, comment) for every line of the ```bash blocks; a trailing backslash joins lines."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command, _, comment = line.partition(" #")
            command = " ".join(command.split())
            if command:
                out.append((command, comment.strip()))
    return out


COMMANDS = readme_commands((REPO / "README.md").read_text())


def needs_gpu(command: str) -> bool:
    return any(m in command for m in GPU_MARKS) and "--device cpu" not in command


def shell_line(command: str) -> str:
    """The README line with this interpreter for `python` and the repository's scripts and Makefile."""
    words = shlex.split(command)
    if words[0] == "make":
        return shlex.join(["make", "-s", "-C", str(REPO), *words[1:], f"PY={sys.executable}"])
    words = [sys.executable if w == "python" else (str(REPO / w) if w.startswith("scripts/") else w) for w in words]
    return shlex.join(words)


def writers_of(command: str, workdir: Path) -> list[str]:
    """The README lines before `command` that write (--out FILE) a file it names that is not in
    workdir yet."""
    names = {w for w in shlex.split(command) if "." in w and not (workdir / w).exists()}
    before = [c for c, _ in COMMANDS[: [c for c, _ in COMMANDS].index(command)]]
    return [c for c in before if any(f"--out {n}" in c for n in names)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


def test_the_readme_has_commands_and_no_stale_skips():
    listed = [c for c, _ in COMMANDS]
    assert sum(c.startswith("python -m oracle") for c in listed) >= 20
    assert set(NOT_RUN) <= set(listed), set(NOT_RUN) - set(listed)


@pytest.mark.parametrize("command,comment", COMMANDS, ids=[c[:70] for c, _ in COMMANDS])
def test_readme_command(command, comment, workdir):
    if command in NOT_RUN:
        pytest.skip(NOT_RUN[command])
    gpu = needs_gpu(command)
    if gpu:
        from importlib.util import find_spec

        if find_spec("torch") is not None:
            import torch

            if torch.cuda.is_available():
                pytest.skip("a GPU is present: the GPU lines are gpu_tests' and scripts/gpu_run.sh's to run")
    env = {k: v for k, v in os.environ.items() if k != "ORACLE_BACKEND"}
    env |= {"PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    for earlier in writers_of(command, workdir):  # under xdist the line that wrote an input may have run elsewhere
        subprocess.run(shell_line(earlier), shell=True, cwd=workdir, env=env, capture_output=True, timeout=600)
    r = subprocess.run(
        shell_line(command), shell=True, cwd=workdir, env=env, capture_output=True, text=True, timeout=600
    )
    if gpu:
        lines = [x for x in r.stderr.splitlines() if not x.startswith("make")]
        assert r.returncode != 0, r.stdout[-2000:]
        assert len(lines) == 1 and ("no CUDA device" in lines[0]), r.stderr
        assert lines[0].startswith("no CUDA device:" if command.startswith("make") else "error: "), r.stderr
        return
    want = 1 if comment.startswith("exit 1") else 0
    assert r.returncode == want, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr


# ---- the scripts users run ----

SCRIPTS = sorted(p.name for p in (REPO / "scripts").glob("*.py"))
HELP_DRIVER = """
import contextlib, io, json, runpy, sys
out = {}
for path in sys.argv[1:]:
    buf, err, code = io.StringIO(), io.StringIO(), None
    sys.argv = [path, "--help"]
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code
    except BaseException as e:  # noqa: BLE001 -- reported per script
        code, err = repr(e), io.StringIO(repr(e))
    out[path] = [code, buf.getvalue()[:200], err.getvalue()[-2000:]]
print(json.dumps(out))
"""


def test_every_script_has_help():
    """`python scripts/X.py --help` prints its usage and exits 0, for every script: each run as
    __main__ in one process (the imports they share, torch and jax, paid once, not 24 times)."""
    import json

    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    paths = [str(REPO / "scripts" / name) for name in SCRIPTS]
    r = subprocess.run(
        [sys.executable, "-c", HELP_DRIVER, *paths], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    bad = {Path(p).name: v for p, v in got.items() if v[0] not in (0, None) or not v[1].startswith("usage:")}
    assert len(got) == len(SCRIPTS) >= 20 and not bad, bad


def load_script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), REPO / "scripts" / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_require_cuda_is_one_line_without_a_device(capsys, monkeypatch):
    mod = load_script("require_cuda.py")
    monkeypatch.setattr(mod, "cuda_problem", lambda: "torch sees no device")
    assert mod.main([]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["no CUDA device: torch sees no device"]


def test_plot_results_plots_the_given_sweep_into_out_only(tmp_path, monkeypatch):
    """With a stand-in for matplotlib (not a dependency of the test extra): the sweep the user
    names is read and the two files go to --out, nothing under docs/ changes."""
    import types

    saved = []

    class Axes:
        def __getattr__(self, name):
            return lambda *a, **k: None

    class Figure:
        def tight_layout(self):
            pass

        def savefig(self, path, **kw):
            Path(path).write_bytes(b"png")
            saved.append(Path(path))

    pyplot = types.SimpleNamespace(subplots=lambda **kw: (Figure(), Axes()))
    matplotlib = types.SimpleNamespace(use=lambda backend: None, pyplot=pyplot)
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)
    before = {p: p.stat().st_mtime_ns for p in (REPO / "docs").glob("*.png")}
    mod = load_script("plot_results.py")
    assert mod.main(["--sweep", str(REPO / "docs/results/sweep_planes_inflight2.json"), "--out", str(tmp_path)]) == 0
    assert sorted(saved) == [tmp_path / "c_table.png", tmp_path / "ratio_pred_vs_measured.png"]
    assert before == {p: p.stat().st_mtime_ns for p in (REPO / "docs").glob("*.png")}
    with pytest.raises(SystemExit, match="not a `bench sweep` result"):
        mod.main(["--sweep", str(REPO / "oracle/data/h200_ouro1.4b_head_ms.json"), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="not an existing folder"):
        mod.main(["--sweep", str(REPO / "docs/results/sweep_planes_inflight2.json"), "--out", str(tmp_path / "no")])
