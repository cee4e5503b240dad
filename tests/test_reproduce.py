"""Reproduce lines reproduce: a trace recorded for drawn settings carries a `trace record`
command that writes an identical trace (checked with `trace diff`), and a `check` command
whose case is the recorded case (same prompts, sampling parameters, rounds, d, D, policy).
Every built-in case's reproduce line selects exactly that case.

HYPOTHESIS_PROFILE: ci derandomized, 20 examples; dev random, 20; nightly 200.
"""

from __future__ import annotations

import os
import shlex

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from oracle.cli.catalogue import default_cases
from oracle.cli import build_parser, main

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
SETTINGS = settings(
    max_examples=200 if PROFILE == "nightly" else 20,
    deadline=None,
    derandomize=PROFILE == "ci",
    database=None if PROFILE != "dev" else settings.default.database,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from oracle.checkpoint import save_checkpoint
    from oracle.checkpoint import build_model

    m = build_model("tiny", 7)
    return str(save_checkpoint(tmp_path_factory.mktemp("ck") / "tiny7", m.cfg, m.weights))


@st.composite
def record_args(draw, checkpoint: str) -> list[str]:
    """A `trace record` argv (without --out) over the option grammar."""
    if draw(st.booleans()) and draw(st.booleans()):  # a quarter: a built-in case
        names = [c.name for c in default_cases(64)]
        model = ["--checkpoint", checkpoint] if draw(st.booleans()) else ["--preset", "tiny"]
        return [
            *model,
            "--seed",
            str(draw(st.integers(0, 5))),
            "--case",
            draw(st.sampled_from(names)),
            "--mode",
            draw(st.sampled_from(["block", "loop"])),
        ]
    D = draw(st.integers(2, 5))
    argv = ["--checkpoint", checkpoint] if draw(st.booleans()) else []
    argv += [
        "--seed",
        str(draw(st.integers(0, 10_000))),
        "--counts",
        ",".join(map(str, draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))),
        "-d",
        str(draw(st.integers(1, D - 1))),
        "-D",
        str(D),
        "--rounds",
        str(draw(st.integers(1, 3))),
        "--mode",
        draw(st.sampled_from(["block", "loop"])),
    ]
    optional = {
        "--policy": st.sampled_from(["sequential", "fixed"]),
        "--prompt-len": st.integers(1, 6),
        "--temperature": st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0.1, 2.0),
        "--top-k": st.integers(1, 63),
        "--top-p": st.floats(0.05, 1.0),
    }
    given = {flag: str(draw(values)) for flag, values in optional.items() if draw(st.booleans())}
    if given.get("--temperature") == "0.0":  # greedy: the filters and --policy fixed would do nothing
        given = {f: v for f, v in given.items() if f not in ("--top-k", "--top-p") and (f, v) != ("--policy", "fixed")}
    for flag, value in given.items():
        argv += [flag, value]
    return argv


def case_of(argv: list[str]):
    """The Case a `check`/`trace record` argv describes, through the real parser and checks."""
    from oracle.cli.round_case import custom_case

    args = build_parser().parse_args(argv)
    args.preflight(args)
    return custom_case(args)


def same_case(a, b) -> bool:
    return (a.prompts, a.params, a.rounds, a.d, a.D, a.policy) == (b.prompts, b.params, b.rounds, b.d, b.D, b.policy)


def quiet_main(argv, capsys) -> int:
    rc = main(argv)
    capsys.readouterr()
    return rc


@SETTINGS
@given(data=st.data())
def test_recorded_reproduce_line_regenerates_the_trace(data, checkpoint, tmp_path, capsys, monkeypatch):
    import json

    monkeypatch.delenv("ORACLE_BACKEND", raising=False)
    argv = data.draw(record_args(checkpoint))
    n = len(list(tmp_path.iterdir()))
    first, second = str(tmp_path / f"a{n}.json"), str(tmp_path / f"b{n}.json")
    assert quiet_main(["trace", "record", *argv, "--out", first], capsys) == 0
    meta = json.loads(open(first).read())["meta"]
    words = shlex.split(meta["reproduce"])
    assert words[:5] == ["python", "-m", "oracle", "trace", "record"] and words[-2:] == ["--out", first]
    for flag, value in zip(argv, argv[1:]):  # every given option is in the line
        if flag.startswith("-") and flag != "--checkpoint":
            assert flag in words
    rerun = words[3:-1] + [second]
    assert quiet_main(rerun, capsys) == 0
    assert quiet_main(["trace", "diff", first, second], capsys) == 0
    check = shlex.split(meta["check"])
    assert check[3] == "check"
    assert same_case(case_of(check[3:]), case_of(["check", *[w for w in argv if w not in ("--mode", "block", "loop")]]))


def test_default_case_reproduce_lines_select_that_case():
    for case in default_cases(64):
        words = shlex.split(case.reproduce)
        assert words[:4] == ["python", "-m", "oracle", "check"] and "--case" in words
        assert same_case(case_of(words[3:]), case)
        assert case_of(words[3:]).name == case.name


def test_reproduce_line_names_the_checkpoint_and_seed(checkpoint):
    case = case_of(["check", "--checkpoint", checkpoint, "--seed", "3", "--prompt-len", "4", "--rounds", "2"])
    words = shlex.split(case.reproduce)
    assert words[words.index("--checkpoint") + 1] == checkpoint and "--preset" not in words
    assert words[words.index("--seed") + 1] == "3" and words[words.index("--prompt-len") + 1] == "4"


def oracle_args(words: list[str]) -> list[str]:
    """The words after `python -m oracle` of a reproduce line, past a leading PYTHONPATH=DIR (a
    plug-in found through the current folder: `examples.` run from the repository)."""
    while "=" in words[0]:
        words = words[1:]
    assert words[:3] == ["python", "-m", "oracle"], words
    return words[3:]


def test_a_backend_recording_reproduces_with_its_backend(tmp_path, capsys, monkeypatch):
    """`trace record --backend SPEC`: the reproduce line names the backend and writes the same
    trace, which `trace diff` judges by the recorded tolerance row."""
    import json

    monkeypatch.delenv("ORACLE_BACKEND", raising=False)
    first, second = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    spec = "examples.plugin_backend:make_backend"
    assert (
        quiet_main(["trace", "record", "--counts", "3,1", "--rounds", "2", "--backend", spec, "--out", first], capsys)
        == 0
    )
    meta = json.loads(open(first).read())["meta"]
    words = shlex.split(meta["reproduce"])
    assert words[words.index("--backend") + 1] == spec and meta["tolerance_row"] == "float32"
    assert quiet_main(oracle_args(words)[:-1] + [second], capsys) == 0
    assert quiet_main(["trace", "diff", first, second, "--tolerance", "exact"], capsys) == 0


def test_a_diff_reproduce_line_records_into_a_new_file_and_reproduces_the_diff(tmp_path, capsys, monkeypatch):
    """`trace diff A B`'s failure line re-records A into a new file (A and B untouched), then
    diffs it against B: the same verdict, the same failure."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    monkeypatch.delenv("ORACLE_BACKEND", raising=False)
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    spec = "examples.plugin_backend:make_faulty_backend"
    assert quiet_main(["trace", "record", "--counts", "2,1", "--rounds", "1", "--out", a], capsys) == 0
    assert (
        quiet_main(["trace", "record", "--counts", "2,1", "--rounds", "1", "--backend", spec, "--out", b], capsys) == 0
    )
    before = {p: Path(p).read_bytes() for p in (a, a + ".npz", b, b + ".npz")}
    assert main(["trace", "diff", a, b, "--json"]) == 1
    detail = next(c["detail"] for c in json.loads(capsys.readouterr().out)["checks"] if not c["ok"])
    line = detail.split("(reproduce: ", 1)[1][:-1]
    record, _, rediff = line.partition(" && ")
    words = shlex.split(record)
    new = words[-1]
    assert words[-2] == "--out" and new not in (a, b) and new.endswith(".rerun.json")
    assert shlex.split(rediff)[3:] == ["trace", "diff", new, b]
    repo = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        line.replace("python -m oracle", f"{shlex.quote(sys.executable)} -m oracle"),
        shell=True,
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 1 and detail.split(" (reproduce: ")[0] in run.stdout, (run.stdout, run.stderr)
    assert {p: Path(p).read_bytes() for p in before} == before  # the inputs are untouched
    assert Path(new).exists()


def test_a_recording_with_a_timeout_reproduces_with_it(tmp_path, capsys, monkeypatch):
    import json

    monkeypatch.delenv("ORACLE_BACKEND", raising=False)
    out = str(tmp_path / "t.json")
    assert (
        quiet_main(
            [
                "trace",
                "record",
                "--counts",
                "2",
                "--rounds",
                "1",
                "--backend",
                "examples.plugin_backend:make_backend",
                "--timeout",
                "7.5",
                "--out",
                out,
            ],
            capsys,
        )
        == 0
    )
    words = shlex.split(json.loads(open(out).read())["meta"]["reproduce"])
    assert words[words.index("--timeout") + 1] == "7.5"
    assert quiet_main(oracle_args(words)[:-1] + [str(tmp_path / "again.json")], capsys) == 0
