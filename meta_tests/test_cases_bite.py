"""The built-in cases bite (docs/DESIGN.md, "The reference check"): the mask and processor cases
ban, bias and penalise the reference's own top choices (oracle/cli/catalogue.py derived_params),
so a chain step skipped on the draft rows only, or on the verification rows only, fails the
default `check --backend`; and a judge whose decision contradicts its own rule fails rather than
being excused as a near tie (oracle/judge/comparison/decisions.py contradicted_decision).

Each fault is judged on the built-in cases that carry the step (the default check runs them among
the others); one is also run through the CLI as a person would.
"""

from __future__ import annotations

import json

import pytest

from meta_tests import faulty, faulty_judge
from oracle.checkpoint import build_model
from oracle.cli import main
from oracle.cli.catalogue import default_cases
from oracle.judge.comparison import compare
from oracle.judge.plans.plan import backend_plan
from oracle.judge.plans.verdict import judge


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", 0)


@pytest.fixture(scope="module")
def biting(tiny):
    """The built-in mask and processor cases (params derived from the model)."""
    cases = [c for c in default_cases(tiny.cfg.vocab_size) if c.derive is not None]
    assert {c.name.split(" ")[0] for c in cases} == {"banned", "logits"}, [c.name for c in cases]
    return cases


def failures(out) -> list:
    return [c for c in out["checks"] if not c["ok"]]


def test_torch_mask_skipped_on_drafts_fails_the_default_check(capsys):
    pytest.importorskip("torch")
    rc = main(
        [
            "check",
            "--backend",
            "meta_tests.faulty_chain:make_skip_draft_mask_bf16",
            "--no-drift",
            "--json",
            "--no-shrink",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and not out["ok"]
    tokens = [c for c in failures(out) if c["name"].endswith("tokens")]
    assert tokens and tokens[0]["name"].startswith("banned and allowed token ids"), failures(out)
    assert "draft token of offset" in tokens[0]["detail"] and "--case" in tokens[0]["detail"]


@pytest.mark.parametrize("rows", ["draft", "verify"])
@pytest.mark.parametrize(
    "step", ["mask", "bad_words", "min_tokens", "logit_bias", "repetition", "presence", "frequency"]
)
def test_torch_chain_step_skipped_on_one_side_fails(tiny, biting, step, rows):
    pytest.importorskip("torch")
    from meta_tests import faulty_chain

    out = judge(backend_plan(faulty_chain.make(step, rows), tiny, biting, probe="off")).to_json()
    bad = failures(out)
    assert bad, f"skip_{rows}.{step} passed the built-in cases"
    # a token changed (or the backend's own decision is not the chain's on its own logits)
    assert any(c["name"].endswith(("tokens", "decisions")) for c in bad), bad


def test_correct_torch_backend_passes_the_biting_cases(tiny, biting):
    pytest.importorskip("torch")
    from kernels.backend import make_torch_cpu_bf16

    out = judge(backend_plan(make_torch_cpu_bf16(), tiny, biting, probe="off")).to_json()
    assert out["ok"], failures(out)


@pytest.mark.parametrize(
    "fault",
    [
        "make_mask_verify_only",
        "make_penalty_verify_only",
        "make_penalty_ignores_drafts",
        "make_min_tokens_counts_round_drafts",
        "make_bad_words_ignore_drafts",
    ],
)
def test_reference_level_chain_faults_fail_the_default_check(tiny, biting, fault):
    out = judge(backend_plan(getattr(faulty, fault)(), tiny, biting, probe="off")).to_json()
    assert any(c["name"].endswith("tokens") for c in failures(out)), (fault, failures(out))


def test_no_fault_passes_the_biting_cases(tiny, biting):
    out = judge(backend_plan(faulty.make_no_fault(), tiny, biting, probe="off")).to_json()
    assert out["ok"], failures(out)


def test_biting_params_are_a_function_of_the_model(biting):
    again = build_model("tiny", 0)
    for c in biting:
        fresh = next(x for x in default_cases(64, ["--preset", "tiny", "--seed", "0"]) if x.name == c.name)
        assert fresh.params_for(again) == c.params_for(build_model("tiny", 0))
        assert f"--case '{c.name}'" in c.reproduce or f"--case {c.name}" in c.reproduce


def test_judge_contradicting_its_own_rule_is_never_excused(tiny, monkeypatch):
    """A judge whose greedy argmax breaks near ties towards the highest id: a correct inexact
    backend diverges from it where its choice was the runner-up, at a reference margin below zero."""
    cases = default_cases(tiny.cfg.vocab_size)[:1]
    side = faulty_judge.make_loose_argmax_judge()
    out = judge(backend_plan(faulty.make_exact_false(), tiny, cases, judge=side, probe="off")).to_json()
    bad = failures(out)
    assert bad and bad[0]["name"].endswith("tokens"), bad
    assert "reference margin -" in bad[0]["detail"] and "never excused" in bad[0]["detail"]
    assert "not what its rule gives" in bad[0]["detail"] and " vs its rule " in bad[0]["detail"]
    # without the rule, the near-tie excuse would pass it
    monkeypatch.setattr(compare, "contradicted_decision", lambda *a: None)
    out = judge(
        backend_plan(faulty.make_exact_false(), tiny, cases, judge=faulty_judge.make_loose_argmax_judge(), probe="off")
    ).to_json()
    assert out["ok"] and out["excused_divergences"], failures(out)
