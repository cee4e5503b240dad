"""Faults of the judge itself (docs/DESIGN.md, "The judge"): each test below fails if the
judge is changed in one of the ways a review found no project test would notice.

1. an excuse margin wider than the table's: a clear decision, flipped by logits still inside
   the value bound, must fail the tokens check;
2. a token id below zero (vLLM's -1 placeholder) is malformed in every dtype row, and the
   margin functions refuse it rather than read p[-1];
3. a residual draw is re-derived from the backend's own logits and uniform: a wrong residual
   token beside the right one fails."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from oracle.judge.scenario import Case
from oracle.judge.runner import REFERENCE, run_scenario
from oracle.judge.comparison.compare import allowed, compare_runs, rel_err, typical_norms
from oracle.tolerances import TOLERANCES
from oracle.judge.comparison.decisions import draw_margin, greedy_margin
from oracle.errors import OracleError
from oracle.checkpoint import build_model
from oracle.sampling_params import SamplingParams as SP


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", 0)


def one_round(model, params, T=5, seed=0, n=6):
    rng = np.random.default_rng(seed)
    prompts = [list(map(int, rng.integers(0, 64, 6))) for _ in range(n)]
    case = Case("self", prompts, [params(i) for i in range(n)], [{i: T for i in range(n)}], 2, 4)
    return run_scenario(REFERENCE, model, case, "block").traces


def test_clear_decision_flipped_inside_the_value_bound_fails(tiny):
    """A greedy final token flipped by swapping two logits: the logits stay within the bfloat16
    row, the backend's own logits explain its choice, and the reference margin is above the
    table's margin: only the tokens rule can fail it, and it must."""
    tol = TOLERANCES["bfloat16"]
    found = None
    for seed in range(40):
        ref = one_round(tiny, lambda i: SP(), seed=seed)
        tr = ref[0]
        norm = typical_norms(tr)[("verify_logits",)]
        for rid in tr.requests:
            a = tr.accepted[rid]
            lg = np.asarray(tr.verify_logits[(rid, a)], np.float64)
            x, y = np.argsort(lg)[::-1][:2]
            m = greedy_margin(lg, int(x), int(y))
            swapped = lg.copy()
            swapped[[x, y]] = swapped[[y, x]]
            err = rel_err(swapped, lg, norm)
            if tol["margin"] < m < 2 * tol["margin"] and err < 0.9 * allowed(tol, "logits", 3):
                found = (ref, rid, a, int(x), int(y), swapped.astype(np.float32), m, err)
                break
        if found:
            break
    assert found, "no decision with a margin just above the table's and a swap inside the bound"
    ref, rid, a, x, y, swapped, m, err = found
    got = copy.deepcopy(ref)
    b = got[0]
    b.verify_logits[(rid, a)] = swapped
    b.emitted[rid] = list(b.emitted[rid][:-1]) + [y]
    b.committed[rid] = list(b.emitted[rid]) if rid in b.committed else b.committed.get(rid)
    if b.committed.get(rid) is None:
        b.committed.pop(rid, None)
    rep = compare_runs(ref, got, "bfloat16")
    failed = {c.name for c in rep.checks if not c.ok}
    assert failed == {"tokens"}, (failed, rep.first_failure(), m, err)
    assert f"reference margin {m:.3g}" in rep.first_failure().detail


@pytest.mark.parametrize("dtype", sorted(TOLERANCES))
@pytest.mark.parametrize("where", ["draft", "emitted"])
def test_negative_token_id_is_malformed_in_every_row(tiny, dtype, where):
    ref = one_round(tiny, lambda i: SP() if i % 2 else SP(temperature=1.0, seed=i))
    got = copy.deepcopy(ref)
    b = got[0]
    rid = b.requests[1]
    if where == "draft":
        b.drafts[rid] = [-1] + list(b.drafts[rid][1:])
    else:
        b.emitted[rid] = list(b.emitted[rid][:-1]) + [-1]
        b.committed.pop(rid, None)
    rep = compare_runs(ref, got, dtype)
    bad = rep.first_failure()
    assert bad is not None and bad.name == "malformed", (dtype, bad)
    assert "is -1, not a token id" in bad.detail


def test_margin_functions_refuse_negative_ids():
    lg = np.array([1.0, 2.0, 3.0])
    with pytest.raises(OracleError):
        greedy_margin(lg, 2, -1)
    with pytest.raises(OracleError):
        draw_margin(np.array([0.2, 0.3, 0.5]), -1, 0.5)


def test_wrong_residual_token_beside_the_right_one_fails(tiny):
    """A rejection's residual draw replaced by the token next to the right one (logits and
    uniforms untouched): the decisions check re-derives the residual draw and fails."""
    for seed in range(20):
        ref = one_round(tiny, lambda i: SP(temperature=1.0, seed=100 + i), seed=seed)
        tr = ref[0]
        rej = [r for r, T in zip(tr.requests, tr.token_counts) if tr.accepted[r] < T - 1]
        if rej:
            break
    assert rej, "no rejection drawn"
    rid = rej[0]
    got = copy.deepcopy(ref)
    b = got[0]
    right = b.emitted[rid][-1]
    wrong = right + 1 if right + 1 < 64 else right - 1
    b.emitted[rid] = list(b.emitted[rid][:-1]) + [wrong]
    b.committed.pop(rid, None)
    for dtype in ("bfloat16", "float32"):
        rep = compare_runs(ref, got, dtype)
        failed = {c.name for c in rep.checks if not c.ok}
        assert "decisions" in failed, (dtype, failed)
        detail = next(c.detail for c in rep.checks if c.name == "decisions")
        assert f"final token (offset {b.accepted[rid]}): backend {wrong} vs the reference's rules {right}" in detail, (
            detail
        )
