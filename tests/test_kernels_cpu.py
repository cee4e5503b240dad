"""torch-cpu FP32 rounds (kernels/) against the FP32 reference on the tiny preset."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kernels/ from a plain `pytest`

import dataclasses
import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from kernels.backend import TorchBackend
from bench.calls import measure_c_table
from bench.rounds import make_session, random_weights, run_generation
from kernels.options import KernelOptions
from kernels.round_buffer import PlanCache, build_plan, plan_indices, sampling_variant
from kernels import sampler
from oracle import sampling
from oracle.runtime.backends import load_backend
from oracle.reference_backend import ReferenceBackend
from oracle.judge.comparison.compare import compare_runs
from oracle.errors import OracleError
from oracle.checkpoint import build_model
from oracle.sampling_params import SamplingParams as SP
from oracle.schedule import plan as plan_schedule

MIXED = [
    SP(),
    SP(1.0, top_k=8, seed=1),
    SP(0.8, top_p=0.8, seed=2),
    SP(1.2, top_k=20, top_p=0.9, seed=3),
    SP(0.7, seed=4),
    SP(),
]
PROMPTS = [[1, 2, 3], [5], [7, 8, 9, 10, 11], [4, 4], [60, 1, 33, 2, 8, 9, 10, 3], [9, 9, 9]]
RAGGED = [{0: 3, 1: 1, 2: 5, 3: 2, 4: 4, 5: 1}]
MULTI = [
    {0: 3, 1: 1, 2: 5, 3: 2},
    {0: 5, 1: 5, 2: 5, 3: 5, 4: 3},
    {3: 4, 1: 2, 4: 1},
    {0: 1, 1: 3, 2: 2, 3: 5, 4: 6},
    {4: 2, 0: 4, 2: 1},
    {0: 2, 1: 2, 2: 2, 3: 2, 4: 2},
]
TORCH = TorchBackend("cpu")
torch.set_num_threads(1)  # tiny ops: threads only add spin-wait cost on a shared CI machine


@pytest.fixture(scope="module")
def model():
    return build_model("tiny", seed=0)


def start(backend, model, mode, policy, rids, d=2, D=4, replay=None, **opts):
    s = backend.session(model, d, D, mode, policy, **opts)
    for rid in rids:
        s.add(rid, PROMPTS[rid], MIXED[rid], **({"replay": replay[rid]} if replay and rid in replay else {}))
    return s


def run_both(model, mode, policy, rounds, d=2, D=4, replay=None, **opts):
    rids = sorted({r for c in rounds for r in c})
    ref = start(ReferenceBackend(), model, mode, policy, rids, d, D, replay)
    got = start(TORCH, model, mode, policy, rids, d, D, replay, **opts)
    return [ref.step(c) for c in rounds], [got.step(c) for c in rounds], ref, got


def assert_same(tr_ref, tr_got, max_err=1e-4, eager=True):
    rep = compare_runs(tr_ref, tr_got, "float32")
    assert rep.ok and not rep.divergences, (rep.first_failure(), rep.divergences)
    assert rep.max_rel_err["kv"] < max_err and rep.max_rel_err["logits"] < max_err
    for a, b in zip(tr_ref, tr_got):
        assert (b.dtype, b.mode, b.round, b.policy) == ("float32", a.mode, a.round, a.policy)
        assert b.calls == a.calls and b.prefix == a.prefix and b.params == a.params
        assert (b.drafts, b.accepted, b.emitted) == (a.drafts, a.accepted, a.emitted)
        assert b.rng_events == a.rng_events  # values included
        assert {k: c for k, (c, _, _) in b.kv_writes.items()} == {k: c for k, (c, _, _) in a.kv_writes.items()}
        assert b.draft_logits.keys() == a.draft_logits.keys() and b.verify_logits.keys() == a.verify_logits.keys()
        assert {k: v for k, v in b.stats.items() if not k.startswith("graph_")} == {
            k: v for k, v in a.stats.items() if k != "kv_writes"
        }
        if eager:
            assert {b.stats[k] for k in ("graph_captures", "graph_replays", "graph_fallbacks")} == {0}


@pytest.mark.parametrize("policy", ["sequential", "fixed"])
@pytest.mark.parametrize("mode", ["block", "loop"])
@pytest.mark.parametrize("d,D", [(2, 4), (1, 3)])
def test_ragged_round_matches_reference(model, mode, policy, d, D):
    tr_ref, tr_got, _, _ = run_both(model, mode, policy, RAGGED, d, D)
    assert_same(tr_ref, tr_got)
    assert any(e.purpose == "residual" for e in tr_got[0].rng_events)


@pytest.mark.parametrize("policy", ["sequential", "fixed"])
@pytest.mark.parametrize("mode", ["block", "loop"])
def test_multi_round_generation_with_rollback(model, mode, policy):
    tr_ref, tr_got, ref, got = run_both(model, mode, policy, MULTI)
    assert_same(tr_ref, tr_got)
    assert any(a < t - 1 for tr in tr_got for a, t in zip(tr.accepted.values(), tr.token_counts))  # rollbacks
    for rid in range(5):
        assert got.tokens(rid) == ref.tokens(rid)
        slot = got.requests[rid].slot
        assert int(got.engine.start[slot]) == len(got.tokens(rid)) - 1  # frontier start + a + 1


def test_block_and_loop_agree_on_torch(model):
    tb, tl = (run_both(model, m, "sequential", MULTI)[1] for m in ("block", "loop"))
    assert [t.emitted for t in tb] == [t.emitted for t in tl]
    assert [t.rng_events for t in tb] == [t.rng_events for t in tl]
    assert compare_runs(tb, tl, "float32").ok


def test_poisoned_kv_past_frontier_is_never_read(model):
    tr_ref, tr_got, _, _ = run_both(model, "loop", "sequential", MULTI, debug_poison=True)
    assert_same(tr_ref, tr_got)


@pytest.mark.parametrize("policy", ["sequential", "fixed"])
def test_replay_mode(model, policy):
    rng = np.random.default_rng(7)
    replay = {rid: list(rng.random(60)) for rid in range(5)}
    tr_ref, tr_got, _, _ = run_both(model, "loop", policy, MULTI, replay=replay)
    assert_same(tr_ref, tr_got)
    # the reference replays the uniforms the torch backend recorded (every event, used or not)
    _, tr_got, _, _ = run_both(model, "block", policy, MULTI)
    recorded = {rid: [e.value for tr in tr_got for e in tr.rng_events if e.request == rid] for rid in range(5)}
    ref = start(ReferenceBackend(), model, "block", policy, range(5), replay=recorded)
    assert_same([ref.step(c) for c in MULTI], tr_got)


def test_replay_running_out_fails_cleanly(model):
    s = start(TORCH, model, "loop", "sequential", [0, 1], replay={1: [0.5, 0.5]})
    free = len(s.engine.kv.free)
    h1, h2 = s.submit({0: 3, 1: 4}), s.submit({0: 2, 1: 2})
    with pytest.raises(OracleError, match="ran out of uniforms"):
        s.collect(h1)
    with pytest.raises(OracleError, match="round 1 was dropped.*ran out"):
        s.collect(h2)
    assert 1 not in s.requests and 0 not in s.requests and len(s.engine.kv.free) == free + 2
    ref = start(ReferenceBackend(), model, "loop", "sequential", [1], replay={1: [0.5, 0.5]})
    with pytest.raises(OracleError, match="ran out of uniforms"):
        ref.step({1: 4})


@pytest.mark.parametrize("mode", ["block", "loop"])
def test_submit_collect_rounds_in_flight(model, mode):
    ref = start(ReferenceBackend(), model, mode, "sequential", range(5))
    got = start(TORCH, model, mode, "sequential", range(5))
    tr_ref = [ref.step(c) for c in MULTI]
    h = [got.submit(c) for c in MULTI[:3]]  # three in flight, same requests
    assert all(not x.done for x in h)
    t2 = got.collect(h[1])  # finishes round 0 first
    h += [got.submit(c) for c in MULTI[3:]]
    tr_got = [got.collect(x) for x in (h[0],)] + [t2] + [got.collect(x) for x in reversed(h[2:])][::-1]
    assert_same(tr_ref, tr_got)


@pytest.mark.parametrize("mode", ["block", "loop"])
def test_round_span_bounds_its_positions(model, mode, monkeypatch):
    """A round's attention reads keys 0..span-1 only (Handle.span, from the host's bound on its
    positions, with rounds in flight). With the bound itself as the span (no rounding up) the
    rounds match the reference; one position short, they do not."""
    ref = start(ReferenceBackend(), model, mode, "sequential", range(5))
    tr_ref = [ref.step(c) for c in MULTI]
    for short in (0, 1):
        got = start(TORCH, model, mode, "sequential", range(5))
        monkeypatch.setattr(got, "span_bucket", lambda n, cap: max(1, n - short))
        h = [got.submit(c) for c in MULTI[:3]]  # three in flight, same requests
        h += [got.submit(c) for c in MULTI[3:]]
        assert h[-1].span > h[0].span
        tr_got = [got.collect(x) for x in h]
        last = max(key[1] for t in tr_got for key in t.kv_writes)  # the highest position written
        if short:
            with pytest.raises(AssertionError):
                assert_same(tr_ref, tr_got)
        else:
            assert_same(tr_ref, tr_got)
            assert last < h[-1].span


def test_span_bucket():
    from kernels.triton_attention import CHUNK, span_bucket

    prev, cap = 0, 4096 + 7
    for n in range(1, cap + 1):
        s = span_bucket(n, cap)
        assert n <= s <= cap and (s % CHUNK == 0 or s == cap) and s >= prev
        chunks, need = -(-s // CHUNK), -(-n // CHUNK)
        assert chunks == need if need <= 16 else chunks - need < need / 8, (n, s)
        prev = s
    assert len({span_bucket(n, 4096) for n in range(1, 4097)}) == 16 + 8 * 3  # graphs per call shape
    assert span_bucket(257, 257) == 257 and span_bucket(257, 342) == 288
    with pytest.raises(AssertionError):
        span_bucket(300, 257)


def test_preemption(model):
    plan = [
        ("step", {0: 3, 1: 4, 2: 2}),
        ("remove", 1),
        ("step", {0: 5, 2: 3}),
        ("add", 1),
        ("step", {1: 3, 0: 2, 2: 4}),
        ("remove", 0),
        ("step", {1: 5, 2: 1}),
    ]
    ref = start(ReferenceBackend(), model, "loop", "sequential", range(3))
    got = start(TORCH, model, "loop", "sequential", range(3))
    tr_ref, tr_got, held = [], [], {}
    for op, arg in plan:
        if op == "step":
            tr_ref.append(ref.step(arg))
            h = got.submit(arg)  # still in flight at the removal
            tr_got.append(h)
        elif op == "remove":
            held[arg] = ref.remove(arg)
            assert got.remove(arg) == held[arg]
        else:
            ref.add(arg, held[arg], MIXED[arg])
            got.add(arg, held[arg], MIXED[arg])
    assert_same(tr_ref, [got.collect(h) for h in tr_got])
    assert sorted(got.engine.kv.free) == [0, 3, 4, 5, 6, 7]


def test_failed_round_before_commit_leaves_session_intact(model, monkeypatch):
    ref = start(ReferenceBackend(), model, "loop", "sequential", range(5))
    got = start(TORCH, model, "loop", "sequential", range(5))
    free, calls, real = list(got.engine.kv.free), [0], got.engine.call_step

    def broken(*a):
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("injected device fault")
        return real(*a)

    monkeypatch.setattr(got.engine, "call_step", broken)
    with pytest.raises(RuntimeError, match="injected"):
        got.step({0: 3, 1: 2, 2: 4, 3: 1})
    monkeypatch.setattr(got.engine, "call_step", real)
    assert got.engine.kv.free == free and sorted(got.requests) == [0, 1, 2, 3, 4] and got.round_idx == 0
    assert_same([ref.step(c) for c in MULTI[:3]], [got.step(c) for c in MULTI[:3]])


def test_failed_round_after_commit_drops_its_requests(model, monkeypatch):
    got = start(TORCH, model, "block", "sequential", range(4))
    free = len(got.engine.kv.free)
    monkeypatch.setattr(got.engine, "trace_arrays", lambda *a: (_ for _ in ()).throw(RuntimeError("copy failed")))
    with pytest.raises(RuntimeError, match="copy failed"):
        got.step({0: 3, 2: 2})
    monkeypatch.undo()
    assert sorted(got.requests) == [1, 3] and len(got.engine.kv.free) == free + 2
    ref = start(ReferenceBackend(), model, "block", "sequential", [1, 3])
    assert_same([ref.step({1: 4, 3: 2})], [got.step({1: 4, 3: 2})])  # the failed round took no index


def test_failed_add_frees_its_slot(model, monkeypatch):
    got = start(TORCH, model, "loop", "sequential", [0])
    free = list(got.engine.kv.free)
    monkeypatch.setattr(got.engine, "prefill", lambda *a: (_ for _ in ()).throw(RuntimeError("prefill failed")))
    with pytest.raises(RuntimeError):
        got.add(1, PROMPTS[1], MIXED[1])
    monkeypatch.undo()
    assert got.engine.kv.free == free and 1 not in got.requests
    got.add(1, PROMPTS[1], MIXED[1])


def test_nonfinite_logits_raise_at_collection(model):
    s = TorchBackend("cpu").session(model, 2, 4, "loop")  # own weights: poisoned below
    s.add(0, [1, 2], SP())
    s.engine.model.w.lm_head[3, 0] = float("nan")
    with pytest.raises(OracleError, match="non-finite"):
        s.step({0: 3})
    assert not s.requests and len(s.engine.kv.free) == 8


def _steps(h):
    """(kind, key, rows) of every device step of a submitted round, in order."""
    plan = h.plan
    R, W = plan.requests[2], plan.uniforms[3]
    out = [("begin", (R, W), R)]
    for cp in plan.calls:
        out.append(("call", cp.key + (h.span,), cp.key[0]))
        if cp.head is not None:
            out.append(("draft", (cp.head[2], plan.sampling), cp.head[2]))
    return out + [("verify", (plan.verify[2], plan.sampling), plan.verify[2]), ("accept", (R, "sequential"), R)]


@pytest.mark.parametrize("max_batch_size,max_graphs", [(None, 512), (3, 512), (4, 5)])
def test_graph_bookkeeping_with_fake_capture(model, max_batch_size, max_graphs):
    """The CUDA-graph logic (keys, scratch warm-up, static inputs, limits, counters) with a
    capture that replays by calling the step: results bitwise equal to eager."""
    eager = start(TORCH, model, "block", "sequential", range(5))
    limits = {"max_graphs": max_graphs} | ({"max_batch_size": max_batch_size} if max_batch_size else {})
    fake = start(TORCH, model, "block", "sequential", range(5), graphs="fake", **limits)
    seen, B = set(), max_batch_size or 512
    for counts in MULTI:
        a, h = eager.step(counts), fake.submit(counts)
        b = fake.collect(h)
        want = {"graph_captures": 0, "graph_replays": 0, "graph_fallbacks": 0}
        for kind, key, rows in _steps(h):
            if (kind, key) in seen:
                want["graph_replays"] += 1
            elif rows > B or len(seen) >= max_graphs:
                want["graph_fallbacks"] += 1
            else:
                seen.add((kind, key))
                want["graph_captures"] += 1
                want["graph_replays"] += 1
        assert {k: b.stats[k] for k in want} == want
        assert (a.emitted, a.rng_events) == (b.emitted, b.rng_events)
        for x, y in ((a.verify_logits, b.verify_logits), (a.draft_logits, b.draft_logits)):
            assert all(np.array_equal(x[k], y[k]) for k in x)
        assert all(np.array_equal(a.kv_writes[k][1], b.kv_writes[k][1]) for k in a.kv_writes)
    assert len(fake.graphs.graphs) == len(seen) <= max_graphs
    if max_batch_size is None:
        assert fake.graphs.stats["graph_fallbacks"] == 0


@pytest.mark.parametrize("graphs", ["off", "fake"])
def test_capacity_grows_with_rounds_in_flight(model, graphs):
    ref = start(ReferenceBackend(), model, "loop", "fixed", range(2))
    got = start(TORCH, model, "loop", "fixed", range(2), max_requests=1, max_len=8, graphs=graphs)
    assert got.engine.kv.n_slots == 3  # grew once at the second add
    rounds = [{0: 5, 1: 3}, {0: 6, 1: 6}, {0: 6, 1: 2, 2: 4, 3: 5}, {0: 4, 2: 6, 3: 1, 4: 3}]
    tr_ref, handles = [], []
    for n, counts in enumerate(rounds):
        for rid in counts:
            if rid not in ref.requests:
                ref.add(rid, PROMPTS[rid], MIXED[rid])
                got.add(rid, PROMPTS[rid], MIXED[rid])  # grows while a round is in flight
        tr_ref.append(ref.step(counts))
        handles.append(got.submit(counts))  # grows max_len too
    assert got.engine.kv.n_slots == 9 and got.max_len >= 16
    tr_got = [got.collect(h) for h in handles]
    assert_same(tr_ref, tr_got, eager=graphs == "off")
    if graphs == "fake":  # graphs dropped at growth, re-captured
        assert sum(t.stats["graph_captures"] for t in tr_got) > len(got.graphs.graphs)


def test_failed_capture_runs_eagerly_and_is_counted(model, monkeypatch):
    from kernels.graphs import GraphRunner

    real = GraphRunner.fake_capture

    def capture(fn, static):
        if static.numel() == 2 * 4:  # the verify step of 4 rows
            raise RuntimeError("operation not permitted when stream is capturing")
        return real(fn, static)

    monkeypatch.setattr(GraphRunner, "fake_capture", staticmethod(capture))
    ref = start(ReferenceBackend(), model, "loop", "sequential", range(2))
    got = start(TORCH, model, "loop", "sequential", range(2), graphs="fake")
    rounds = [{0: 2, 1: 2}, {0: 2, 1: 2}, {0: 3, 1: 2}]
    tr = [got.step(c) for c in rounds]
    assert [t.stats["graph_fallbacks"] for t in tr] == [1, 1, 0]
    assert list(got.graphs.capture_errors) == [("verify", (4, "full"))]
    assert_same([ref.step(c) for c in rounds], tr, eager=False)


def test_scratch_warmup_touches_no_request(model):
    s = start(TORCH, model, "loop", "sequential", range(2), graphs="fake")
    kv = s.engine.kv
    before = [t[:, [kv.plane(sl, j) for sl in (0, 1) for j in range(4)]].clone() for t in (kv.k, kv.v)]
    from kernels.round_buffer import scratch_call_meta

    meta = torch.from_numpy(scratch_call_meta((3, 3, 1), kv.scratch, s.Tcap))
    s.graphs.run("call", (3, 3, 1), 3, meta, lambda m: s.engine.call_step(m, 3, 3, 1), lambda: meta)
    after = [t[:, [kv.plane(sl, j) for sl in (0, 1) for j in range(4)]] for t in (kv.k, kv.v)]
    assert all(torch.equal(x, y) for x, y in zip(before, after))


def test_sampler_matches_reference():
    rng = np.random.default_rng(0)
    V = 64
    for trial in range(200):
        lg = (rng.standard_normal(V) * 3).astype(np.float32)
        if trial % 3 == 0:
            lg = np.round(lg)  # ties, also at the top-k threshold
        t = float(rng.choice([0.5, 1.0, 1.7]))
        k, p = [None, 1, 5, 20, 64, 100][trial % 6], [None, 0.3, 0.9, 1.0, 0.05][trial % 5]
        typ = [None, 0.5, None, 0.95, 1.0, 0.2, None][trial % 7]
        params = SP(t, top_k=k, top_p=p, typical_p=typ)
        want = sampling.filtered_probs(lg, params)
        got = sampler.filtered_probs(
            torch.from_numpy(lg)[None],
            {
                "temp": torch.tensor([t]),
                "top_k": torch.tensor([min(k or V, V)]),
                "top_p": torch.tensor([p if p is not None and p < 1 else float("inf")]),
                "typical_p": torch.tensor([typ if typ is not None and typ < 1 else float("inf")]),
            },
        )[0].numpy()
        assert np.array_equal(want > 0, got > 0) and np.abs(want - got).max() < 1e-6
        for u in rng.random(4):
            assert sampling.categorical(want, u) == int(
                sampler.categorical(torch.from_numpy(want)[None], torch.tensor([u], dtype=torch.float64))[0]
            )
    r, ok = sampler.residual(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]))
    assert not ok[0]


def test_plan_groups_rows_by_plane():
    s = plan_schedule("block", [5, 3], 2, 4)
    windows = np.zeros((2, 3))
    p = build_plan(s, [4, 1], 8, 9, [0, 0], windows)
    assert [c.key for c in p.calls][-2:] == [(8, 2, 5), (8, 2, 5)]  # verify: 2 planes, 5 queries each
    assert all(
        c.key[1] == c.key[0] and c.key[2] == 1
        for c in build_plan(plan_schedule("loop", [5, 3], 2, 4), [4, 1], 8, 9, [0, 0], windows).calls
    )
    assert p.verify[2] == 8 and p.buf.dtype == np.int64


def test_errors(model):
    s = start(TORCH, model, "loop", "sequential", [0])
    for bad in ({7: 2}, {0: 0}, {0: 17}, {}):
        with pytest.raises(OracleError):
            s.submit(bad)
    with pytest.raises(OracleError, match="already"):
        s.add(0, [1], SP())
    with pytest.raises(OracleError, match="outside the vocabulary"):
        s.add(1, [64], SP())
    with pytest.raises(OracleError, match="empty"):
        s.add(1, [], SP())
    short = TORCH.session(model, 2, 4, "loop", max_len=8, grow=False)
    with pytest.raises(OracleError, match="max_len"):
        short.add(1, [1] * 9, SP())
    short.add(0, [1, 2, 3, 4, 5], SP())
    with pytest.raises(OracleError, match="past max_len"):
        short.submit({0: 5})
    with pytest.raises(OracleError):
        TORCH.session(model, 4, 4, "loop")
    with pytest.raises(OracleError):
        TORCH.session(model, 2, 4, "wave")
    with pytest.raises(OracleError, match="not in the session"):
        s.remove(3)
    full = TORCH.session(model, 2, 4, "loop", max_requests=1, grow=False)
    full.add(0, [1], SP())
    with pytest.raises(OracleError, match="slots"):
        full.add(1, [1], SP())


def test_backend_interface(model, monkeypatch):
    monkeypatch.setenv("ORACLE_BACKEND", "torch-cpu")
    b = load_backend()
    assert (b.name, b.dtype, b.exact, set(b.policies)) == ("torch-cpu", "float32", False, {"sequential", "fixed"})
    s = b.session(model, 2, 4, "loop", "fixed")
    s.add(0, [3, 4], SP(1.0, seed=5))
    tr = s.collect(s.submit({0: 3}))
    assert s.tokens(0) == [3, 4] + tr.emitted[0] == s.remove(0)
    assert b.weights(model) is b.weights(model)  # converted once per model


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_property_ragged_rounds(model, data):
    n = data.draw(st.integers(1, 4))
    d, D = data.draw(st.sampled_from([(1, 2), (2, 4), (1, 3), (3, 4)]))
    mode, policy = data.draw(st.sampled_from(["block", "loop"])), data.draw(st.sampled_from(["sequential", "fixed"]))
    rounds = data.draw(
        st.lists(st.dictionaries(st.integers(0, n - 1), st.integers(1, 6), min_size=1), min_size=1, max_size=3)
    )
    tr_ref, tr_got, _, _ = run_both(model, mode, policy, rounds, d, D)
    assert_same(tr_ref, tr_got)


def test_parity_excuses_only_near_ties(model):
    tr_ref, tr_got, _, _ = run_both(model, "loop", "sequential", RAGGED)
    ref, got = tr_ref[0], tr_got[0]
    rid = next(r for r, t in zip(got.requests, got.token_counts) if t >= 2 and MIXED[r].greedy)
    got.drafts[rid] = list(got.drafts[rid])
    x = got.drafts[rid][0]
    lg = ref.draft_logits[(rid, 0)]
    far = int(np.argmin(lg))
    got.drafts[rid][0] = far  # a clear (non-tie) divergence
    got.accepted[rid] = 0  # ... rejected at offset 0
    got.emitted[rid] = [int(np.argmax(got.verify_logits[(rid, 0)]))]
    got.committed[rid] = list(got.emitted[rid])
    got.stats = dict(got.stats, accepted=sum(got.accepted.values()))
    rep = compare_runs([ref], [got], "float32")
    assert not rep.ok and "draft token of offset 1" in next(c.detail for c in rep.checks if c.name == "tokens")
    lg2 = lg.copy()
    lg2[far] = lg2[x] - 1e-7  # now a near tie in the reference
    ref.draft_logits[(rid, 0)] = got.draft_logits[(rid, 0)] = lg2
    rep = compare_runs([ref], [got], "float32")
    assert rep.ok and rep.divergences, rep.first_failure()


def test_bench_helpers_on_cpu():
    t = measure_c_table("tiny", [1, 3], 16, device="cpu", repeats=2)
    assert set(t["c_ms"]) == {"1", "3"} and all(v > 0 for v in t["c_ms"].values()) and not t["graphs"]
    wide = measure_c_table("tiny", [1], 16, device="cpu", repeats=1, kv_capacity=40)
    assert (t["kv_capacity"], t["span"]) == (17, 17) and (wide["kv_capacity"], wide["span"]) == (40, 32)
    s = make_session(random_weights("tiny", "cpu"), "loop", 2, 12, 6, 3, 2, 4)
    r = run_generation(s, [[1] * 12, [2] * 12], [SP(), SP(1.0, seed=1)], 6, 3)
    assert r["rounds"] >= 2 and r["ms"] > 0 and r["graph_fallbacks"] == 0
    # host phases of a synchronous round: inside the round's wall time, the compute (CPU) in enqueue
    assert set(r["host_ms"]) == {"plan", "enqueue", "wait", "finish"} and min(r["host_ms"].values()) >= 0
    assert r["host_ms"]["enqueue"] > r["host_ms"]["plan"] and sum(r["host_ms"].values()) <= r["ms_per_round"]
    assert r["device_ms"] is None  # device timing: CUDA only
    assert all(len(s.tokens(rid)) == 12 + 6 for rid in (0, 1))
    assert r["emitted"] == 2 * 6


def test_c_table_with_rows_sharing_kv_planes(tmp_path):
    """`bench c-table --rows-per-plane`: c_ms (one row per plane) plus c_ms_shared[r] at the
    row counts r divides, a table oracle.ctable reads; the sweep asks for the block round's
    verification calls (T rows per plane)."""
    from bench.ctable import needed_rows
    from oracle.cli import main
    from oracle.ctable import load_ctable

    t = measure_c_table("tiny", [2, 4], 16, device="cpu", repeats=2, rows_per_plane=2)
    assert set(t["c_ms"]) == {"2", "4"} and t["rows_per_plane"] == 2 and all(v > 0 for v in t["c_ms"].values())
    assert needed_rows([1, 4], 4, 2, 4) == ([1, 2, 4, 5, 8, 20], [1, 4, 5, 20], {5: [5, 20]})
    out = tmp_path / "ct.json"
    assert (
        main(
            [
                "bench",
                "c-table",
                "--device",
                "cpu",
                "--preset",
                "tiny",
                "--rows",
                "1,2,3,4",
                "--rows-per-plane",
                "2",
                "--repeats",
                "1",
                "--context",
                "8",
                "--out",
                str(out),
                "--quiet",
                "--force",
            ]
        )
        == 0
    )
    ct = load_ctable(out, force=True)  # CPU timings of a busy machine need not be monotone; the plumbing is tested
    assert ct.rows == (1, 2, 3, 4) and [(r, sub.rows) for r, sub in ct.shared] == [(2, (2, 4))]
    assert ct.call(4, 2) == ct.shared[0][1].c(4) and ct.call(4, 4) == ct.c(4)


def test_pipelined_generation_emits_the_same_tokens():
    """in_flight=2, 3 (round n+1 submitted before round n is collected): greedy requests emit
    what step-by-step rounds emit, token for token; accepted drafts may carry a request past
    `tokens` (never short of it). Sampled requests are not compared token for token: their
    rounds split differently, so they consume different uniforms."""
    w = random_weights("tiny", "cpu")
    prompts = [[1] * 12, [2] * 9, [3] * 5]
    out = []
    for in_flight in (1, 2, 3):
        s = make_session(w, "loop", 3, 12, 7, 3, 2, 4)
        r = run_generation(s, prompts, [SP()] * 3, 7, 3, in_flight)
        out.append((r, [s.tokens(rid) for rid in range(3)]))
    (r1, t1) = out[0]
    assert r1["emitted"] == 21 and [len(a) for a in t1] == [len(p) + 7 for p in prompts]
    assert r1["accepted"] > 0  # drafts pass, so rounds in flight can overshoot
    for r, t in out[1:]:
        assert r["emitted"] >= 21 and all(a[: len(b)] == b for a, b in zip(t, t1))


@pytest.mark.parametrize(
    "params,variant",
    [
        ([SP(), SP()], "greedy"),
        ([SP(), SP(0.7, seed=5)], "plain"),
        ([SP(1.3, seed=6), SP(1.0, top_k=99999, top_p=1.0, seed=7)], "plain"),
        ([SP(), SP(1.0, top_k=8, seed=1)], "full"),
    ],
)
@pytest.mark.parametrize("policy", ["sequential", "fixed"])
def test_head_sampling_variants_match_reference(model, params, variant, policy):
    """The round's head steps skip probabilities (all greedy) or sorts (no top-k/top-p):
    same traces as the reference either way, with graphs keyed by the variant."""
    assert sampling_variant(params, model.cfg.vocab_size) == variant
    rounds = [{0: 4, 1: 3}, {0: 2, 1: 5}, {0: 5, 1: 5}]
    ref, got = (
        b.session(model, 2, 4, "loop", policy, **opts)
        for b, opts in ((ReferenceBackend(), {}), (TORCH, {"graphs": "fake"}))
    )
    for rid, p in enumerate(params):
        ref.add(rid, PROMPTS[rid], p)
        got.add(rid, PROMPTS[rid], p)
    handles = [got.submit(c) for c in rounds]
    assert {h.plan.sampling for h in handles} == {variant}
    assert {k[1][-1] for k in got.graphs.graphs if k[0] in ("draft", "verify")} == {variant}
    assert_same([ref.step(c) for c in rounds], [got.collect(h) for h in handles], eager=False)


def test_plain_probs_are_the_unfiltered_filtered_probs():
    x = torch.randn(7, 300) * 4
    temp = torch.tensor([1.0, 0.5, 2.0, 1.3, 0.9, 1.0, 0.7])
    full = sampler.filtered_probs(
        x, {"temp": temp, "top_k": torch.full((7,), 300), "top_p": torch.full((7,), float("inf"))}
    )
    assert torch.equal(sampler.plain_probs(x, temp), full)


def test_single_row_padding_path(model, monkeypatch):
    """The CUDA fused path runs a one-row call as two, the second a dummy row on the scratch
    plane: exercised here on CPU with the unfused blocks standing in for torch.compile."""
    import kernels.model as km

    monkeypatch.setattr(km, "_fused", lambda compile_dynamic: (km.pre_attn, km.post_attn))
    rounds = [{0: 3}, {0: 5}, {0: 1}]  # loop waves of one row; prefill of one row
    ref = start(ReferenceBackend(), model, "loop", "sequential", [1])
    got = start(TORCH, model, "loop", "sequential", [])
    got.engine.model.fuse = True
    got.add(1, PROMPTS[1], MIXED[1])
    seen = []
    real = km.PackedModel.recurrent_call
    monkeypatch.setattr(
        km.PackedModel, "recurrent_call", lambda self, h, *a: seen.append(h.shape[0]) or real(self, h, *a)
    )
    counts = [{1: c[0]} for c in rounds]
    assert_same([ref.step(c) for c in counts], [got.step(c) for c in counts])
    assert 1 in seen  # a dummy written to a request's plane would corrupt its position 0


def test_round_in_flight_after_a_finishing_round_fails(model):
    """max_tokens=1: the first round (K=3) finishes the request on the device; a second round
    submitted before collection fails at collection, naming the finished request; the
    committed tokens follow the cut; the failed round drops request 0 (its device state ran
    past the finish), the other request keeps its tokens."""
    s = TORCH.session(model, 2, 4, "loop", "sequential")
    s.add(0, PROMPTS[0], SP(max_tokens=1))
    s.add(1, PROMPTS[1], MIXED[1])
    h1 = s.submit({0: 4, 1: 2})
    h2 = s.submit({0: 2})
    tr = s.collect(h1)
    assert tr.finished == {0: "length"} and tr.committed[0] == tr.emitted[0][:1]
    with pytest.raises(OracleError, match="finished"):
        s.collect(h2)
    assert s.tokens(1) == PROMPTS[1] + tr.emitted[1]
    with pytest.raises(OracleError, match="finished|unknown request"):
        s.step({0: 1})


# ---- KernelOptions: every combination the CPU can take ----------------------------------------
# gemv and triton_attn need Triton (CUDA; tests/test_gemv_interpret.py runs the GEMV kernels in
# the interpreter): None (on where available) and False both take the torch path here. fuse=True
# runs torch.compile on the CPU (and pads one-row calls); compile_dynamic picks what is symbolic.
COMBOS = [
    KernelOptions(gemv=g, fuse=f, triton_attn=t, compile_dynamic=c)
    for g in (None, False)
    for t in (None, False)
    for f in (None, False, True)
    for c in ("rows", "all")
]


@pytest.mark.parametrize(
    "opts", COMBOS, ids=[f"gemv={o.gemv}-attn={o.triton_attn}-fuse={o.fuse}-{o.compile_dynamic}" for o in COMBOS]
)
def test_kernel_options_on_the_cpu(model, opts):
    bk = TorchBackend("cpu", kernel_options=opts)
    rounds = [{0: 3, 1: 1}, {1: 4}, {0: 2, 1: 3}]  # one-row waves too (the padded call when fused)
    ref = start(ReferenceBackend(), model, "loop", "sequential", [0, 1])
    got = start(bk, model, "loop", "sequential", [0, 1])
    m = got.engine.model
    assert (m.gemv, m.fuse, m.triton_attn) == (False, opts.fuse is True, False) and m.options is opts
    assert_same([ref.step(c) for c in rounds], [got.step(c) for c in rounds])


def test_kernel_options_come_from_the_environment_only_at_the_cli_edge(monkeypatch, tmp_path):
    tiles = tmp_path / "tiles.json"
    tiles.write_text('{"o": [32, 64, 4]}')
    monkeypatch.setenv("LOOPSPEC_FUSE", "0")
    monkeypatch.setenv("LOOPSPEC_COMPILE_DYNAMIC", "all")
    monkeypatch.setenv("LOOPSPEC_GEMV_CONFIG", str(tiles))
    assert TorchBackend("cpu").kernel_options == KernelOptions()  # no environment here
    want = KernelOptions(fuse=False, compile_dynamic="all", gemv_config={"o": (32, 64, 4)})
    assert load_backend("torch-cpu").kernel_options == want  # the registry factory
    assert load_backend("torch-cpu").session(build_model("tiny", seed=0), 1, 2, "loop").engine.model.options == want
    monkeypatch.setenv("LOOPSPEC_PDL", "0")
    assert load_backend("torch-cpu").kernel_options == dataclasses.replace(want, pdl=False)
    monkeypatch.setenv("LOOPSPEC_PDL", "on")
    with pytest.raises(OracleError, match="LOOPSPEC_PDL='on'"):
        KernelOptions.from_env()
    monkeypatch.delenv("LOOPSPEC_PDL")
    monkeypatch.setenv("LOOPSPEC_GEMV", "yes")
    with pytest.raises(OracleError, match="LOOPSPEC_GEMV='yes'"):
        KernelOptions.from_env()
    with pytest.raises(OracleError, match="compile_dynamic"):
        KernelOptions(compile_dynamic="some")
    with pytest.raises(OracleError, match="pdl"):
        KernelOptions(pdl="yes")


def test_pdl_is_refused_where_it_cannot_run():
    """Programmatic dependent launch needs a CUDA device of compute capability >= 9: asked
    for on the CPU it is refused by name, and left off (None) it resolves to off."""
    assert KernelOptions().resolve("cpu")[3] is False
    with pytest.raises(OracleError, match="pdl=True needs"):
        TorchBackend("cpu", kernel_options=KernelOptions(pdl=True))


def test_plan_cache_gives_the_plan_a_fresh_build_gives():
    """A round that repeats an earlier round's shape (counts, depths, slots) reuses its schedule
    and indices (kernels/round_buffer.PlanCache): the buffer must be the one planned afresh, with
    this round's stream bases and uniforms; the cache keeps the `size` most recent shapes."""
    sched = plan_schedule("loop", [3, 2], [1, 1], [3, 3])
    windows = np.random.default_rng(0).random((2, 3))
    fresh = build_plan(sched, [2, 0], 4, 5, [0, 7], windows, "plain")
    kept = build_plan(sched, [2, 0], 4, 5, [0, 7], windows, "plain", plan_indices(sched, [2, 0], 4, 5))
    assert np.array_equal(fresh.buf, kept.buf)
    assert (fresh.calls, fresh.wrote, fresh.verify, fresh.requests, fresh.uniforms) == (
        kept.calls,
        kept.wrote,
        kept.verify,
        kept.requests,
        kept.uniforms,
    )
    later = build_plan(sched, [2, 0], 4, 5, [3, 9], windows[::-1], "plain", plan_indices(sched, [2, 0], 4, 5))
    assert not np.array_equal(later.buf, kept.buf) and later.calls == kept.calls
    cache, made = PlanCache(size=2), []
    for key in (1, 2, 1, 3, 2, 1):
        assert cache.get(key, lambda key=key: made.append(key) or -key) == -key
    assert made == [1, 2, 3, 2, 1]  # 3 evicted 2 (1 was used more recently), then 2 evicted 1


def test_gemv_tile_configs_in_every_accepted_form():
    """LOOPSPEC_GEMV_CONFIG rows are [BLOCK_N, BLOCK_K, warps(, stages(, peel(, split(, prefetch))))]:
    3 stages, the first-tile peel, no split-K and no L2 prefetch where left out; "/16" keys configure
    the small-M path (2..16 rows); split-K for every product; an unknown kernel name is refused."""
    from kernels.gemv import ONE_ROW_TILES, SMALL_M_TILES, _config, _pf_bytes

    assert _config("o", 1) == (1, *ONE_ROW_TILES["o"], 1, 0)
    assert _config("down", 7) == (16, *SMALL_M_TILES["down"], 0)  # split-K 2 by default
    assert _config("o", 1, {"o": [8, 64, 4]}) == (1, 8, 64, 4, 3, True, 1, 0)
    assert _config("o", 1, {"o": [8, 64, 4, 2]}) == (1, 8, 64, 4, 2, True, 1, 0)
    assert _config("o", 2, {"o/16": [16, 64, 4, 2, 0]}) == (16, 16, 64, 4, 2, False, 1, 0)
    assert _config("down", 2, {"down/16": [16, 64, 4, 2, 1, 4]}) == (16, 16, 64, 4, 2, True, 4, 0)
    assert _config("qkv", 2, {"qkv/16": [32, 256, 4, 3, 1, 1, 512]}) == (16, 32, 256, 4, 3, True, 1, 512)
    assert _config("o", 2, {"o": [8, 64, 4, 2, 0]}) == (16, *SMALL_M_TILES["o"], 0)  # a one-row key: not for 2 rows
    assert KernelOptions(gemv_config={"gate_up/16": [16, 64, 4, 2, 1, 2]}).gemv_config["gate_up/16"][5] == 2
    with pytest.raises(OracleError, match="unknown kernel 'gate_up/8'"):
        KernelOptions(gemv_config={"gate_up/8": [16, 64, 4, 2, 1, 2]})
    w = torch.zeros(4, 2048, dtype=torch.bfloat16)
    # prefetch bytes: at most the program's span of K, in whole 16-byte units
    assert (_pf_bytes(0, 1024, w), _pf_bytes(100, 1024, w), _pf_bytes(4096, 1024, w)) == (0, 192, 2048)


def test_bookkeeping_warmups_leave_requests_and_the_scratch_frontier(model):
    """The round's begin and accept steps run on the scratch slot at capture: no request's
    state changes, and the scratch slot's frontier, budget and RNG cursor stay (so later
    warm-ups of calls stay at the scratch plane's first positions)."""
    from kernels.round_buffer import scratch_request_meta

    s = start(TORCH, model, "loop", "sequential", range(2), graphs="fake")
    s.step({0: 3, 1: 2})
    e, sc = s.engine, s.engine.kv.scratch
    names = ("start", "last", "left", "cursor", "ubase")
    before = {k: getattr(e, k).clone() for k in names} | {"tok": e.tok[:sc].clone(), "ubuf": e.ubuf[:sc].clone()}
    for R, W in ((1, 3), (3, 5)):
        meta = torch.from_numpy(scratch_request_meta(R, W, sc))
        s.graphs.run("begin", (R, W), R, meta, lambda m: e.begin_step(m, R, W), lambda: meta)
        meta = torch.from_numpy(scratch_request_meta(R, 0, sc))
        packed = s.graphs.run(
            "accept", (R, "sequential"), R, meta, lambda m: e.accept_step(m, R, "sequential"), lambda: meta
        )
        assert packed.shape == (R, 7 + 3 * s.Tcap - 1)
    for k in names:
        assert torch.equal(getattr(e, k)[:sc], before[k][:sc]), k
    for k in ("start", "left", "cursor"):
        assert torch.equal(getattr(e, k)[sc], before[k][sc]), k
    assert torch.equal(e.tok[:sc], before["tok"]) and torch.equal(
        e.ubuf[:sc].view(torch.int64), before["ubuf"].view(torch.int64)
    )
    assert s.graphs.stats["graph_captures"] >= 4


def test_sweep_measures_c_at_its_sessions_kv_capacity(tmp_path):
    """On the H200 c(2) moves 7% between KV capacities 257 and 342 (docs/results.md), so the
    sweep's c-table is measured at the capacity its sessions allocate, not at context + 1."""
    from bench.rounds import session_kv_capacity
    from oracle.cli import main

    out = tmp_path / "sweep.json"
    assert (
        main(
            [
                "bench",
                "sweep",
                "--device",
                "cpu",
                "--preset",
                "tiny",
                "--batch",
                "1",
                "--k",
                "2",
                "--tokens",
                "3",
                "--repeats",
                "2",
                "--repeats-ctable",
                "1",
                "--context",
                "8",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    cap = session_kv_capacity(8, 3, 2)
    assert json.loads(out.read_text())["ctable"]["kv_capacity"] == cap == 8 + 3 + 4 * 3 + 2
    assert make_session(random_weights("tiny", "cpu"), "block", 1, 8, 3, 2, 2, 4).max_len == cap


# ---- sequence-dependent processors (oracle/processors.py) on the device ------------------------
from kernels import host_sampling  # noqa: E402
from kernels.engine import Engine  # noqa: E402
from kernels.round_buffer import processors_variant  # noqa: E402
from kernels.rows import HISTORY, MAX_BAD_WORD_LEN, MAX_BAD_WORDS, MAX_NGRAM, STEPS, TAIL, processor_steps  # noqa: E402
from oracle.judge.plans.plan import backend_plan  # noqa: E402
from oracle.judge.plans.verdict import judge  # noqa: E402
from oracle.judge.scenario import make_case  # noqa: E402
from oracle.sampling import Seen  # noqa: E402

from property_tests.strategies import PROC, PROC_PARAMS  # noqa: E402

PROC_ROUNDS = [
    {0: 3, 1: 1, 2: 5, 3: 2, 4: 4, 5: 3},
    {0: 5, 1: 5, 2: 5, 3: 5, 4: 3, 5: 5, 6: 4},
    {3: 4, 1: 2, 4: 1, 5: 6, 6: 1},
    {0: 1, 1: 3, 2: 2, 3: 5, 4: 6, 5: 2, 6: 6},
    {i: 6 for i in range(7)},
    {4: 3},
    {0: 4, 1: 4, 2: 4, 5: 4, 6: 4},
]


def commit_output(engine, slot, output):
    """A slot's committed-output state as accept_commit leaves it after `output` was generated."""
    V = engine.counts.shape[1]
    engine.counts[slot] = torch.from_numpy(np.bincount(np.asarray(output, np.int64), minlength=V).astype(np.float32))
    engine.gen[slot] = len(output)
    tail = list(output[-TAIL:]) if output else []
    engine.tail[slot] = torch.tensor([0] * (TAIL - len(tail)) + tail)
    plen = int(engine.plen[slot])
    engine.hist[slot, plen : plen + len(output)] = torch.tensor(output, dtype=torch.int64)


def assert_proc_state(session):
    """The device's per-slot processor state is what the host's committed tokens say (for the
    requests with processors: the state of the others is not kept)."""
    e = session.engine
    for req in session.requests.values():
        if not processor_steps(req.params):
            continue
        out = req.tokens[len(req.tokens) - req.generated :]
        V = e.counts.shape[1]
        assert np.array_equal(e.counts[req.slot].numpy(), np.bincount(out, minlength=V).astype(np.float32)), req.rid
        assert int(e.gen[req.slot]) == req.generated
        k = min(TAIL, len(out))
        assert e.tail[req.slot, TAIL - k :].tolist() == out[len(out) - k :]
        prompt = np.zeros(V, bool)
        prompt[req.tokens[: len(req.tokens) - req.generated]] = True
        assert np.array_equal(e.prompt[req.slot].numpy(), prompt)
        if req.params.no_repeat_ngram:  # the history: prompt and output
            assert e.hist[req.slot, : len(req.tokens)].tolist() == req.tokens, req.rid


def random_proc_params(rng, V, ctx):
    """Processors that bite on a small vocabulary; bad words partly cut from ctx (the committed
    output followed by the drafts), so their prefixes straddle the two."""
    pick = lambda *xs: xs[int(rng.integers(len(xs)))]
    words = [tuple(int(t) for t in rng.integers(0, 6, rng.integers(1, 4))) for _ in range(rng.integers(0, 4))]
    for _ in range(rng.integers(0, 4)):
        if len(ctx) >= 2:
            n = int(rng.integers(1, min(len(ctx), MAX_BAD_WORD_LEN - 1) + 1))
            end = int(rng.integers(n, len(ctx) + 1))
            words.append(tuple(ctx[end - n : end]) + (int(rng.integers(0, V)),))
    bias = {
        int(t): float(pick(0.0, 2.0, -1.5, 30.0, -100.0, 100.0, 0.25)) for t in rng.integers(0, V, rng.integers(0, 5))
    }
    stops = tuple(int(t) for t in rng.integers(0, V, rng.integers(0, 3)))
    return SP(
        pick(0.0, 1.0, 0.7),
        seed=1,
        repetition_penalty=pick(1.0, 1.3, 0.7, 2.0, 1e-3),
        presence_penalty=pick(0.0, 0.5, -1.0, 2.0),
        frequency_penalty=pick(0.0, 0.2, -2.0, 1.5),
        logit_bias=bias,
        bad_words=tuple(words),
        stop_token_ids=stops,
        min_tokens=int(rng.integers(0, 12)),
        banned_token_ids=tuple(int(t) for t in rng.integers(0, V, rng.integers(0, 3))),
        no_repeat_ngram=pick(0, 0, 1, 2, 3, MAX_NGRAM),
    )


def test_device_processors_match_the_reference_bit_for_bit(model):
    """Engine._processed (the draft and verification heads' processors: the slot's prompt mask,
    output counts, generated count and tail, plus the round's drafts 1..o) gives
    oracle.sampling.processed_logits(logits, params, Seen(prompt, output + drafts 1..o)) bit for
    bit: random logits with -inf and ties, repeated tokens, biases that move the argmax,
    multi-token bad words across the committed/drafted boundary, min_tokens at its boundary.
    Every step on for every row too (off steps are the identity), and the error flag where the
    reference refuses the processed logits."""
    rng = np.random.default_rng(25)
    s = TORCH.session(model, 2, 4, "loop", max_requests=4)
    e, V, T = s.engine, model.cfg.vocab_size, s.Tcap
    s.add(-1, [1], SP(bad_words=((1,),)))  # allocates the buffers
    counted = {"match": 0, "min_tokens": 0, "errors": 0, "argmax_moved": 0, "ngram": 0}
    for trial in range(150):
        prompt = [int(t) for t in rng.integers(0, 8, rng.integers(1, 6))]
        output = [int(t) for t in rng.integers(0, 8, rng.integers(0, 12))]
        K = int(rng.integers(0, T))
        drafts = [int(t) for t in rng.integers(0, 8, K)]
        params = random_proc_params(rng, V, output + drafts)
        if trial % 4 == 0:  # min_tokens at the boundary
            params = dataclasses.replace(
                params,
                min_tokens=len(output) + int(rng.integers(0, K + 2)),
                stop_token_ids=params.stop_token_ids or (3,),
            )
        raw = (rng.standard_normal((K + 1, V)) * 3).astype(np.float32)
        if trial % 3 == 0:
            raw = np.round(raw)  # ties
        raw[rng.random((K + 1, V)) < 0.1] = -np.inf
        if trial % 10 == 0:  # the processors mask the rest
            live = [int(t) for t in rng.integers(0, V, 2)]
            raw[0, :] = -np.inf
            raw[0, live] = 1.0
            params = dataclasses.replace(
                params, bad_words=params.bad_words[: MAX_BAD_WORDS - 2] + tuple((t,) for t in live)
            )
        if trial % 10 == 5:  # x / rep overflows to +inf
            raw[0, prompt[0]] = 3e38
            params = dataclasses.replace(params, repetition_penalty=1e-3)
        rid = trial
        s.add(rid, prompt, params)
        slot = s.requests[rid].slot
        commit_output(e, slot, output)
        e.tok[slot, 1 : K + 1] = torch.tensor(drafts, dtype=torch.int64)
        e.tok[slot, K + 1 :] = torch.from_numpy(rng.integers(0, V, T - K - 1))  # stale drafts past K
        slots, offs = torch.full((K + 1,), slot), torch.arange(K + 1)
        for steps in (processor_steps(params), STEPS):
            got, bad = e._processed(torch.from_numpy(raw), slots, offs, steps)
            for o in range(K + 1):
                seen = Seen(tuple(prompt), tuple(output + drafts[:o]), o, K)
                try:
                    with np.errstate(over="ignore"):  # x / rep -> +inf: refused
                        want = sampling.processed_logits(raw[o], params, seen)
                except OracleError:
                    assert bool(bad[o]), (trial, o)
                    counted["errors"] += 1
                    continue
                assert not bool(bad[o]), (trial, o)
                diff = np.flatnonzero(want.view(np.int32) != got[o].numpy().view(np.int32))
                assert not diff.size, (trial, o, steps, params, diff, want[diff], got[o].numpy()[diff], raw[o][diff])
                counted["argmax_moved"] += int(
                    np.argmax(want)
                    != np.argmax(np.where(np.isin(np.arange(V), params.banned_token_ids), -np.inf, raw[o]))
                )
                full = output + drafts[:o]
                counted["match"] += any(
                    len(w) > 1
                    and len(w) - 1 <= len(full)
                    and tuple(full[len(full) - len(w) + 1 :]) == w[:-1]
                    and len(w) - 1 > o
                    for w in params.bad_words
                )
                counted["min_tokens"] += len(full) == params.min_tokens - 1 and bool(params.stop_token_ids)
                counted["ngram"] += bool(
                    np.isneginf(
                        sampling.processed_logits(
                            np.zeros(V, np.float32), SP(no_repeat_ngram=params.no_repeat_ngram), seen
                        )
                    ).any()
                )  # an n-gram masked a token
        s.remove(rid)
    assert min(counted.values()) > 0, counted  # straddling matches, min_tokens edges, errors, moved argmaxes, n-grams


def test_host_sampling_runs_the_device_processors():
    """backend.sampling (numpy in/out) takes seen= like oracle.sampling: processed logits and
    greedy tokens bit for bit, probabilities within 1e-6; seen=None where the params need it is
    the reference's error; without processors, the results of before."""
    rng = np.random.default_rng(5)
    V = 32
    for trial in range(60):
        out = [int(t) for t in rng.integers(0, 6, rng.integers(0, 14))]
        params = random_proc_params(rng, V, out)
        lg = (rng.standard_normal(V) * 3).astype(np.float32)
        seen = Seen(tuple(int(t) for t in rng.integers(0, 6, 3)), tuple(out), 0, 0)
        try:
            want = sampling.processed_logits(lg, params, seen)
        except OracleError:
            with pytest.raises(OracleError, match="masked"):
                host_sampling.processed_logits(lg, params, seen)
            continue
        assert np.array_equal(want.view(np.int32), host_sampling.processed_logits(lg, params, seen).view(np.int32))
        assert host_sampling.greedy_token(lg, params, seen) == sampling.greedy_token(lg, params, seen)
        if not params.greedy:
            assert (
                np.abs(host_sampling.filtered_probs(lg, params, seen) - sampling.filtered_probs(lg, params, seen)).max()
                < 1e-6
            )
        if params.needs_seen:
            for f in (host_sampling.processed_logits, sampling.processed_logits):
                with pytest.raises(OracleError, match="pass seen="):
                    f(lg, params)
    lg = (rng.standard_normal(V) * 3).astype(np.float32)
    plain = SP(0.8, top_k=5, logit_bias={3: 4.0})  # no seen needed
    assert np.abs(host_sampling.filtered_probs(lg, plain) - sampling.filtered_probs(lg, plain)).max() < 1e-6
    assert host_sampling.greedy_token(lg) == sampling.greedy_token(lg)


def run_procs(bk, model, mode, policy, rounds=PROC_ROUNDS, params=PROC_PARAMS, ahead=None, **opts):
    """ahead: the traces of a synchronous run; then every round is submitted before the first
    is collected, without the requests that run finished."""
    s = bk.session(model, 2, 4, mode, policy, **opts)
    traces, handles = [], []
    for n, c in enumerate(rounds):
        finished = {r for t in (ahead[:n] if ahead else traces) for r in t.finished}
        c = {r: t for r, t in c.items() if r not in finished}
        for rid in c:
            if rid not in s.requests:
                s.add(rid, PROMPTS[rid % len(PROMPTS)], params[rid])
        if ahead:
            handles.append(s.submit(c))
        else:
            traces.append(s.step(c))
    return traces + [s.collect(h) for h in handles], s


@pytest.mark.parametrize("policy", ["sequential", "fixed"])
@pytest.mark.parametrize("mode", ["block", "loop"])
def test_rounds_with_processors_match_the_reference(model, mode, policy):
    """Multi-round sessions with processors (greedy and sampled, with and without filters, mixed
    with requests that have none): the torch-cpu traces equal the reference's (tokens, RNG
    events with values, calls, stops); graph keys carry the round's processor steps; the device
    state (counts, generated, tail, prompt mask) follows the commits; capacity growth and
    rounds in flight carry it."""
    tr_ref, ref = run_procs(ReferenceBackend(), model, mode, policy)
    tr_got, got = run_procs(TORCH, model, mode, policy, graphs="fake")
    assert_same(tr_ref, tr_got, eager=False)
    assert_proc_state(got)
    assert any(t.finished for t in tr_ref) and any(
        a < k - 1 for t in tr_ref for a, k in zip(t.accepted.values(), t.token_counts)
    )
    for t in tr_got:  # the processors hold in what was emitted
        for rid, toks in t.emitted.items():
            if PROC_PARAMS[rid].bad_words == PROC["bad_words"]:
                assert 7 not in toks
    keys = [k[1] for k in got.graphs.graphs if k[0] in ("draft", "verify", "accept")]
    assert {k[-1] for k in keys if isinstance(k[-1], tuple)} == {STEPS}
    assert {k for k in keys if not isinstance(k[-1], tuple)}  # round 5: request 4 alone, none
    # growth (max_requests=2: doubles twice) and every round in flight at once
    tr_ahead, ahead = run_procs(TORCH, model, mode, policy, ahead=tr_ref, max_requests=2, max_len=8)
    assert ahead.engine.kv.n_slots > 3
    assert_same(tr_ref, tr_ahead)
    assert_proc_state(ahead)


def test_rounds_without_processors_take_todays_steps(model):
    """No request with a processor: no processor buffers, plans without processor steps, graph
    keys as before; a round whose requests have none takes those steps in a session that has
    processors elsewhere (processors_variant)."""
    s = start(TORCH, model, "loop", "sequential", range(3), graphs="fake")
    h = s.submit({0: 3, 1: 2, 2: 4})
    s.collect(h)
    assert h.plan.processors == () and not s.engine.procs and not hasattr(s.engine, "counts")
    assert all(len(k[1]) == 2 for k in s.graphs.graphs if k[0] in ("draft", "verify", "accept"))
    variant = lambda params: processors_variant([processor_steps(p) for p in params])
    assert variant([SP(), SP(0.5, top_k=3, stop_token_ids=(4,), banned_token_ids=(1,))]) == ()
    assert variant([SP(), SP(logit_bias={1: 1.0}), SP(min_tokens=2)]) == ("logit_bias",)
    assert (
        variant(
            [
                SP(min_tokens=2, stop_token_ids=(1,)),
                SP(presence_penalty=0.1, logit_bias={1: -1.0}),
                SP(bad_words=((2,),), no_repeat_ngram=2),
            ]
        )
        == STEPS
    )
    s.add(7, [1, 2], SP(repetition_penalty=1.2))
    assert s.engine.procs and s.engine.counts.shape == (s.engine.kv.n_slots, model.cfg.vocab_size)
    assert s.submit({0: 2, 1: 2}).plan.processors == () and s.submit({0: 2, 7: 2}).plan.processors == ("penalties",)


def test_bad_words_past_the_device_tables_are_refused_at_add(model):
    s = TORCH.session(model, 2, 4, "loop")
    free = list(s.engine.kv.free)
    with pytest.raises(OracleError, match=f"request 0: bad_words: a word of {MAX_BAD_WORD_LEN + 1} tokens"):
        s.add(0, [1], SP(bad_words=(tuple(range(MAX_BAD_WORD_LEN + 1)),)))
    with pytest.raises(OracleError, match=f"at most {MAX_BAD_WORDS} per request"):
        s.add(0, [1], SP(bad_words=tuple((t,) for t in range(MAX_BAD_WORDS + 1))))
    assert s.engine.kv.free == free and not s.requests
    s.add(0, [1], SP(bad_words=(tuple(range(MAX_BAD_WORD_LEN)),) + tuple((t,) for t in range(MAX_BAD_WORDS - 1))))


def test_no_repeat_ngram_past_the_device_tables_is_refused(model):
    """n above MAX_NGRAM, or a prompt and max_tokens above HISTORY: refused at add() in one line;
    without max_tokens, the round that would commit past HISTORY."""
    s = TORCH.session(model, 2, 4, "loop", max_len=HISTORY + 64)
    free = list(s.engine.kv.free)
    with pytest.raises(
        OracleError, match=f"^request 0: no_repeat_ngram {MAX_NGRAM + 1}: .* at most {MAX_NGRAM} tokens$"
    ):
        s.add(0, [1], SP(no_repeat_ngram=MAX_NGRAM + 1))
    with pytest.raises(OracleError, match=f"^request 0: no_repeat_ngram: the request reaches {HISTORY + 1} tokens"):
        s.add(0, [1, 2], SP(no_repeat_ngram=2, max_tokens=HISTORY - 1))
    assert s.engine.kv.free == free and not s.requests
    s.add(0, [1, 2], SP(no_repeat_ngram=MAX_NGRAM, max_tokens=HISTORY - 2))
    s.add(1, [1] * (HISTORY - 2), SP(no_repeat_ngram=2))
    s.step({1: 2})  # HISTORY tokens committed at most: fits
    with pytest.raises(OracleError, match=f"^request 1: no_repeat_ngram: the request reaches {HISTORY + 1} tokens"):
        s.submit({1: 2})


def proc_cases(vocab):
    """The issue's processor case, greedy and sampled (with and without filters) beside requests
    without processors, under both RNG policies: what `check --repetition-penalty 1.3 ...` runs."""
    rounds = [{0: 5, 1: 3, 2: 4, 3: 2, 4: 3}] * 5
    return [
        make_case(f"processors, {pol}", rounds, 2, 4, PROC_PARAMS[:5], seed=3, policy=pol, vocab=vocab)
        for pol in ("sequential", "fixed")
    ]


@pytest.mark.parametrize("name", ["torch-cpu", "torch-cpu-bf16"])
def test_the_judge_passes_the_torch_backends_with_processors(model, name):
    """`check --backend torch-cpu` / `torch-cpu-bf16` on the processor cases: the one judge
    (oracle.judge.plans.verdict.judge) finds every round explained."""
    out = judge(backend_plan(load_backend(name), model, proc_cases(model.cfg.vocab_size), probe="off")).to_json()
    assert out["ok"], [c for c in out["checks"] if not c["ok"]][:3]
    assert out["request_rounds"] > 100 and not out["skipped"]
    if name == "torch-cpu":
        assert out["max_rel_err"]["logits"] < 1e-5 and not out["excused_divergences"]


def _no_drafts(real):  # the rows see the committed tokens only
    return lambda self, slot, off, steps: real(self, slot, off * 0, steps)


def _verify_only(real):  # the draft head runs without processors
    return lambda self, meta, Mh, sampling, steps=(): real(self, meta, Mh, sampling, ())


def _no_commit(real):  # the output counts, generated count and tail never move
    return lambda self, meta, R, policy, steps=(): real(self, meta, R, policy, ())


@pytest.mark.parametrize(
    "method,fault", [("_proc_rows", _no_drafts), ("draft_step", _verify_only), ("accept_step", _no_commit)]
)
def test_the_judge_catches_device_processor_faults(model, monkeypatch, method, fault):
    monkeypatch.setattr(Engine, method, fault(getattr(Engine, method)))
    out = judge(backend_plan(TorchBackend("cpu"), model, proc_cases(model.cfg.vocab_size)[:1], probe="off")).to_json()
    bad = [c for c in out["checks"] if not c["ok"]]
    assert bad and not any("raised" in c["detail"] for c in bad), bad  # judged, not crashed
