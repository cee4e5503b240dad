"""Fuzz the CLI itself: argument lists drawn from the real option grammar (every command and
option of oracle.cli.build_parser(), with valid, invalid and garbage values) and as random
tokens. No run may print a traceback or end with exit code 3 (an internal error); each ends 0,
1 or 2, and a 2 ends with one `error: ...` line.

Runs in-process (oracle.cli.main) in a temp working directory. The size limits keep drawn
runs small; the value pools leave out `--allow-large` (it lifts them) and `--device cpu` with
large presets is refused by the limits, so every example stays well under a second.
HYPOTHESIS_PROFILE: ci derandomized; nightly 10x the examples.
"""

from __future__ import annotations

import argparse
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from oracle.cli.argtypes import csv_ints, finite_float, probability
from oracle.cli import build_parser, main

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
SCALE = 10 if PROFILE == "nightly" else 1
SKIP_OPTIONS = {"--allow-large", "--help", "-h"}

INTS = ["-1", "0", "1", "2", "3", "5", "64", "65", "1000000", "x", "", "1.5", "nan", "--", "0x10"]
CSV = ["5,,3", "", ",", "3,1", "5,3,1", "0", "-1,2", "1,2,3", "100000", "a", "2,2,2,2,2,2,2,2", "9"]
FLOATS = ["-1", "0", "0.5", "1", "1.5", "nan", "inf", "-inf", "x", "", "1e309"]
TEXT = [
    "tiny",
    "bogus",
    "",
    "/nonexistent/x",
    ".",
    "out.json",
    "ragged (5,3,1) d=2 D=4",
    "cuda",
    "tpu",
    "cuda:x",
    "cuda:7",
    "exact",
    "bfloat16",
    "sequential",
    "fixed",
    "loop",
    "block",
]


def commands(parser=None, path=()):
    """{command path: [actions]} for every leaf parser of the CLI."""
    parser = parser or build_parser()
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out |= commands(sub, path + (name,))
    if path and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        out[path] = [a for a in parser._actions if not set(a.option_strings) & SKIP_OPTIONS]
    return out


GRAMMAR = commands()


def values_for(action) -> st.SearchStrategy[str]:
    t = action.type
    if action.choices:
        pool = [str(c) for c in action.choices] + ["bogus", ""]
    elif t is csv_ints:
        pool = CSV
    elif t in (finite_float, probability, float):
        pool = FLOATS
    elif t is int or getattr(t, "__name__", "").startswith("integer"):
        pool = INTS
    else:
        pool = TEXT
    return st.sampled_from(pool)


@st.composite
def grammar_argv(draw) -> list[str]:
    path = draw(st.sampled_from(sorted(GRAMMAR)))
    actions = GRAMMAR[path]
    argv = list(path)
    for action in draw(st.lists(st.sampled_from(actions), max_size=5)) if actions else []:
        if not action.option_strings:  # a positional: a path or garbage
            argv.append(draw(st.sampled_from(TEXT)))
            continue
        argv.append(draw(st.sampled_from(action.option_strings)))
        if action.nargs != 0:
            if draw(st.integers(0, 9)) > 0:  # sometimes leave the value out
                argv.append(draw(values_for(action)))
    if draw(st.booleans()):
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(TEXT + INTS + ["--bogus", "-"])))
    return argv


ALL_WORDS = sorted(
    {w for p in GRAMMAR for w in p} | {o for acts in GRAMMAR.values() for a in acts for o in a.option_strings}
)
random_argv = st.lists(st.sampled_from(ALL_WORDS + CSV + FLOATS + INTS + TEXT) | st.text(max_size=6), max_size=8)


def run(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def check_outcome(argv, rc, out, err) -> None:
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    assert rc in (0, 1, 2), (argv, rc, err)
    if rc == 2:
        lines = err.strip().splitlines()
        assert lines and lines[-1].startswith("error: "), (argv, err)


FUZZ = settings(
    deadline=None,
    derandomize=PROFILE == "ci",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORACLE_BACKEND", raising=False)
    return tmp_path


@settings(FUZZ, max_examples=250 * SCALE)
@given(argv=grammar_argv())
def test_grammar_argv_never_crashes(argv, sandbox, capsys):
    check_outcome(argv, *run(argv, capsys))


@settings(FUZZ, max_examples=150 * SCALE)
@given(argv=random_argv)
def test_random_tokens_never_crash(argv, sandbox, capsys):
    check_outcome(argv, *run(argv, capsys))


def test_grammar_covers_every_command():
    assert set(GRAMMAR) == {
        ("check",),
        ("schedule",),
        ("model",),
        ("cost",),
        ("trace", "record"),
        ("trace", "diff"),
        ("trace", "cut"),
        ("bench", "c-table"),
        ("bench", "rounds"),
        ("bench", "sweep"),
        ("sampler",),
        ("localize",),
    }


def test_every_option_has_help_with_its_default_and_every_command_a_description():
    parser = build_parser()

    def leaves(p, path=()):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        yield path, p
        for a in subs:
            for name, sub in a.choices.items():
                yield from leaves(sub, path + (name,))

    for path, p in leaves(parser):
        assert p.description, f"{' '.join(path) or 'top level'}: no description"
        text = p.format_help()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction) or a.help == argparse.SUPPRESS:
                continue
            assert a.help, f"{' '.join(path)} {a.option_strings or a.dest}: no help line"
            if a.option_strings and a.nargs != 0 and a.default is not None and "--help" not in a.option_strings:
                assert "default" in p.formatter_class(p.prog)._get_help_string(a), (path, a.option_strings)
        assert "Traceback" not in text


def test_version_and_help_exit_0(capsys):
    from oracle.cli import package_version

    assert main(["--version"]) == 0
    assert package_version() in capsys.readouterr().out
    assert main(["check", "--help"]) == 0
    assert "(default: 0)" in capsys.readouterr().out
