"""The exactness tier is right in both directions (docs/DESIGN.md, "Batch invariance"): a backend
that declares batch invariance and keeps it passes, bitwise, on the default cases and on drawn
scenarios; one that declares it and breaks it fails with class [invariance], the place named, on the
default cases and on drawn scenarios; a backend that does not declare it is never held to it."""

from __future__ import annotations

import json

import pytest

from meta_tests import catch, faulty_invariance
from oracle.runtime.backends import load_backend
from oracle.checkpoint import build_model
from oracle.cli import catalogue, main
from oracle.judge.plans import invariance
from oracle.judge.runner import run_scenario

CASE = "ragged (5,3,1) d=2 D=4"


def check_json(capsys, spec: str, *extra) -> tuple[int, dict]:
    code = main(["check", "--backend", spec, "--json", "--no-shrink", "--quiet", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_an_invariant_backend_passes_the_tier_on_every_default_case(capsys):
    code, out = check_json(capsys, "meta_tests.faulty_invariance:make_invariant_reference")
    assert code == 0, [c for c in out["checks"] if not c["ok"]]
    tier = [c for c in out["checks"] if c["name"].endswith(": invariance")]
    assert len(tier) == len(out["cases"]) == 9 and all(c["ok"] for c in tier)
    assert out["invariance"]["values"] > 100_000 and all(out["invariance"]["claims"].values())


def test_a_backend_that_breaks_its_declaration_fails_with_the_place_named(capsys):
    code, out = check_json(capsys, "meta_tests.faulty_invariance:make_ulp_when_shared", "--case", CASE)
    assert code == 1
    bad = [c for c in out["checks"] if not c["ok"]]
    # only the tier sees a 1-ULP fault: the twin verdict's float32 row holds
    assert bad and all(c["name"] == f"{CASE}: invariance" for c in bad), bad
    assert {c["failure"]["mode"] for c in bad} == set(invariance.CLAIMS)
    first = bad[0]["detail"]
    want = "[block = loop]: round 0 request 1: block and loop part at position 2, depth 1, layer 0: KV write k[1]"
    assert want in first, first
    assert "the localizer stops at request 1, round 0, position 2, depth 1, layer 0" in first, first


def test_an_undeclared_backend_is_not_held_to_bitwise_equality(capsys):
    """The same 1-ULP backend, not declaring invariance: the twin verdict passes it."""
    bk = faulty_invariance.UlpWhenShared()
    bk.batch_invariant = False
    model = build_model("tiny", 0)
    from oracle.judge.plans.plan import INLINE, backend_plan
    from oracle.judge.plans.verdict import judge

    case = next(c for c in catalogue.default_cases(model.cfg.vocab_size) if c.name == CASE)
    v = judge(backend_plan(bk, model, [case], probe="off"), INLINE)
    assert v.ok and "invariance" not in v.info, v.first_failure()


def test_the_claims_find_no_part_between_identical_runs_and_one_in_a_flipped_bit():
    """The bitwise comparison itself: equal runs give no part; one bit flipped in one KV value of one
    run is found at its address (the comparison can fail)."""
    bk = load_backend("reference")
    model = build_model("tiny", 0)
    case = next(c for c in catalogue.default_cases(model.cfg.vocab_size) if c.name == CASE)
    a, b = run_scenario(bk, model, case, "block"), run_scenario(bk, model, case, "loop")
    n, parts = invariance.compare_runs_bitwise("block = loop", ("block", "loop"), a, b)
    assert n > 5000 and parts == []
    key = sorted(k for k in b.traces[0].kv_writes if k[0] == 2)[3]
    call, k, v = b.traces[0].kv_writes[key]
    v = v.copy()
    v.reshape(-1)[5] = v.reshape(-1).view("u4")[5:6].__xor__(1).view("f4")[0]
    b.traces[0].kv_writes[key] = (call, k, v)
    _, parts = invariance.compare_runs_bitwise("block = loop", ("block", "loop"), a, b)
    assert [(p.rid, p.position, p.depth, p.layer, p.what) for p in parts] == [(2, *key[1:], "KV write")]
    assert parts[0].detail.startswith("v[5]:") and "(1 of 32 values differ)" in parts[0].detail


@pytest.mark.parametrize(
    "spec, caught",
    [
        ("meta_tests.faulty_invariance:make_invariant_reference", False),
        ("meta_tests.faulty_invariance:make_ulp_when_shared", True),
    ],
)
def test_drawn_scenarios_judge_the_tier_both_ways(spec, caught):
    """The property suite's drawn single rounds through the one verdict: the invariant reference
    passes them all, the 1-ULP fault is caught by one of them, as [invariance]."""
    out = catch.check(load_backend(spec), spec, "test_round_props::test_block_and_loop_rounds_agree", scale=0.25)
    assert out.caught == caught, out.message
    if caught:
        assert "scenario: invariance: scenario [" in out.message, out.message


def test_the_report_page_shows_the_localizer_table(capsys, tmp_path):
    """check --report of an invariance fault: the page's tier table names the operation the fault
    breaks (o_proj), beside the claims' results."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    spec = "meta_tests.faulty_kernels:make_inv_splitk_bf16"
    code = main(
        ["check", "--backend", spec, "--case", CASE, "--no-shrink", "--no-drift", "--quiet", "--report", str(tmp_path)]
    )
    capsys.readouterr()
    page = (tmp_path / "index.html").read_text()
    assert code == 1 and "The localizer: the first operation where the two runs part" in page
    assert page.count("<td>o_proj, layer 0, depth 0</td>") == 3  # one row per claim
