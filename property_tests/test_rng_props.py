"""RNG contract (DESIGN.md section 6) on the backend's traces, in mixed greedy/sampled batches:

* sequential: drafts by offset 0..K-1, then one accept uniform per offset, on rejection one
  residual draw and stop, else one bonus draw; fixed: 2K+1 uniforms (K draft, K accept with
  `used` flags, one final residual or bonus); greedy requests draw nothing; seq numbers 0..n-1
  per request and round; the commit rule (a accepted drafts + one token);
* the values are the request's seeded stream in order (exact and host-RNG backends);
* block and loop rounds produce identical event sequences;
* replay: a reference run consuming the recorded uniforms reproduces the run exactly.
"""

from __future__ import annotations

from hypothesis import event, given, settings

from oracle.judge.plans.verdict import judge
from oracle.judge.plans.plan import INLINE, rules_plan

from . import harness
from .harness import examples
from .strategies import MODES, scenarios


@settings(max_examples=examples(80))
@given(sc=scenarios(rounds=(1, 3)))
def test_rng_events_follow_policy(sc):
    bk, sc = harness.backend_for(sc)
    params = dict(enumerate(sc.params))
    runs = {mode: harness.run(bk, sc, mode) for mode in MODES}
    for mode, r in runs.items():
        problem = harness.rng_use_violation(bk, r, params, sc.policy)
        assert problem is None, f"{r.label()}: {problem}"
    a = [e for tr in runs["block"].traces for e in tr.rng_events]
    v = judge(rules_plan(runs["loop"].traces, events=a, name=runs["loop"].label()), INLINE)  # loop draws as block
    assert v.ok, f"{bk.name} block vs loop: {v.first_failure()}"
    kinds = {"greedy" if p.greedy else "sampled" for rid, p in params.items() if rid in runs["block"].tokens}
    event(f"policy {sc.policy}, batch: {'+'.join(sorted(kinds))}")
    for tr in runs["block"].traces:
        for label in harness.accepted_events(tr, params):
            event(label)


@settings(max_examples=examples(20))
@given(sc=scenarios(rounds=(1, 3)))
def test_replay_reproduces_the_run(sc):
    """The replay path the suite uses for device-RNG backends is itself exact."""
    seeded = harness.run(harness.REFERENCE, sc, "loop")
    replayed = harness.reference_run(sc, "loop", replay_from=seeded)
    harness.assert_runs_match(seeded, replayed, "exact")
