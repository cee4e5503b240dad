"""Stop conditions inside a round.

A request may have stop token ids and max_tokens (oracle.sampling_params.SamplingParams). A round
decides exactly as without them (drafts, acceptance, the final token, RNG events); then its
emission is cut after the first stop token (kept) or at max_tokens
(oracle.sampling.stop_cut), only the kept tokens are committed, the KV frontier follows them,
and a finished request leaves the batch (naming it in a later round is an error).

* test_stops_cut_emission_not_decisions: one round without stops, then the same round with
  stop sets built from the tokens it emitted (a stop at the first accepted draft, at the
  bonus, anywhere) and max_tokens that end mid-round; decisions are unchanged, the commit is
  the cut, the backend's block and loop rounds agree with the reference's.
* test_generation_with_stops_agrees: multi-round runs on a small vocabulary with frequent stop
  tokens: the backend agrees with the reference (block and loop), every round commits the cut.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from oracle.errors import OracleError
from oracle.judge.plans.plan import INLINE, rules_plan
from oracle.judge.plans.verdict import judge

from . import harness
from .harness import examples
from .strategies import MODES, model_configs, scenarios, single_rounds, stop_params


def _labels(tr, params) -> list[str]:
    out = []
    for rid, T in zip(tr.requests, tr.token_counts):
        em, a, n, why = tr.emitted[rid], tr.accepted[rid], len(tr.kept(rid)), tr.finished.get(rid)
        if why == "stop" and n == 1 and a >= 1:
            out.append("stop at the first accepted draft")
        if why == "stop" and n == len(em) and a == T - 1 and a >= 1:
            out.append("stop at the bonus token")
        if why == "length" and n < len(em):
            out.append("max_tokens reached mid-round")
    return out


@settings(max_examples=examples(40))
@given(sc=single_rounds(max_requests=4), data=st.data())
def test_stops_cut_emission_not_decisions(sc, data):
    bk, sc = harness.backend_for(sc)
    plain = harness.run(bk, sc, "loop").traces[0]
    params = []
    for rid, p in enumerate(sc.params):
        em = plain.emitted[rid]
        m = data.draw(
            st.sampled_from([0, len(em) - 1]) | st.integers(0, len(em)),  # len(em): none
            label=f"stop position of request {rid}",
        )
        stops = ([em[m]] if m < len(em) else []) + data.draw(
            st.lists(st.integers(0, sc.cfg.vocab_size - 1), max_size=1), label="other stops"
        )
        max_tokens = data.draw(st.none() | st.integers(1, len(em) + 1), label=f"max_tokens of request {rid}")
        params.append(replace(p, stop_token_ids=tuple(stops), max_tokens=max_tokens))
    sc = replace(sc, params=tuple(params))
    runs = harness.check_equivalence(sc, bk)
    for mode, r in runs.items():
        tr = r.traces[0]
        # the stop cut of each request among the rules; the draws those of the run without stops
        v = judge(
            rules_plan(
                [tr], params=dict(enumerate(sc.params)), policy=sc.policy, events=plain.rng_events, name=r.label()
            ),
            INLINE,
        )
        assert v.ok, f"{r.label()}: stops changed the RNG events, or broke the rules: {v.first_failure()}"
        for rid in tr.requests:
            assert (tr.drafts[rid], tr.accepted[rid], tr.emitted[rid]) == (
                plain.drafts[rid],
                plain.accepted[rid],
                plain.emitted[rid],
            ), f"{r.label()}: stops changed decisions"
            assert r.tokens[rid] == list(sc.prompts[rid]) + tr.kept(rid), f"{r.label()} request {rid}: committed tokens"
            f = harness.kv_frontiers(r.session, rid)
            assert f is None or f == {len(r.tokens[rid]) - 1}, (
                f"{r.label()} request {rid}: KV frontiers {sorted(f)} after keeping {len(tr.kept(rid))} tokens"
            )
            if rid in tr.finished:
                with pytest.raises(OracleError):
                    r.session.step({rid: 1})
    for label in _labels(runs["loop"].traces[0], sc.params):
        event(label)


@settings(max_examples=examples(30))
@given(data=st.data())
def test_generation_with_stops_agrees(data):
    cfg = data.draw(model_configs(vocab=(8, 24)), label="model")
    sc = data.draw(scenarios(rounds=(2, None), cfg=cfg, params=stop_params(cfg.vocab_size)), label="scenario")
    bk, sc = harness.backend_for(sc)
    runs = harness.check_equivalence(sc, bk)
    params = dict(enumerate(sc.params))
    for mode in MODES:
        v = judge(rules_plan(runs[mode].traces, params=params, policy=sc.policy, name=runs[mode].label()), INLINE)
        assert v.ok, f"{runs[mode].label()}: {v.first_failure()}"
    for tr in runs["loop"].traces:
        for label in _labels(tr, sc.params) + [f"finished: {why}" for why in tr.finished.values()]:
            event(label)
