"""Decode-style attention straight from the KV planes (CUDA, Triton), split over keys
(flash-decoding): one program per (row, query head, chunk of CHUNK keys) computes a partial
softmax (max, sum, weighted values) in FP32 over its chunk of keys 0..pos; a second kernel
merges a row's chunks. No gather of whole planes, no padded query grid: a row reads only
the pos+1 keys it sees, and a short call (M = 1: 16 heads) still spreads over many SMs
(one program per (row, head) walking 257 keys took 22 us per layer on the H200).
Checked against kernels.model.attend (and so against the reference) in gpu_tests."""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs: the torch path is used
    triton = None

from .gemv_blocks import launch_options

if triton is not None:
    from .gemv_blocks import pdl_enter

if triton is not None:

    @triton.jit
    def _attn_chunk(
        Q,
        Kc,
        Vc,
        Acc,
        ML,
        plane_ptr,
        pos_ptr,
        layer_off,
        stride_plane,
        stride_t,
        scale,
        NH: tl.constexpr,
        GROUP: tl.constexpr,
        HD: tl.constexpr,
        CHUNK: tl.constexpr,
        NSPLIT: tl.constexpr,
        PDL: tl.constexpr,
        EARLY: tl.constexpr,
    ):
        # EARLY (with PDL): a chunk wholly below every position this call writes on the row's
        # plane (the qkv kernel before it writes one key per row) is loaded before the PDL wait,
        # while that kernel runs; its keys were written by a kernel that finished before this one
        # could launch. Positions and planes are written before the call's first kernel.
        r, h, c = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        pos = tl.load(pos_ptr + r)
        plane = tl.load(plane_ptr + r).to(tl.int64)
        d = tl.arange(0, HD)
        t = c * CHUNK + tl.arange(0, CHUNK)
        mask = t <= pos
        off = layer_off + plane * stride_plane + (h // GROUP) * HD + t[:, None].to(tl.int64) * stride_t + d[None, :]
        early = False
        if EARLY:
            rr = tl.arange(0, 16)
            rr_ok = rr < tl.num_programs(0)
            same = (tl.load(plane_ptr + rr, mask=rr_ok, other=-1).to(tl.int64) == plane) & rr_ok
            lo = tl.min(tl.where(same, tl.load(pos_ptr + rr, mask=rr_ok, other=0), 2**30), 0)  # first key written
            early = (c + 1) * CHUNK <= lo
        k = tl.zeros([CHUNK, HD], Kc.dtype.element_ty)
        v = tl.zeros([CHUNK, HD], Vc.dtype.element_ty)
        if early:
            k = tl.load(Kc + off)
            v = tl.load(Vc + off)
        pdl_enter(PDL)
        if c * CHUNK <= pos:  # chunks past the row's position: no keys
            if not early:
                k = tl.load(Kc + off, mask=mask[:, None], other=0.0)
                v = tl.load(Vc + off, mask=mask[:, None], other=0.0)
            q = tl.load(Q + r * NH * HD + h * HD + d).to(tl.float32)
            s = tl.where(mask, tl.sum(k.to(tl.float32) * q[None, :], 1) * scale, float("-inf"))  # [CHUNK]
            m = tl.max(s, 0)
            p = tl.exp(s - m)
            vf = v.to(tl.float32)
            slot = (r * NH + h) * NSPLIT + c
            tl.store(Acc + slot * HD + d, tl.sum(p[:, None] * vf, 0))  # unnormalized
            tl.store(ML + slot * 2, m)
            tl.store(ML + slot * 2 + 1, tl.sum(p, 0))

    @triton.jit
    def _attn_merge(
        Acc,
        ML,
        Out,
        pos_ptr,
        NH: tl.constexpr,
        HD: tl.constexpr,
        CHUNK: tl.constexpr,
        NSPLIT: tl.constexpr,
        SB: tl.constexpr,
        PDL: tl.constexpr,
    ):
        r, h = tl.program_id(0), tl.program_id(1)
        pdl_enter(PDL)
        n = tl.load(pos_ptr + r) // CHUNK + 1  # chunks with keys
        base = (r * NH + h) * NSPLIT
        d = tl.arange(0, HD)
        m_i = tl.zeros([], tl.float32) - float("inf")
        l_i = tl.zeros([], tl.float32)
        acc = tl.zeros([HD], tl.float32)
        for c0 in range(0, NSPLIT, SB):  # static bound; chunks >= n are masked
            c = c0 + tl.arange(0, SB)
            live = (c < n) & (c < NSPLIT)  # a row past the span reads no chunk beyond it
            m = tl.load(ML + (base + c) * 2, mask=live, other=float("-inf"))  # [SB]
            m_new = tl.maximum(m_i, tl.max(m, 0))
            w = tl.where(live, tl.exp(m - m_new), 0.0)
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(w * tl.load(ML + (base + c) * 2 + 1, mask=live, other=0.0), 0)
            part = tl.load(Acc + (base + c)[:, None] * HD + d[None, :], mask=live[:, None], other=0.0)
            acc = acc * alpha + tl.sum(w[:, None] * part, 0)
            m_i = m_new
        tl.store(Out + r * NH * HD + h * HD + d, (acc / l_i).to(Out.dtype.element_ty))


# keys per program of _attn_chunk, and its warps for one row / more rows (H200, ouro-1.4b shape,
# context 256: a tile sweep, docs/results.md)
CHUNK = 32
CHUNK_WARPS = (4, 2)


def span_bucket(n: int, cap: int) -> int:
    """The key span a call over positions 0..n-1 gets (a graph per span: few distinct values):
    n rounded up to whole CHUNKs, the chunk count rounded up to 4 significant bits (at most 1/8
    dead chunks past 16), capped at the capacity `cap`."""
    assert 1 <= n <= cap, (n, cap)
    chunks = -(-n // CHUNK)
    step = 1 << max(0, chunks.bit_length() - 4)
    return min(cap, -(-chunks // step) * step * CHUNK)


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def decode_attention(
    q: torch.Tensor,
    kv,
    layer: int,
    plane: torch.Tensor,
    pos: torch.Tensor,
    pdl: bool = False,
    span: int | None = None,
    scale: float | None = None,
    early_kv: bool = False,
) -> torch.Tensor:
    """q: [M, nh, hd] (RoPE applied); plane, pos: [M]. Keys/values of plane `plane[r]` at
    positions 0..pos[r] of `layer` (already written). Returns [M, nh*hd]. pdl: launched as
    programmatic dependents (kernels/gemv.py), as in the GEMV path. span: the grid covers
    key positions 0..span-1 (default: the KV capacity); the caller promises every pos < span,
    also in every replay of a graph that captured this call (sessions: span_bucket). At M = 2 on
    the H200 a call cost 7% more at capacity 342 than at 257, and a span of 257 gave that back
    (docs/results.md). scale: the softmax logit scale (default
    hd ** -0.5). early_kv (M <= 16): chunks below every key the call writes on a row's plane are
    loaded before the PDL wait (with pdl: while the kernel before, qkv, runs; the same values)."""
    M, nh, hd = q.shape
    K, V = kv.k, kv.v  # [L, P, max_len, nkv, hd]
    assert K.is_contiguous() and V.is_contiguous() and q.is_contiguous()
    L, P, T, nkv, _ = K.shape
    span = T if span is None else span
    assert 1 <= span <= T, (span, T)
    out = torch.empty(M, nh * hd, device=q.device, dtype=q.dtype)
    if M:
        nsplit = triton.cdiv(span, CHUNK)  # static per span (graph-safe)
        acc = torch.empty(M, nh, nsplit, hd, device=q.device, dtype=torch.float32)
        ml = torch.empty(M, nh, nsplit, 2, device=q.device, dtype=torch.float32)
        _attn_chunk[(M, nh, nsplit)](
            q,
            K,
            V,
            acc,
            ml,
            plane,
            pos,
            layer * P * T * nkv * hd,
            T * nkv * hd,
            nkv * hd,
            hd**-0.5 if scale is None else scale,
            NH=nh,
            GROUP=nh // nkv,
            HD=hd,
            CHUNK=CHUNK,
            NSPLIT=nsplit,
            PDL=pdl,
            EARLY=early_kv and M <= 16,
            num_warps=CHUNK_WARPS[M > 1],
            **launch_options(pdl),
        )
        _attn_merge[(M, nh)](
            acc, ml, out, pos, NH=nh, HD=hd, CHUNK=CHUNK, NSPLIT=nsplit, SB=16, PDL=pdl, **launch_options(pdl)
        )
    return out
