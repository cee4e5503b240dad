"""Batch-invariant Triton kernels for torch-cuda's invariant mode: the four primitives of the
invariant model call (kernels/invariant.py), `PRIMS.linear`, `.rms_norm`, `.silu_mul` and
`.attention`. A row's values do not depend on which other rows share its call: not on the row
count M, not on the row's place in the call, not on the other rows' values or positions.

Why each kernel is invariant, by construction:
- linear: one tile configuration (TILE: BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) for every M
  and no split-K. Output element (m, n) is summed by the one program that owns its (M tile,
  N tile), over K tiles 0, BLOCK_K, 2*BLOCK_K, ... in that order, into one FP32 accumulator, each
  tile's product taken by the same tl.dot on tiles of the same shape. A tensor-core product
  sums each output element from its own row and column only, in an order fixed by the
  instruction, so rows padded (masked to zero) or filled by other requests change no bit of it;
  nor does the row's place in its M tile. M changes only how many programs run.
- rms_norm: one program per row, the sum of squares over chunks of H in order (RMS_BLOCK, or
  H rounded up to a power of 2 where smaller: a function of H alone); nothing of another row
  is read.
- silu_mul: elementwise; each element is the same two roundings wherever it sits.
- attention: a FIXED key split. Keys 0..pos of a row are cut into chunks of CHUNK keys at
  0, CHUNK, 2*CHUNK, ... (a constant, not chosen from the span, M or the other rows); one
  program per (row, head, chunk) takes the chunk's max, sum and weighted values in FP32, and a
  second kernel merges a row's chunks one at a time in chunk order, chunks past the row's
  own position leaving its state untouched (tl.where, not a multiply by 1). The grid covers
  the planes' capacity S whatever the positions, so no span enters either kernel.
Rounding follows the torch path in the model dtype (kernels/model.py): the GEMM output, the
norm before and after its weight, silu and silu * up are each rounded to the model dtype
(gemv_blocks._rnd, which rounds to nearest even by hand under the interpreter).

Tested under TRITON_INTERPRET=1 on the CPU (tests/test_invariant_triton_interpret.py): the
same bits for a row at M = 1, 2, 5, 16 and 80, agreement with torch in FP32, and an
M-dependent variant caught by the same check.

On a GPU (`bash scripts/gpu_invariant.sh`; docs/results.md, "The exactness tier and the
localizer", H100 2026-12-05): `gpu_tests/test_invariant_triton_gpu.py` compiles the same checks
(tl.dot on the tensor cores, what the interpreter cannot check) at tiny's and ouro-1.4b's
shapes, M = 1..128; the exactness tier passes at tiny, small and ouro-1.4b; c(M) of this mode
is 1.5-2.3x the default's (one untuned tile, TILE below). Not yet swept: TILE, RMS_BLOCK and
CHUNK (a sweep would still pick one configuration for every M, never a table by M).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from oracle.errors import OracleError

from .gemv_blocks import triton

if triton is not None:
    import triton.language as tl

    from .gemv_blocks import _INTERPRETED, _cast, _rnd

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of every linear, whatever M (tl.dot needs
# 16 in each dimension); keys per attention chunk; the norm's chunk of H; silu_mul's block
TILE = (32, 32, 128, 4, 3)
CHUNK = 32
RMS_BLOCK = 1024
ELEM_BLOCK = 1024


def _need_triton() -> None:
    if triton is None:
        raise OracleError("torch-cuda's batch-invariant kernels need triton (pip install triton==3.7.1)")


if triton is not None:

    @triton.jit
    def _mma(acc, x, w):
        # acc [BM, BN] += x [BM, BK] @ w [BN, BK].T, FP32 accumulation: BF16 products exact on
        # the tensor cores, FP32 inputs in IEEE FP32 (no TF32); the interpreter's tl.dot reads
        # BF16 as raw integers, so it is given FP32 values there
        if _INTERPRETED:
            return acc + tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="ieee")
        if x.dtype == tl.float32:
            return tl.dot(x, tl.trans(w), acc, input_precision="ieee")
        return tl.dot(x, tl.trans(w), acc)

    @triton.jit(do_not_specialize=["M"])  # no M == 1 or M % 16 variant of the kernel
    def _linear_kernel(X, W, Out, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # Out [M, N] = X [M, K] @ W [N, K].T; program (i, j): rows i*BLOCK_M.., columns j*BLOCK_N..,
        # K tiles in order into one FP32 accumulator
        m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        m_ok, n_ok = m < M, n < N
        x_row = X + m.to(tl.int64)[:, None] * K
        w_row = W + n.to(tl.int64)[:, None] * K
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            k_ok = (k < K)[None, :]
            x = tl.load(x_row + k[None, :], mask=m_ok[:, None] & k_ok, other=0.0)
            w = tl.load(w_row + k[None, :], mask=n_ok[:, None] & k_ok, other=0.0)
            acc = _mma(acc, x, w)
        out = Out + m.to(tl.int64)[:, None] * N + n[None, :]
        tl.store(out, _cast(acc, Out.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])

    @triton.jit
    def _rms_norm_kernel(X, Wt, Out, H, eps, BLOCK: tl.constexpr):
        # one program per row: (x * rsqrt(mean(x^2) + eps)).to(w.dtype) * w, statistic in FP32
        DT: tl.constexpr = Out.dtype.element_ty
        row = tl.program_id(0).to(tl.int64) * H
        acc = tl.zeros([BLOCK], tl.float32)
        for k0 in range(0, H, BLOCK):
            k = k0 + tl.arange(0, BLOCK)
            x = tl.load(X + row + k, mask=k < H, other=0.0).to(tl.float32)
            acc += x * x
        inv = tl.rsqrt(tl.sum(acc, 0) / H + eps)
        for k0 in range(0, H, BLOCK):
            k = k0 + tl.arange(0, BLOCK)
            x = tl.load(X + row + k, mask=k < H, other=0.0).to(tl.float32)
            w = tl.load(Wt + k, mask=k < H, other=0.0).to(tl.float32)
            tl.store(Out + row + k, _cast(_rnd(x * inv, DT) * w, DT), mask=k < H)

    @triton.jit(do_not_specialize=["n"])
    def _silu_mul_kernel(G, U, Out, n, BLOCK: tl.constexpr):
        # Out = silu(g) * u elementwise: F.silu rounded to the model dtype, then the product
        DT: tl.constexpr = Out.dtype.element_ty
        i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        g = tl.load(G + i, mask=i < n, other=0.0).to(tl.float32)
        u = tl.load(U + i, mask=i < n, other=0.0).to(tl.float32)
        tl.store(Out + i, _cast(_rnd(g / (1.0 + tl.exp(-g)), DT) * u, DT), mask=i < n)

    @triton.jit
    def _attn_chunk_kernel(
        Q,
        Kc,
        Vc,
        Acc,
        ML,
        plane_ptr,
        pos_ptr,
        S,
        scale,
        NH,
        GROUP,
        NCHUNK,
        HD,
        BLOCK_D: tl.constexpr,
        CHUNK: tl.constexpr,
    ):
        # program (r, h, c): keys c*CHUNK.. of row r's plane, up to its position -> the chunk's
        # max score, sum of exp and unnormalized weighted values (FP32) at slot (r, h, c)
        r, h, c = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        pos = tl.load(pos_ptr + r)
        if c * CHUNK <= pos:  # chunks past the row's position hold none of its keys
            plane = tl.load(plane_ptr + r).to(tl.int64)
            t = c * CHUNK + tl.arange(0, CHUNK)
            d = tl.arange(0, BLOCK_D)
            t_ok, d_ok = t <= pos, d < HD
            nkv = NH // GROUP
            kv = ((plane * S + t.to(tl.int64)) * nkv + h // GROUP)[:, None] * HD + d[None, :]
            ok = t_ok[:, None] & d_ok[None, :]
            k = tl.load(Kc + kv, mask=ok, other=0.0).to(tl.float32)  # [CHUNK, BLOCK_D]
            v = tl.load(Vc + kv, mask=ok, other=0.0).to(tl.float32)
            q = tl.load(Q + (r * NH + h).to(tl.int64) * HD + d, mask=d_ok, other=0.0).to(tl.float32)
            s = tl.where(t_ok, tl.sum(k * q[None, :], 1) * scale, float("-inf"))  # [CHUNK]
            m = tl.max(s, 0)
            p = tl.exp(s - m)
            slot = ((r * NH + h) * NCHUNK + c).to(tl.int64)
            tl.store(Acc + slot * HD + d, tl.sum(p[:, None] * v, 0), mask=d_ok)
            tl.store(ML + slot * 2, m)
            tl.store(ML + slot * 2 + 1, tl.sum(p, 0))

    @triton.jit
    def _attn_merge_kernel(
        Acc, ML, Out, pos_ptr, NH, NCHUNK: tl.constexpr, HD, BLOCK_D: tl.constexpr, CHUNK: tl.constexpr
    ):
        # program (r, h): row r's chunks merged one at a time in chunk order 0, 1, ..; chunks
        # past its position keep the state as it is (tl.where), whatever NCHUNK is
        r, h = tl.program_id(0), tl.program_id(1)
        last = tl.load(pos_ptr + r) // CHUNK
        d = tl.arange(0, BLOCK_D)
        d_ok = d < HD
        base = ((r * NH + h) * NCHUNK).to(tl.int64)
        m_i = tl.full([], float("-inf"), tl.float32)
        l_i = tl.zeros([], tl.float32)
        acc = tl.zeros([BLOCK_D], tl.float32)
        for c in range(0, NCHUNK):
            live = c <= last
            m_c = tl.load(ML + (base + c) * 2, mask=live, other=0.0)
            l_c = tl.load(ML + (base + c) * 2 + 1, mask=live, other=0.0)
            a_c = tl.load(Acc + (base + c) * HD + d, mask=live & d_ok, other=0.0)
            m_new = tl.maximum(m_i, m_c)
            alpha, beta = tl.exp(m_i - m_new), tl.exp(m_c - m_new)
            l_i = tl.where(live, l_i * alpha + l_c * beta, l_i)
            acc = tl.where(live, acc * alpha + a_c * beta, acc)
            m_i = tl.where(live, m_new, m_i)
        out = Out + (r * NH + h).to(tl.int64) * HD + d
        tl.store(out, _cast(acc / l_i, Out.dtype.element_ty), mask=d_ok)


def _linear(x: torch.Tensor, w: torch.Tensor, tile: tuple = TILE) -> torch.Tensor:
    """x [M, K] @ w [N, K].T -> [M, N] in x's dtype with the given tile (tests pass others)."""
    _need_triton()
    (M, K), (N, K2) = x.shape, w.shape
    assert K == K2 and x.dtype == w.dtype, (x.shape, w.shape, x.dtype, w.dtype)
    x, w = x.contiguous(), w.contiguous()
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    bm, bn, bk, warps, stages = tile
    if M:
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
        _linear_kernel[grid](x, w, out, M, N, K, bm, bn, bk, num_warps=warps, num_stages=stages)
    return out


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ w [N, K].T -> [M, N] in x's dtype, FP32 accumulation, TILE for every M."""
    return _linear(x, w)


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, block: int) -> torch.Tensor:
    """rms_norm over chunks of min(block, H rounded up to a power of 2) (tests pass other blocks)."""
    _need_triton()
    M, H = x.shape
    assert w.shape == (H,), (x.shape, w.shape)
    x = x.contiguous()
    out = torch.empty(M, H, device=x.device, dtype=w.dtype)
    if M:
        bh = min(block, triton.next_power_of_2(H))
        _rms_norm_kernel[(M,)](x, w.contiguous(), out, H, eps, bh, num_warps=4)
    return out


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x [M, H], w [H] -> [M, H] in w's dtype: (xf * rsqrt(mean(xf^2) + eps)).to(w.dtype) * w,
    one program per row over chunks of RMS_BLOCK (or H rounded up to a power of 2 where
    smaller: H's, never M's)."""
    return _rms_norm(x, w, eps, RMS_BLOCK)


def silu_mul(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """silu(g) * u for g, u [M, I] -> [M, I], elementwise."""
    _need_triton()
    assert g.shape == u.shape and g.dtype == u.dtype, (g.shape, u.shape)
    g, u = g.contiguous(), u.contiguous()
    out = torch.empty_like(g)
    if g.numel():
        _silu_mul_kernel[(triton.cdiv(g.numel(), ELEM_BLOCK),)](g, u, out, g.numel(), ELEM_BLOCK, num_warps=4)
    return out


def attention(q, k, v, plane, pos, scale: float) -> torch.Tensor:
    """q [M, nh, hd] (RoPE applied); k, v [P, S, nkv, hd] (one layer's KV planes, kv.k[l]);
    plane, pos [M] long: row r attends to keys 0..pos[r] of plane plane[r] -> [M, nh*hd] in
    q's dtype. Scores and softmax in FP32, keys split into chunks of CHUNK."""
    return _attention(q, k, v, plane, pos, scale, CHUNK)


def _attention(q, k, v, plane, pos, scale: float, chunk: int) -> torch.Tensor:
    """attention with keys split into chunks of `chunk` (tests pass others)."""
    _need_triton()
    M, nh, hd = q.shape
    P, S, nkv, hd2 = k.shape
    assert hd == hd2 and v.shape == k.shape and nh % nkv == 0, (q.shape, k.shape, v.shape)
    assert plane.shape == (M,) and pos.shape == (M,), (plane.shape, pos.shape)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty(M, nh * hd, device=q.device, dtype=q.dtype)
    if M:
        nchunk, bd = triton.cdiv(S, chunk), triton.next_power_of_2(hd)
        acc = torch.empty(M, nh, nchunk, hd, device=q.device, dtype=torch.float32)
        ml = torch.empty(M, nh, nchunk, 2, device=q.device, dtype=torch.float32)
        group = nh // nkv
        _attn_chunk_kernel[(M, nh, nchunk)](q, k, v, acc, ml, plane, pos, S, scale, nh, group, nchunk, hd, bd, chunk)
        _attn_merge_kernel[(M, nh)](acc, ml, out, pos, nh, nchunk, hd, bd, chunk)
    return out


PRIMS = SimpleNamespace(linear=linear, rms_norm=rms_norm, silu_mul=silu_mul, attention=attention)
