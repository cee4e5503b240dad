"""kernels/invariant_triton.py compiled on the GPU: the checks of
tests/test_invariant_triton_interpret.py where tl.dot runs on the tensor cores (what the
interpreter cannot check), at tiny's shapes and at ouro-1.4b's products, norms and heads.
Run: make gpu-parity (marked gpu; skipped without a CUDA device, dry run included)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")
import triton  # noqa: E402,F401 (compiled kernels: imported before the interpreter test's helpers)

from kernels import invariant_triton as it  # noqa: E402
from tests import test_invariant_triton_interpret as T  # noqa: E402 (its helpers; its tests do not run here)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled Triton kernels need a CUDA device"),
]
MS = (1, 2, 5, 16, 80, 128)


def on_cuda(fn):
    """fn on the device for the CPU rows of T.assert_rows_invariant."""
    return lambda *rows: fn(*(r.cuda() for r in rows)).cpu()


@pytest.mark.parametrize("dtype", [T.BF16, T.FP32])
@pytest.mark.parametrize("N,K", [(96, 32), (50, 300), (6144, 2048), (2048, 2048), (11264, 2048), (2048, 5632)])
def test_linear(dtype, N, K):
    w = T.rand(N, K, dtype=dtype, seed=1, scale=K**-0.5)
    x = T.rand(1, K, dtype=dtype, seed=2)
    wd = w.cuda()
    out = T.assert_rows_invariant(on_cuda(lambda x: it.linear(x, wd)), [x], T.rows_of(((K,), dtype), seed=3), MS)
    torch.testing.assert_close(out.double(), x.double() @ w.double().T, rtol=T.TOL[dtype]["rtol"], atol=1e-4)


@pytest.mark.parametrize("dtype", [T.BF16, T.FP32])
@pytest.mark.parametrize("H", [32, 2048])
def test_rms_norm(dtype, H):
    w, x = 1 + T.rand(H, dtype=dtype, seed=4, scale=0.3), T.rand(1, H, dtype=dtype, seed=5, scale=3.0)
    wd = w.cuda()
    out = T.assert_rows_invariant(
        on_cuda(lambda x: it.rms_norm(x, wd, T.EPS)), [x], T.rows_of(((H,), dtype), seed=6), MS
    )
    torch.testing.assert_close(out.double(), T.torch_rms_norm(x, w, T.EPS), **T.TOL[dtype])


@pytest.mark.parametrize("dtype", [T.BF16, T.FP32])
@pytest.mark.parametrize("I", [64, 5632])
def test_silu_mul(dtype, I):
    g, u = T.rand(1, I, dtype=dtype, seed=7, scale=3.0), T.rand(1, I, dtype=dtype, seed=8)
    spec = ((I,), dtype)
    out = T.assert_rows_invariant(on_cuda(it.silu_mul), [g, u], T.rows_of(spec, spec, seed=9), MS)
    torch.testing.assert_close(out.double(), torch.nn.functional.silu(g.double()) * u.double(), **T.TOL[dtype])


@pytest.mark.parametrize("dtype,nkv", [(T.BF16, 4), (T.FP32, 2)])
def test_attention_tiny(dtype, nkv):
    k, v, probe, draw = T.attention_case(dtype, nkv, seed=10)
    kd, vd, scale = k.cuda(), v.cuda(), T.TINY.head_dim**-0.5
    out = T.assert_rows_invariant(on_cuda(lambda q, pl, ps: it.attention(q, kd, vd, pl, ps, scale)), probe, draw, MS)
    q, pl, ps = probe
    torch.testing.assert_close(out.double(), T.torch_attention(q, k, v, pl, ps, scale), **T.TOL[dtype])


def test_attention_ouro_heads():
    """16 heads of 128, 342 keys a plane (11 chunks, the last partial), BF16."""
    P, S, nh, hd = 8, 342, 16, 128
    k, v = T.rand(P, S, nh, hd, dtype=T.BF16, seed=50), T.rand(P, S, nh, hd, dtype=T.BF16, seed=51)
    kd, vd = k.cuda(), v.cuda()
    probe = [T.rand(1, nh, hd, dtype=T.BF16, seed=52), torch.tensor([5]), torch.tensor([300])]

    def draw(M):
        g = torch.Generator().manual_seed(M)
        q = T.rand(M, nh, hd, dtype=T.BF16, seed=53 + M)
        return [q, torch.randint(0, P, (M,), generator=g), torch.randint(0, S, (M,), generator=g)]

    fn = on_cuda(lambda q, pl, ps: it.attention(q, kd, vd, pl, ps, hd**-0.5))
    out = T.assert_rows_invariant(fn, probe, draw, MS)
    q, pl, ps = probe
    torch.testing.assert_close(out.double(), T.torch_attention(q, k, v, pl, ps, hd**-0.5), **T.TOL[T.BF16])


def test_a_recurrent_call_gives_a_row_the_same_bits_alone_and_among_80():
    T.check_recurrent_call("cuda")


def linear_split_k_by_m(x, w):
    """A linear that splits K in two halves, summed after, from 16 rows up (split-K chosen by M)."""
    if x.shape[0] < 16:
        return it._linear(x, w)
    h = x.shape[1] // 2
    return it._linear(x[:, :h].contiguous(), w[:, :h].contiguous()) + it._linear(
        x[:, h:].contiguous(), w[:, h:].contiguous()
    )


def test_an_m_dependent_split_k_is_caught():
    """The assertion can fail on the device: split-K chosen by M parts a row at M = 16. (A BLOCK_K
    chosen by M does not: on the H100 an FP32 row summed in K order gave the same bits for every
    BLOCK_K, 2026-12-05, so it is no negative control there.)"""
    w, x = T.rand(64, 2048, seed=1, scale=2048**-0.5), T.rand(1, 2048, seed=2)
    wd = w.cuda()
    with pytest.raises(AssertionError, match=r"of M = 16 against M = 1"):
        T.assert_rows_invariant(
            on_cuda(lambda x: linear_split_k_by_m(x, wd)), [x], T.rows_of(((2048,), T.FP32), seed=3)
        )
