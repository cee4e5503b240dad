"""The invariant mode on the CPU (kernels/invariant.py): a row's bits do not depend on its call's
other rows nor on torch's thread count; the default path's do; the three invariance faults
(kernels/invariant_faults.py) break it in their own operation; the session's capture (kernels/tap.py)."""

import dataclasses
import sys

import numpy as np
import pytest
import torch

from kernels import invariant as inv
from kernels.backend import TorchBackend, make_torch_cpu, make_torch_cpu_bf16_inv
from kernels.kvplanes import KVPlanes
from kernels.model import PackedModel
from kernels.options import KernelOptions
from kernels.tap import Tap
from kernels.weights import TorchWeights
from meta_tests import faulty_kernels
from oracle.runtime.backends import load_backend
from oracle.capture import LAYER_OPS, OPS
from oracle.checkpoint import build_model
from oracle.config import ModelConfig
from oracle.errors import OracleError
from oracle.sampling_params import SamplingParams as SP

BF = torch.bfloat16
ROWS = (1, 2, 5, 16, 80)


@pytest.fixture
def threads():
    """Run the body at torch thread counts 1 and 2 (restored after)."""
    before = torch.get_num_threads()
    yield (1, 2)
    torch.set_num_threads(before)


def bits(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    return t.view(torch.int16 if t.dtype == BF else torch.int32).numpy().copy()


def same_row_everywhere(fn, threads) -> None:
    """fn(M) -> [M, ...]: row 0 has the same bits at every M in ROWS and every thread count."""
    want = None
    for t in threads:
        torch.set_num_threads(t)
        for M in ROWS:
            got = bits(fn(M)[0])
            if want is None:
                want = got
            assert np.array_equal(got, want), f"row 0 differs at M = {M}, {t} threads"


def test_the_primitives_give_a_row_the_same_bits_at_every_row_count_and_thread_count(threads):
    g = torch.Generator().manual_seed(0)
    randn = lambda *s: torch.randn(*s, generator=g).to(BF)
    x, w = randn(80, 352), randn(96, 352) * 0.05
    same_row_everywhere(lambda M: inv.linear(x[:M], w), threads)
    n = randn(352)
    same_row_everywhere(lambda M: inv.rms_norm(x[:M], n, 1e-6), threads)
    same_row_everywhere(lambda M: inv.silu_mul(x[:M, :176], x[:M, 176:]), threads)
    k, v, q = randn(6, 64, 2, 16), randn(6, 64, 2, 16), randn(80, 4, 16)  # GQA: 4 heads on 2
    plane, pos = torch.randint(0, 6, (80,), generator=g), torch.randint(0, 64, (80,), generator=g)
    pos[0] = 5  # row 0 reads keys 0..5; others up to 63 (the chunk's padding grows with them)
    same_row_everywhere(lambda M: inv.attention(q[:M], k, v, plane[:M], pos[:M], 0.25), threads)
    # the primitives compute what torch computes, to bfloat16's rounding
    assert (inv.linear(x, w).float() - (x.double() @ w.double().T).float()).abs().max() < 0.02
    s, p = inv.attention_parts(q[:1], k, v, plane[:1], pos[:1], 0.25)
    keys = k[plane[0], :6].float().repeat_interleave(2, 1)  # [6, 4, 16]: head h reads KV head h // 2
    want = torch.softmax(torch.einsum("hd,jhd->hj", q[0].float(), keys) * 0.25, -1)
    assert s.shape == p.shape == (4, 6) and (p.float() - want).abs().max() < 4e-3


def test_exp_and_the_tree_do_not_depend_on_the_tensors_size():
    """An element's exp is the same in a tensor of 1, 7, 4097 or 40000 elements (vector body, scalar
    tail, torch's parallel grain); the tree's result does not depend on its padding, -0.0 included."""
    z = torch.linspace(-90.0, 90.0, 40000)
    e = inv._exp(z)
    for n in (1, 7, 4097):
        assert np.array_equal(bits(inv._exp(z[-n:])), bits(e[-n:]))
    fin = z.abs() < 87
    assert ((e[fin].double() - torch.exp(z[fin].double())).abs() / torch.exp(z[fin].double())).max() < 2e-7
    x = torch.randn(3, 5)
    pad = torch.cat([x, torch.full((3, 11), -0.0)], 1)
    assert np.array_equal(bits(inv._tree(x)), bits(inv._tree(pad)))
    assert bits(inv._tree(torch.full((1, 3), -0.0)))[0] == np.int32(-(2**31))  # -0.0 stays -0.0


def call(model, h, pos, plane):
    """PackedModel.recurrent_call with rows grouped by plane (as kernels/round_buffer.py does)."""
    gplane, group = torch.unique(plane, return_inverse=True)
    Qm, seen, qidx = int(torch.bincount(group).max()), {}, []
    for g in group.tolist():
        qidx.append(g * Qm + seen.get(g, 0))
        seen[g] = seen.get(g, 0) + 1
    return model.recurrent_call(h, pos, plane, torch.tensor(qidx), gplane, Qm)


def captures(preset, options, Ms, threads=(1,), cfg=None):
    """Row 0 (plane 0, position 20) computed in calls of M rows (the others on other planes at other
    depths and positions, or on plane 0 past position 20) -> {M: {(layer, op): value}} per thread count."""
    if cfg is None:
        w = TorchWeights.from_model(build_model(preset, seed=0), "cpu", BF)
    else:
        w = TorchWeights.random(cfg, "cpu", BF, seed=0)
    kv = KVPlanes(w.cfg, 3, 4, 64, "cpu", BF)
    g = torch.Generator().manual_seed(1)
    k0, v0 = torch.randn(kv.k.shape, generator=g).to(BF), torch.randn(kv.v.shape, generator=g).to(BF)
    model = PackedModel(w, kv, options)
    M = max(Ms)
    h = torch.randn(M, w.cfg.hidden_size, generator=g).to(BF)
    plane, pos = torch.randint(0, kv.k.shape[1], (M,), generator=g), torch.randint(0, 60, (M,), generator=g)
    plane[0], pos[0] = 0, 20
    pos = torch.where((plane == 0) & (torch.arange(M) > 0), pos.clamp(min=21), pos)
    out = []
    for t in threads:
        torch.set_num_threads(t)
        for m in Ms:
            kv.k.copy_(k0), kv.v.copy_(v0)
            model.tap = Tap(0, 20, 0, w.cfg.num_layers, [])
            model.tap.slot = 0
            call(model, h[:m], pos[:m], plane[:m])
            out.append((m, t, {(c.layer, c.op): c.value for c in model.tap.records}))
    return out


def first_difference(a: dict, b: dict):
    """The first (layer, op) recorded by both whose bits differ, or None."""
    for key in a:
        if key in b and not np.array_equal(a[key].view(np.uint32), b[key].view(np.uint32)):
            return key
    return None


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_a_whole_invariant_call_gives_a_row_the_same_bits_alone_and_among_others(preset, threads):
    runs = captures(preset, KernelOptions(invariant=True), (1, 5, 16, 80) if preset == "tiny" else (1, 5, 16), threads)
    layers = build_model(preset, seed=0).cfg.num_layers
    alone = runs[0][2]
    assert len(alone) == layers * len(LAYER_OPS) + 1  # every operation, then the final norm
    for m, t, rec in runs[1:]:
        assert rec.keys() == alone.keys() and first_difference(alone, rec) is None, (m, t)


def test_the_default_path_is_not_invariant_where_the_shape_makes_it_so(threads):
    """The default CPU bfloat16 path (torch matmul, softmax, mean) gives row 0 other bits at M = 5 or
    16 than alone: at `small` (2026-12-05, torch 2.13, this machine: layer 3's down first), else at a
    wide shape (intermediate 5632, the K of the issue's measurement), where the invariant mode does not.
    Which shapes part depends on the CPU's torch kernels: on one where neither does, this skips."""
    wide = ModelConfig(
        vocab_size=64, hidden_size=256, intermediate_size=5632, num_layers=1, num_heads=2, num_kv_heads=2, head_dim=128
    )
    for preset, cfg in (("small", None), (None, wide)):
        runs = captures(preset, KernelOptions(), (1, 5, 16), threads, cfg)
        if any(first_difference(runs[0][2], r) for _, _, r in runs[1:]):
            break
    else:
        pytest.skip("this CPU's torch kernels gave row 0 the same bits at M = 1, 5, 16 at both shapes")
    runs = captures(preset, KernelOptions(invariant=True), (1, 5, 16), (2,), cfg)
    assert first_difference(runs[0][2], runs[1][2]) is None and first_difference(runs[0][2], runs[2][2]) is None


@pytest.mark.parametrize("factory,op", sorted(faulty_kernels.INVARIANT_OPS.items()))
def test_each_invariance_fault_parts_a_row_in_its_own_operation_at_more_than_two_rows(factory, op):
    backend = getattr(faulty_kernels, factory)()
    assert backend.batch_invariant is True
    runs = captures("tiny", backend.kernel_options, (1, 2, 5))
    assert first_difference(runs[0][2], runs[1][2]) is None  # off at 2 rows
    assert first_difference(runs[0][2], runs[2][2]) == (0, op)  # on at 5: layer 0's `op` parts first


def session(backend, mode):
    s = backend.session(build_model("tiny", seed=0), 2, 4, mode)
    s.add(1, [5, 6], SP())
    return s


def test_capture_records_the_armed_row_in_order_and_nothing_when_not_armed():
    bk = make_torch_cpu_bf16_inv()
    runs = {}
    for mode in ("loop", "block"):
        s = session(bk, mode)
        s.step({1: 2})
        assert s.captured() == []  # not armed
        s.capture(0, 4, 3)  # armed before add: position 4 is the round's offset 1 (prompt 0..2)
        s.add(0, [1, 2, 3, 4], SP())
        assert s.captured() == []  # the prefill computes positions 0..2 only
        s.step({0: 3, 1: 2})
        rec = s.captured()
        ops = [c.op for c in rec]
        assert ops == list(LAYER_OPS) * 2 + ["final_norm", "head"]  # depth 3: verification's head
        assert [c.layer for c in rec[-2:]] == [2, 2] and all(c.value.dtype == np.float32 for c in rec)
        assert rec[OPS.index("scores")].value.shape == (4, 5) and rec[-1].value.shape == (64,)
        assert rec[-1].rows == 5 and len({c.rows for c in rec[:-1]}) == 1  # 3 + 2 verification rows
        runs[mode] = rec
        s.capture(None, None, None)
        s.step({0: 1})
        assert s.captured() == []
    assert runs["loop"][0].rows != runs["block"][0].rows  # two call shapes ...
    for a, b in zip(runs["loop"], runs["block"]):  # ... the same bits: block = loop, operation by operation
        assert a.op == b.op and np.array_equal(a.value.view(np.uint32), b.value.view(np.uint32))


def test_capture_of_the_default_path_and_of_the_prefill():
    s = session(TorchBackend("cpu", dtype="bfloat16"), "loop")
    s.capture(0, 1, 0)
    s.add(0, [1, 2, 3, 4], SP())
    rec = s.captured()
    assert [c.op for c in rec] == list(LAYER_OPS) * 2 + ["final_norm"] and rec[0].rows == 3  # the prefill
    with pytest.raises(OracleError, match="depth in 0..3"):
        s.capture(0, 1, 4)


def test_the_invariant_option_backends_and_faults(monkeypatch):
    monkeypatch.setenv("LOOPSPEC_INVARIANT", "1")
    assert make_torch_cpu().batch_invariant is True and make_torch_cpu().dtype == "float32"
    monkeypatch.setenv("LOOPSPEC_INVARIANT", "0")
    assert make_torch_cpu().batch_invariant is False
    assert (
        load_backend("torch-cpu-bf16-inv").caps.batch_invariant
        and not load_backend("torch-cpu-bf16").caps.batch_invariant
    )
    with pytest.raises(OracleError, match="needs the invariant mode"):
        KernelOptions(fault="inv_splitk")
    assert dataclasses.replace(KernelOptions(invariant=True), fault="inv_norm_block").fault == "inv_norm_block"
    monkeypatch.setitem(sys.modules, "kernels.invariant_triton", None)  # as if the module were missing
    with pytest.raises(OracleError, match="torch-cuda-inv needs kernels/invariant_triton.py"):
        inv.prims_for(torch.device("cuda"))
    if not torch.cuda.is_available():
        with pytest.raises(OracleError, match="torch-cuda-inv: no CUDA device"):
            load_backend("torch-cuda-inv")
