"""Multi-round generation (DESIGN.md sections 4, 6, 7).

* test_block_and_loop_generation_agree: over several rounds with K_i changing per round,
  requests joining, idling and leaving, block-mode and loop-mode generation on the backend
  emit the same tokens (and everything else a round traces) as each other and as the
  reference. The statistics (--hypothesis-show-statistics) list which rejection offsets and
  full acceptances the examples reached.
* test_rollback_after_every_acceptance_count: explicit cases, found by a search over a fixed
  list of seeds/prompts, where a K=8 request accepts exactly a = 0..8 drafts (a = 8: full
  acceptance) in its first round, greedy and sampled, both RNG policies; checks the commit,
  the KV rollback to start + a + 1, and two more rounds in both modes against the reference.
* test_seeded_request_same_alone_and_in_batch: a request's tokens, RNG events, logits and KV
  are the same when it runs alone and inside any batch (any mode for each).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import event, given, settings, target
from hypothesis import strategies as st

from oracle.judge.plans.verdict import judge
from oracle.judge.plans.plan import INLINE, traces_plan
from oracle.judge.scenario import Case
from oracle.config import ModelConfig
from oracle.sampling_params import SamplingParams

from . import harness
from .harness import examples
from .strategies import MODES, seeded_model, scenarios
from .test_round_props import check_committed_kv


@settings(max_examples=examples(80))
@given(sc=scenarios(rounds=(2, None)))
def test_block_and_loop_generation_agree(sc):
    runs = harness.check_equivalence(sc)
    outcomes = set()
    for tr in runs["loop"].traces:
        outcomes.update(harness.accepted_events(tr, dict(enumerate(sc.params))))
    for label in outcomes:
        event(label)
    target(float(len(outcomes)), label="distinct acceptance outcomes")


# ---- forced acceptance counts -------------------------------------------------------------

SEARCH_CFG = ModelConfig(
    vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8
)
SEARCH_D = (1, 2)
K_MAX = 8


def _candidates(kind: str):
    rng = np.random.default_rng(7)
    out = []
    for n in range(256):
        prompt = tuple(int(t) for t in rng.integers(0, SEARCH_CFG.vocab_size, 5))
        params = SamplingParams(seed=n) if kind == "greedy" else SamplingParams(temperature=1.0, seed=1000 + n)
        out.append((prompt, params))
    return out


@functools.cache
def found_cases(kind: str) -> dict:
    """accepted count a -> (prompt, params) of the first candidate whose first K=8 round on
    the reference accepts exactly a drafts (one batched round over 256 candidates)."""
    cands = _candidates(kind)
    s = harness.REFERENCE.session(seeded_model(SEARCH_CFG, 0), *SEARCH_D, "block", "sequential")
    for n, (prompt, params) in enumerate(cands):
        s.add(n, list(prompt), params)
    tr = s.step({n: K_MAX + 1 for n in range(len(cands))})
    out = {}
    for n in range(len(cands)):
        out.setdefault(tr.accepted[n], cands[n])
    return out


def forced_scenario(kind: str, a: int, policy: str) -> Case:
    prompt, params = found_cases(kind)[a]
    fillers = [((5, 9, 1, 30), SamplingParams(temperature=0.8, top_k=12, seed=3)), ((2,), SamplingParams())]
    ops = (
        ("add", 0),
        ("add", 1),
        ("add", 2),
        ("step", ((0, K_MAX + 1), (1, 3), (2, 5))),
        ("step", ((2, 9), (0, 4), (1, 1))),
        ("remove", 1),
        ("step", ((0, 9), (2, 2))),
    )
    return Case.from_ops(
        SEARCH_CFG,
        0,
        *SEARCH_D,
        policy,
        (prompt,) + tuple(p for p, _ in fillers),
        (params,) + tuple(q for _, q in fillers),
        ops,
    )


FORCED = [
    (kind, a, policy)
    for kind in ("greedy", "sampled")
    for a in range(K_MAX + 1)
    for policy in (("sequential",) if kind == "greedy" else ("sequential", "fixed"))
]


@pytest.mark.parametrize(
    "kind,a,policy",
    FORCED,
    ids=[f"{k}-{p}-" + ("full_acceptance" if a == K_MAX else f"reject_at_{a}") for k, a, p in FORCED],
)
def test_rollback_after_every_acceptance_count(kind, a, policy):
    cases = found_cases(kind)
    assert a in cases, (
        f"the seed search found no {kind} request accepting exactly {a} of {K_MAX} drafts "
        f"(reached: {sorted(cases)}); widen the candidate list"
    )
    bk = harness.backend()
    if policy not in bk.policies:
        pytest.skip(f"backend {bk.name} does not implement policy {policy}")
    sc = forced_scenario(kind, a, policy)
    for mode in MODES:  # the case does what it is named for, then rolls back
        model = seeded_model(sc.cfg, sc.weight_seed)
        s = bk.session(model, sc.d, sc.D, mode, policy)
        for rid in range(3):
            s.add(rid, list(sc.prompts[rid]), sc.params[rid])
        start = len(sc.prompts[0]) - 1
        tr = s.step(dict(sc.ops[3][1]))
        if bk.exact:
            assert tr.accepted[0] == a, f"{bk.name} {mode}: accepted {tr.accepted[0]}, the reference accepts {a}"
        a_got = tr.accepted[0]
        assert len(tr.emitted[0]) == a_got + 1 and s.tokens(0) == list(sc.prompts[0]) + tr.emitted[0]
        f = harness.kv_frontiers(s, 0)
        assert f is None or f == {start + a_got + 1}, (
            f"{bk.name} {mode}: after accepting {a_got} drafts the KV frontier is {sorted(f)}, "
            f"expected {start + a_got + 1}"
        )
        check_committed_kv(s, {0: 1, 1: 1, 2: 1}, sc.D, sc.cfg.num_layers, f"{bk.name} {mode} round 0")
    harness.check_equivalence(sc, bk)


def test_search_reaches_every_acceptance_count():
    """The fixed candidate lists must keep covering 0..K (a model or sampler change that
    breaks this shows here first)."""
    for kind in ("greedy", "sampled"):
        assert sorted(found_cases(kind)) == list(range(K_MAX + 1)), kind


# ---- batch invariance of a seeded request -------------------------------------------------


def alone(sc: Case, rid: int = 0) -> Case:
    ops = []
    for op, arg in sc.ops:
        if op == "add" and arg == rid:
            ops.append((op, arg))
        elif op == "step":
            ops.append((op, tuple((r, t) for r, t in arg if r == rid)))
    return sc.with_ops(ops)


@settings(max_examples=examples(40))
@given(sc=scenarios(rounds=(1, 3), fixed_requests=0), modes=st.tuples(st.sampled_from(MODES), st.sampled_from(MODES)))
def test_seeded_request_same_alone_and_in_batch(sc, modes):
    bk, sc = harness.backend_for(sc)
    solo = harness.run(bk, alone(sc), modes[0])
    batch = harness.run(bk, sc, modes[1])
    a = [harness.only(tr, 0) for tr in solo.traces]
    b = [harness.only(tr, 0) for tr in batch.traces]
    b = [t for t in b if t is not None]
    v = judge(traces_plan(a, b, harness.dtype_of(bk), names=("alone", "in a batch")), INLINE)
    if not v.ok:
        raise AssertionError(
            f"request 0 alone ({modes[0]}) vs in a batch of {len(sc.prompts)} ({modes[1]}): {v.first_failure()}"
        )
    if bk.exact:
        assert solo.tokens[0] == batch.tokens[0]
    event(f"batch of {min(len(sc.prompts), 4)}{'+' if len(sc.prompts) >= 4 else ''} requests")
