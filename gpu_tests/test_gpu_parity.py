"""BF16 torch-cuda rounds (kernels/) against the FP32 reference, over Hypothesis-generated
ragged rounds on the tiny and small presets; CUDA graphs vs eager; limits and counters."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpu_tests.tolerances import TOLERANCES
from kernels.backend import make_torch_backend
from kernels.bench import measure_c_table
from kernels.parity import compare_traces
from oracle.backends import ReferenceBackend
from oracle.model import build_model
from oracle.sampling import SamplingParams as SP

pytestmark = pytest.mark.gpu
# GPU_TESTS_ON_CPU=1: a slow dry run of this file's logic on CPU (BF16 on CPU, "fake" graphs)
DEVICE = "cpu" if os.environ.get("GPU_TESTS_ON_CPU") == "1" else "cuda"
SCALE = float(os.environ.get("GPU_TESTS_EXAMPLES", "1"))      # scales Hypothesis example counts
REF = ReferenceBackend()
KINDS = [SP(), SP(1.0, top_k=8), SP(0.8, top_p=0.8), SP(1.2, top_k=20, top_p=0.9), SP(0.7)]
SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_models: dict = {}
_backends: dict = {}


def model(preset):
    if preset not in _models:
        _models[preset] = build_model(preset, seed=0)
    return _models[preset]


def cuda(dtype="bfloat16"):
    if dtype not in _backends:
        _backends[dtype] = make_torch_backend(DEVICE, dtype=dtype, **({"graphs": "fake"} if DEVICE == "cpu" else {}))
    return _backends[dtype]


@dataclass
class Scenario:
    d: int
    D: int
    mode: str
    policy: str
    prompts: list
    params: list
    rounds: list


@st.composite
def scenarios(draw, vocab: int, max_requests: int = 6, max_T: int = 6, max_rounds: int = 3):
    n = draw(st.integers(1, max_requests))
    d, D = draw(st.sampled_from([(1, 2), (2, 4), (1, 3), (3, 4), (2, 3)]))
    prompts = [draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=12)) for _ in range(n)]
    params = []
    for i in range(n):
        p = draw(st.sampled_from(KINDS))
        params.append(SP(p.temperature, p.top_k, p.top_p, seed=draw(st.integers(0, 2 ** 32 - 1))))
    rounds = draw(st.lists(st.dictionaries(st.integers(0, n - 1), st.integers(1, max_T), min_size=1),
                           min_size=1, max_size=max_rounds))
    return Scenario(d, D, draw(st.sampled_from(["block", "loop"])), draw(st.sampled_from(["sequential", "fixed"])),
                    prompts, params, rounds)


SUMMARY: dict = {}          # per preset, printed by conftest's terminal summary


def run(backend, m, sc: Scenario, replay=None, submit_ahead=False, **opts):
    s = backend.session(m, sc.d, sc.D, sc.mode, sc.policy, **opts)
    for rid, (prompt, params) in enumerate(zip(sc.prompts, sc.params)):
        s.add(rid, prompt, params, **({"replay": replay[rid]} if replay else {}))
    if submit_ahead:
        handles = [s.submit(c) for c in sc.rounds]
        return [s.collect(h) for h in handles], s
    return [s.step(c) for c in sc.rounds], s


def assert_parity(ref, got, dtype="bfloat16", fallbacks_allowed=False):
    rep = compare_traces(ref, got, dtype, tolerances=TOLERANCES)
    assert rep.ok, "\n".join(rep.failures[:5]) + f"\nmax errors {rep.max_err}; excused: {rep.divergences}"
    for tr in got:
        assert tr.dtype == dtype
        if not fallbacks_allowed:
            assert tr.stats["graph_fallbacks"] == 0, tr.stats
            assert tr.stats["graph_replays"] == len(tr.calls) + tr.stats["draft_head_calls"] + 1, tr.stats
    return rep


def assert_identical(a, b):
    """Bit-for-bit equal traces (same dtype, same kernels)."""
    for x, y in zip(a, b, strict=True):
        assert (x.drafts, x.accepted, x.emitted, x.rng_events) == (y.drafts, y.accepted, y.emitted, y.rng_events)
        for A, B in ((x.draft_logits, y.draft_logits), (x.verify_logits, y.verify_logits)):
            assert A.keys() == B.keys() and all(np.array_equal(A[k], B[k]) for k in A)
        assert x.kv_writes.keys() == y.kv_writes.keys()
        assert all(np.array_equal(x.kv_writes[k][1], y.kv_writes[k][1]) and
                   np.array_equal(x.kv_writes[k][2], y.kv_writes[k][2]) for k in x.kv_writes)


@pytest.mark.parametrize("preset,examples", [("tiny", 25), ("small", 12)])
def test_bf16_rounds_match_reference(preset, examples):
    m = model(preset)
    seen = {"requests": 0, "divergences": 0, "cases": 0, "fallbacks": 0, "max_err": {"kv": 0.0, "logits": 0.0}}

    @settings(max_examples=max(1, int(examples * SCALE)), **SETTINGS)
    @given(sc=scenarios(m.cfg.vocab_size))
    def check(sc):
        ref, _ = run(REF, m, sc)
        got, _ = run(cuda(), m, sc)
        rep = assert_parity(ref, got)
        seen["requests"] += rep.compared["requests"]
        seen["divergences"] += len(rep.divergences)
        seen["cases"] += 1
        seen["fallbacks"] += sum(tr.stats["graph_fallbacks"] for tr in got)
        for k in ("kv", "logits"):
            seen["max_err"][k] = max(seen["max_err"][k], rep.max_err[k])

    check()
    SUMMARY[preset] = {"cases": seen["cases"], "request_rounds": seen["requests"], "excused_divergences": seen["divergences"],
                       "max_rel_err": seen["max_err"], "graph_fallbacks": seen["fallbacks"]}
    # No cap on the NUMBER of excused divergences: how many near-ties BF16 flips depends on
    # the model (small: 10-11 of 28 request-rounds on the H200, docs/gpu_results.md). Each
    # excused one is instead proven to come from precision: assert_parity requires every
    # backend decision to be the reference's rule applied to the backend's own logits and
    # uniforms (oracle.compare.unexplained_decision), and those logits are within tolerance.
    assert seen["cases"] > 0 and seen["requests"] > seen["divergences"], seen


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_replay_mode_agreement(preset):
    m = model(preset)

    @settings(max_examples=max(1, int(8 * SCALE)), **SETTINGS)
    @given(sc=scenarios(m.cfg.vocab_size), seed=st.integers(0, 1000))
    def check(sc, seed):
        rng = np.random.default_rng(seed)
        replay = {rid: list(rng.random(200)) for rid in range(len(sc.prompts))}
        ref, _ = run(REF, m, sc, replay=replay)                     # both sides consume the same list
        got, _ = run(cuda(), m, sc, replay=replay)
        assert_parity(ref, got)
        # the reference replays the uniforms the device run recorded (padded: after an excused
        # divergence the reference may need more than the device used)
        recorded = {rid: [e.value for tr in got for e in tr.rng_events if e.request == rid] + list(rng.random(64))
                    for rid in range(len(sc.prompts))}
        ref2, _ = run(REF, m, sc, replay=recorded)
        assert_parity(ref2, got)

    check()


@pytest.mark.parametrize("preset", ["tiny", "small"])
@pytest.mark.parametrize("mode", ["block", "loop"])
def test_graph_and_eager_identical(preset, mode):
    m = model(preset)
    rng = np.random.default_rng(3)
    sc = Scenario(2, 4, mode, "sequential", [list(map(int, rng.integers(0, m.cfg.vocab_size, 1 + 3 * i)))
                                             for i in range(5)],
                  [SP(k.temperature, k.top_k, k.top_p, seed=i) for i, k in enumerate(KINDS)],
                  [{0: 5, 1: 5, 2: 5, 3: 5, 4: 5}, {0: 1, 1: 3, 2: 6, 3: 2, 4: 4}, {4: 3, 2: 1}, {0: 6, 3: 6}])
    graphed, gs = run(cuda(), m, sc)
    eager, es = run(cuda(), m, sc, graphs="off")
    assert_identical(graphed, eager)
    assert sum(t.stats["graph_captures"] for t in graphed) > 0 and not gs.graphs.capture_errors
    assert all(t.stats["graph_fallbacks"] == 0 for t in graphed)
    assert all(t.stats["graph_replays"] == 0 for t in eager)
    ahead, _ = run(cuda(), m, sc, submit_ahead=True)                # every round in flight at once
    assert_identical(graphed, ahead)
    assert_parity(run(REF, m, sc)[0], graphed)


def test_forced_fallback_is_counted():
    m = model("tiny")
    sc = Scenario(2, 4, "block", "fixed", [[1, 2, 3], [4], [5, 6]], [SP(), SP(1.0, seed=1), SP(0.8, top_k=5, seed=2)],
                  [{0: 5, 1: 5, 2: 5}, {0: 2, 1: 6, 2: 3}])
    B = 9                                                           # below the 15 and 11 verification rows
    s = cuda().session(m, sc.d, sc.D, sc.mode, sc.policy, max_batch_size=B)
    for rid, (p, q) in enumerate(zip(sc.prompts, sc.params)):
        s.add(rid, p, q)
    got, expected = [], []
    for counts in sc.rounds:
        h = s.submit(counts)
        rows = [cp.key[0] for cp in h.plan.calls] + [cp.head[2] for cp in h.plan.calls if cp.head] + [h.plan.verify[2]]
        expected.append(sum(r > B for r in rows))
        got.append(s.collect(h))
    assert [t.stats["graph_fallbacks"] for t in got] == expected and all(e > 0 for e in expected)
    assert all(t.stats["graph_replays"] + t.stats["graph_fallbacks"] == len(t.calls) + t.stats["draft_head_calls"] + 1
               for t in got)
    assert_identical(got, run(cuda(), m, sc, graphs="off")[0])       # fallback steps are the eager ones
    assert_parity(run(REF, m, sc)[0], got, fallbacks_allowed=True)


def test_max_graphs_limit():
    m = model("tiny")
    sc = Scenario(1, 3, "loop", "sequential", [[1], [2, 3]], [SP(), SP(1.0, seed=4)], [{0: 4, 1: 2}, {0: 3, 1: 5}])
    got, s = run(cuda(), m, sc, max_graphs=3)
    assert len(s.graphs.graphs) == 3 and sum(t.stats["graph_captures"] for t in got) == 3
    assert sum(t.stats["graph_fallbacks"] for t in got) > 0
    assert_identical(got, run(cuda(), m, sc, graphs="off")[0])


def test_fp32_on_cuda_matches_reference_tightly():
    m = model("small")

    @settings(max_examples=max(1, int(8 * SCALE)), **SETTINGS)
    @given(sc=scenarios(m.cfg.vocab_size))
    def check(sc):
        assert_parity(run(REF, m, sc)[0], run(cuda("float32"), m, sc)[0], dtype="float32")

    check()


def test_capacity_growth_with_graphs():
    m = model("tiny")
    sc = Scenario(2, 4, "loop", "sequential", [[1, 2], [3], [4, 5, 6], [7]], [SP(), SP(1.0, seed=1)] * 2,
                  [{0: 4, 1: 4}, {0: 6, 1: 2, 2: 5, 3: 3}, {0: 6, 2: 6, 3: 6}])
    got, s = run(cuda(), m, sc, max_requests=1, max_len=8, submit_ahead=True)
    assert s.engine.kv.n_slots > 2 and s.max_len > 8
    assert_parity(run(REF, m, sc)[0], got)


def test_c_table_measurement():
    t = measure_c_table("tiny", [1, 2, 8], 64, repeats=5, device=DEVICE)
    assert t["graphs"] == (DEVICE == "cuda") and set(t["c_ms"]) == {"1", "2", "8"}
    assert all(v > 0 for v in t["c_ms"].values())


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_one_row_calls_take_the_gemv_path(preset, monkeypatch):
    """One-row recurrent calls run through kernels/gemv.py on CUDA (LOOPSPEC_GEMV, default on):
    a loop round of one request has one-row waves; its trace matches the reference, and the
    same session with the path off agrees within the BF16 tolerance."""
    import kernels.model as km
    if DEVICE != "cuda" or not km.GEMV_DEFAULT:
        pytest.skip("the gemv path is CUDA-only and on by default")
    m = model(preset)
    calls = []
    real = km.PackedModel._gemv_call
    monkeypatch.setattr(km.PackedModel, "_gemv_call", lambda self, *a: calls.append(a[0].shape[0]) or real(self, *a))
    sc = Scenario(2, 4, "loop", "sequential", [[3, 1, 4, 1, 5]], [SP()], [{0: 5}, {0: 3}, {0: 5}])
    got, _ = run(cuda(), m, sc, graphs="off")
    assert calls and set(calls) == {1}
    assert_parity(run(REF, m, sc)[0], got, fallbacks_allowed=True)
    monkeypatch.setattr(km, "GEMV_MAX_ROWS", 0)                   # the compiled/cuBLAS path instead
    calls.clear()
    other, _ = run(cuda(), m, sc, graphs="off")
    assert not calls
    rep = compare_traces(other, got, "bfloat16", tolerances=TOLERANCES)
    assert rep.ok, rep.failures[:3]
