"""The logits-processor options of `check` and `trace record`: bad values are refused in one
`error:` line with exit 2, good ones reach every request of the custom case and its reproduce
line, and the check of a case with every processor passes for greedy and sampled requests and
both RNG policies."""

from __future__ import annotations

import shlex

import pytest

from oracle.cli import main
from oracle.cli.round_case import custom_case

PROCS = [
    "--repetition-penalty",
    "1.3",
    "--presence-penalty",
    "0.5",
    "--frequency-penalty",
    "0.2",
    "--logit-bias",
    "5:2.0,9:-1.5",
    "--bad-words",
    "3,4/7",
    "--min-tokens",
    "4",
]

BAD = [
    (["--repetition-penalty", "0"], "repetition_penalty"),
    (["--repetition-penalty", "-1"], "repetition_penalty"),
    (["--repetition-penalty", "nan"], "finite"),
    (["--presence-penalty", "2.5"], "presence_penalty"),
    (["--frequency-penalty", "-3"], "frequency_penalty"),
    (["--logit-bias", "5:x"], "token:bias"),
    (["--logit-bias", "5"], "token:bias"),
    (["--logit-bias", "5:1,5:2"], "twice"),
    (["--logit-bias", "5:inf"], "finite"),
    (["--logit-bias", "5:101"], "[-100, 100]"),
    (["--logit-bias", "100000:1"], "vocabulary"),
    (["--bad-words", "3,,4"], "words"),
    (["--bad-words", "3//4"], "words"),
    (["--bad-words", "3,a"], "words"),
    (["--bad-words", "100000"], "vocabulary"),
    (["--min-tokens", "-1"], "minimum"),
    (["--logit-bias", "-1:1"], "token id"),
    (["--frequency-penalty", "-2.5"], "frequency_penalty"),
    (["--min-tokens", "5", "--max-tokens", "3"], "exceeds max_tokens"),
]


@pytest.mark.parametrize("argv,words", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_processor_values_are_refused_in_one_line(argv, words, capsys):
    try:
        rc = main(["check", *argv])
    except SystemExit as e:  # argparse's own refusals
        rc = e.code
    out, err = capsys.readouterr()
    err = err.strip().splitlines()
    assert rc == 2 and out == "", err
    assert len(err) == 1 and err[0].startswith("error:") and words in err[0], err


def test_min_tokens_without_stop_tokens_is_refused(capsys):
    assert main(["check", "--min-tokens", "2", "--counts", "2", "--rounds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--min-tokens 2" in err[0] and "without --stop-tokens it has no effect" in err[0]


def _args(argv):
    from oracle.cli import build_parser

    args = build_parser().parse_args(["check", *argv])
    args.preflight(args)
    return args


def test_every_request_of_the_custom_case_gets_the_processors_and_the_reproduce_line_carries_them():
    case = custom_case(_args([*PROCS, "--stop-tokens", "11"]))
    for p in case.params:
        assert (p.repetition_penalty, p.presence_penalty, p.frequency_penalty) == (1.3, 0.5, 0.2)
        assert p.logit_bias == ((5, 2.0), (9, -1.5)) and p.bad_words == ((3, 4), (7,)) and p.min_tokens == 4
    assert {p.greedy for p in case.params} == {True, False}  # the mixed batch
    again = custom_case(_args(shlex.split(case.reproduce)[4:]))
    assert again.params == case.params and again.reproduce == case.reproduce


@pytest.mark.parametrize("temperature", [None, "0", "1.0"])
@pytest.mark.parametrize("policy", ["sequential", "fixed"])
def test_a_case_with_every_processor_passes(temperature, policy, capsys):
    if (temperature, policy) == ("0", "fixed"):
        pytest.skip("--policy fixed with --temperature 0 is refused: greedy requests draw no uniforms")
    extra = [] if temperature is None else ["--temperature", temperature]
    assert main(["check", *PROCS, "--stop-tokens", "11,12", "--policy", policy, *extra]) == 0
    assert "OK" in capsys.readouterr().out


def test_the_processors_change_the_tokens():
    """The case is not vacuous: the processors change what the reference emits."""
    from oracle.checkpoint import build_model
    from oracle.judge.runner import judge_run

    model = build_model("tiny", 0, None)
    plain = custom_case(_args(["--stop-tokens", "11,12", "--temperature", "0"]))
    procs = custom_case(_args([*PROCS, "--stop-tokens", "11,12", "--temperature", "0"]))
    emitted = lambda case: [t.emitted for t in judge_run(model, case, "block").traces]
    assert emitted(plain) != emitted(procs)


@pytest.mark.parametrize("backend", ["torch-cpu", "torch-cpu-bf16", "jax"])
def test_the_processor_case_passes_on_every_ci_backend(backend, capsys):
    """The issue's case (plus stop tokens, so min_tokens bites) on the backends CI can run, judged
    by each one's tolerance row: sampled and greedy requests in one batch."""
    pytest.importorskip("jax" if backend == "jax" else "torch")
    assert main(["check", *PROCS, "--stop-tokens", "11,12", "--backend", backend]) == 0
    assert "OK" in capsys.readouterr().out
