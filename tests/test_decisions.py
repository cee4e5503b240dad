"""The self-consistency rule (oracle.judge.comparison.decisions.unexplained_decision): a reduced-precision
backend's decisions must be the reference's rules applied to its own logits and uniforms.
Without it, the first-divergence rule alone would excuse a decision bug that only strikes
near-ties; with it, only divergences explained by the backend's logits are excused."""

import copy

import numpy as np

from oracle.judge.comparison.compare import compare_runs
from oracle.judge.comparison.decisions import (
    contradicted_decision,
    draw_margin,
    first_divergence,
    greedy_margin,
    redecide,
    unexplained_decision,
)
from oracle.sampling import filtered_probs
from oracle.sampling_params import SamplingParams as SP
from oracle.session import Session


def one_round(model, params, T=3, n=16, seed=0):
    rng = np.random.default_rng(seed)
    s = Session(model, 2, 4, "block", "sequential")
    for rid in range(n):
        s.add(rid, list(map(int, rng.integers(0, model.cfg.vocab_size, 1 + rid % 5))), params(rid))
    return s.step({rid: T for rid in range(n)})


def near_tie_finals(tr):
    """Greedy requests whose final token had a runner-up within relative gap 0.1."""
    out = []
    for rid, T in zip(tr.requests, tr.token_counts):
        lg = tr.verify_logits[(rid, tr.accepted[rid])]
        best, second = np.argsort(lg)[::-1][:2]
        assert tr.emitted[rid][-1] == best
        if greedy_margin(lg, int(best), int(second)) < 0.1:
            out.append((rid, T, int(second)))
    return out


def test_greedy_near_tie_flip_is_a_decision_bug(tiny):
    tr = one_round(tiny, lambda rid: SP())
    ties = near_tie_finals(tr)
    assert ties, "no near-tie final decision in 16 greedy requests of the tiny model"
    rid, T, second = ties[0]
    bad = copy.deepcopy(tr)  # the runner-up emitted from unchanged logits
    bad.emitted[rid] = bad.emitted[rid][:-1] + [second]
    bad.committed[rid] = list(bad.emitted[rid])
    div = first_divergence(tr, bad, rid, T)
    assert div is not None and div[2] <= 0.1  # the first-divergence rule alone excuses it
    assert unexplained_decision(bad, rid, T, 1e-5) is not None
    rep = compare_runs([tr], [bad], "bfloat16")
    assert not rep.ok and rep.first_failure().name == "decisions", rep.checks
    assert f"request {rid}" in rep.first_failure().detail


def test_near_tie_flip_explained_by_the_backends_logits_is_excused(tiny):
    tr = one_round(tiny, lambda rid: SP())
    rid, T, second = near_tie_finals(tr)[0]
    other = copy.deepcopy(tr)  # a backend whose logits swapped the top two
    key = (rid, other.accepted[rid])
    lg = other.verify_logits[key].copy()
    best = other.emitted[rid][-1]
    lg[best], lg[second] = lg[second], lg[best]
    other.verify_logits[key] = lg
    other.emitted[rid] = other.emitted[rid][:-1] + [second]
    other.committed[rid] = list(other.emitted[rid])
    assert unexplained_decision(other, rid, T, 1e-5) is None
    rep = compare_runs([tr], [other], "bfloat16")
    assert rep.ok, rep.first_failure()
    assert len(rep.divergences) == 1 and rep.divergences[0].request == rid and rep.divergences[0].excused


def test_sampled_draft_flip_is_a_decision_bug(tiny):
    tr = one_round(tiny, lambda rid: SP(1.0, seed=rid), T=2)
    found = None
    for rid in tr.requests:
        lg = tr.draft_logits[(rid, 0)]
        u = next(e.value for e in tr.rng_events if e.request == rid and e.purpose == "draft")
        q = filtered_probs(lg, SP(1.0))
        x = tr.drafts[rid][0]
        for y in (x - 1, x + 1):  # the CDF neighbours of the drawn token
            if 0 <= y < len(q) and q[y] > 0 and draw_margin(q, y, u) < 0.1:
                found = (rid, y)
                break
        if found:
            break
    assert found
    rid, y = found
    bad = copy.deepcopy(tr)
    bad.drafts[rid] = [y]
    assert redecide(bad, rid, 2).drafts[rid] == tr.drafts[rid]
    rep = compare_runs([tr], [bad], "bfloat16")
    assert any(c.name == "decisions" and not c.ok for c in rep.checks), rep.checks


def test_reference_traces_explain_themselves(tiny):
    for params in (lambda rid: SP(), lambda rid: SP(0.8, top_k=12, top_p=0.9, seed=rid)):
        tr = one_round(tiny, params, T=5)
        for rid, T in zip(tr.requests, tr.token_counts):
            assert unexplained_decision(tr, rid, T, 0.0) is None


def test_reference_decision_against_its_own_rule_is_never_excused(tiny):
    """A judge's side whose greedy final token is the runner-up of its own logits: its margin
    against the backend's (right) token is below zero, which the near-tie rule alone would
    excuse; the judge fails it and names the decision and the margin."""
    tr = one_round(tiny, lambda rid: SP())
    rid, T, second = near_tie_finals(tr)[0]
    bad = copy.deepcopy(tr)  # the reference emits the runner-up from its own logits
    bad.emitted[rid] = bad.emitted[rid][:-1] + [second]
    bad.committed[rid] = list(bad.emitted[rid])
    div = first_divergence(bad, tr, rid, T)
    assert div is not None and div.margin < 0  # excused as a near tie by the margin rule alone
    assert contradicted_decision(tr, rid, T, 1e-5) is None
    for dtype in ("bfloat16", "float32"):
        rep = compare_runs([bad], [tr], dtype, case="c")
        fail = rep.first_failure()
        assert not rep.ok and fail.name == "tokens", rep.checks
        assert (
            f"c: round 0 request {rid}: final token (offset {tr.accepted[rid]}): reference {second} vs its rule "
            f"{tr.emitted[rid][-1]}" in fail.detail
        ), fail.detail
        assert f"reference margin -{abs(div.margin):.3g} < 0" in fail.detail and "never excused" in fail.detail
        assert not rep.divergences
    # the exact row fails any divergence anyway; a consistent reference is excused at a near tie
    assert not compare_runs([bad], [tr], "exact").ok
    assert compare_runs([tr], [bad], "bfloat16").first_failure().name == "decisions"
