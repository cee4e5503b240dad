"""Single rounds and short runs on random small models (DESIGN.md sections 4, 7, 8).

* test_block_and_loop_rounds_agree (the main property): for any ragged batch, the backend's
  block round equals the reference's block round, its loop round the reference's loop round,
  and its block round its loop round: KV writes, draft and verification logits, RNG events,
  tokens and the stats both rounds share; bit for bit for exact backends, else within the
  dtype's tolerance with the first-divergence rule (reference in replay mode).
* test_rounds_follow_their_schedule: the calls a backend records are its mode's plan.
* test_logits_match_cache_free_recompute: draft and verification logits equal a from-scratch
  forward of the whole prefix (oracle.judge.comparison.cache_free.cache_free_check), over several rounds.
* test_rollback_leaves_exactly_the_committed_kv: after every round each request's KV frontier
  is len(tokens) - 1 at every (depth, layer) and a read at the frontier raises KVError.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings

from oracle.judge.plans.plan import INLINE, rules_plan
from oracle.judge.plans.verdict import judge
from oracle.judge.comparison.compare import allowed
from oracle.tolerances import TOLERANCES
from oracle.kv import KVError

from . import harness
from .harness import examples
from .strategies import MODES, seeded_model, scenarios, single_rounds


@settings(max_examples=examples(150))
@given(sc=single_rounds())
def test_block_and_loop_rounds_agree(sc):
    runs = harness.check_equivalence(sc)
    for label in harness.accepted_events(runs["block"].traces[0], dict(enumerate(sc.params))):
        event(label)


@settings(max_examples=examples(40))
@given(sc=scenarios(rounds=(1, 2)))
def test_rounds_follow_their_schedule(sc):
    bk, sc = harness.backend_for(sc)
    for mode in MODES:
        r = harness.run(bk, sc, mode)
        v = judge(rules_plan(r.traces, schedule=mode, name=r.label()), INLINE)
        assert v.ok, f"{r.label()}: {v.first_failure()}"


@settings(max_examples=examples(40))
@given(sc=scenarios(rounds=(1, 3)))
def test_logits_match_cache_free_recompute(sc):
    bk, sc = harness.backend_for(sc)
    row = TOLERANCES["float32" if bk.exact else bk.dtype]
    tol = max(TOLERANCES["float32"]["logits"], allowed(row, "logits", sc.D - 1))  # the deepest logits
    model = seeded_model(sc.cfg, sc.weight_seed)
    for mode in MODES:
        r = harness.run(bk, sc, mode)
        v = judge(rules_plan(r.traces, model, cache_free=tol, name=r.label()), INLINE)
        assert v.ok, f"{r.label()}: {v.first_failure()}"
        n = v.counters["logits_compared"]
        event(f"logits vectors compared: {'< 20' if n < 20 else '>= 20'}")


def check_committed_kv(session, active: dict, D: int, layers: int, where: str, request_D=None) -> bool:
    """Frontier == len(tokens) - 1 everywhere; a read at the frontier raises. Returns False
    when the backend does not expose its KV. request_D: rid -> D_i (ragged depths; the
    request owns depth planes 0..D_i-1)."""
    seen = False
    for rid in active:
        f = harness.kv_frontiers(session, rid)
        if f is None:
            return False
        seen = True
        n = len(session.tokens(rid))
        assert f == {n - 1}, (
            f"{where}: request {rid} has {n} committed tokens but KV frontiers {sorted(f)}, expected {{{n - 1}}}"
        )
        kv = getattr(session, "kv", None)
        if kv is None or not hasattr(kv, "read"):
            continue
        for depth in range(D if request_D is None else request_D[rid]):
            for layer in range(layers):
                if n > 1:
                    kv.read(rid, depth, layer, n - 2)  # the last committed position reads
                with pytest.raises(KVError):
                    kv.read(rid, depth, layer, n - 1)  # the first position past the frontier
    return seen


@settings(max_examples=examples(40))
@given(sc=scenarios(rounds=(1, 3)))
def test_rollback_leaves_exactly_the_committed_kv(sc):
    bk, sc = harness.backend_for(sc)
    for mode in MODES:
        active, checked = {}, []

        def after_step(session, tr, mode=mode):
            checked.append(
                check_committed_kv(
                    session, active, sc.D, sc.cfg.num_layers, f"{bk.name} {mode} round {tr.round}", request_D
                )
            )

        model = seeded_model(sc.cfg, sc.weight_seed)
        s = bk.session(model, sc.d, sc.D, mode, sc.policy)
        request_D = None if sc.depths is None else {rid: Di for rid, (_, Di) in enumerate(sc.depths)}
        for op, arg in sc.ops:
            if op == "add":
                s.add(
                    arg,
                    list(sc.prompts[arg]),
                    sc.params[arg],
                    **({} if sc.depths is None else {"depths": sc.depths[arg]}),
                )
                active[arg] = True
            elif op == "remove":
                s.remove(arg)
                del active[arg]
            else:
                after_step(s, s.step(dict(arg)))
        if not any(checked):
            pytest.skip(f"backend {bk.name} exposes no KV frontiers (session.kv.frontiers or session.kv_frontiers)")
    event("KV checked after every round")
