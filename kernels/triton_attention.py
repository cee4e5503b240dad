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
        Out=None,
        Count=None,
        SB: tl.constexpr = 16,
        LAST: tl.constexpr = False,
    ):
        # LAST: the last program of a (row, head) to finish its chunk merges the row's chunks itself
        # (Count: one int32 per (row, head), zero before the launch and again after it), so the
        # call needs no _attn_merge launch
        r, h, c = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        pdl_enter(PDL)
        pos = tl.load(pos_ptr + r)
        if c * CHUNK <= pos:  # chunks past the row's position: no keys
            plane = tl.load(plane_ptr + r).to(tl.int64)
            d = tl.arange(0, HD)
            q = tl.load(Q + r * NH * HD + h * HD + d).to(tl.float32)
            t = c * CHUNK + tl.arange(0, CHUNK)
            mask = t <= pos
            off = layer_off + plane * stride_plane + (h // GROUP) * HD + t[:, None].to(tl.int64) * stride_t + d[None, :]
            k = tl.load(Kc + off, mask=mask[:, None], other=0.0).to(tl.float32)
            s = tl.where(mask, tl.sum(k * q[None, :], 1) * scale, float("-inf"))  # [CHUNK]
            m = tl.max(s, 0)
            p = tl.exp(s - m)
            v = tl.load(Vc + off, mask=mask[:, None], other=0.0).to(tl.float32)
            slot = (r * NH + h) * NSPLIT + c
            tl.store(Acc + slot * HD + d, tl.sum(p[:, None] * v, 0))  # unnormalized
            tl.store(ML + slot * 2, m)
            tl.store(ML + slot * 2 + 1, tl.sum(p, 0))
            if LAST:
                tl.debug_barrier()  # every thread's stores issued before the release below
                done = tl.atomic_add(Count + r * NH + h, 1, sem="acq_rel", scope="gpu")
                if done == pos // CHUNK:  # the others' partials are visible (acquire)
                    _merge_row(Acc, ML, Out, r, h, pos, NH, HD, CHUNK, NSPLIT, SB, ".cg")
                    tl.store(Count + r * NH + h, 0)  # for the next launch

    @triton.jit
    def _merge_row(Acc, ML, Out, r, h, pos, NH, HD: tl.constexpr, CHUNK, NSPLIT, SB: tl.constexpr, CACHE: tl.constexpr):
        # row r, head h: the chunks' partial softmaxes merged in chunk order, normalized, stored
        n = pos // CHUNK + 1  # chunks with keys
        base = (r * NH + h) * NSPLIT
        d = tl.arange(0, HD)
        m_i = tl.zeros([], tl.float32) - float("inf")
        l_i = tl.zeros([], tl.float32)
        acc = tl.zeros([HD], tl.float32)
        for c0 in range(0, NSPLIT, SB):  # static bound; chunks >= n are masked
            c = c0 + tl.arange(0, SB)
            live = (c < n) & (c < NSPLIT)  # a row past the span reads no chunk beyond it
            m = tl.load(ML + (base + c) * 2, mask=live, other=float("-inf"), cache_modifier=CACHE)  # [SB]
            m_new = tl.maximum(m_i, tl.max(m, 0))
            w = tl.where(live, tl.exp(m - m_new), 0.0)
            alpha = tl.exp(m_i - m_new)
            l_part = tl.load(ML + (base + c) * 2 + 1, mask=live, other=0.0, cache_modifier=CACHE)
            l_i = l_i * alpha + tl.sum(w * l_part, 0)
            part = tl.load(
                Acc + (base + c)[:, None] * HD + d[None, :], mask=live[:, None], other=0.0, cache_modifier=CACHE
            )
            acc = acc * alpha + tl.sum(w[:, None] * part, 0)
            m_i = m_new
        tl.store(Out + r * NH * HD + h * HD + d, (acc / l_i).to(Out.dtype.element_ty))

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
        _merge_row(Acc, ML, Out, r, h, tl.load(pos_ptr + r), NH, HD, CHUNK, NSPLIT, SB, "")


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
    merge: str = "kernel",
) -> torch.Tensor:
    """q: [M, nh, hd] (RoPE applied); plane, pos: [M]. Keys/values of plane `plane[r]` at
    positions 0..pos[r] of `layer` (already written). Returns [M, nh*hd]. pdl: launched as
    programmatic dependents (kernels/gemv.py), as in the GEMV path. span: the grid covers
    key positions 0..span-1 (default: the KV capacity); the caller promises every pos < span,
    also in every replay of a graph that captured this call (sessions: span_bucket). At M = 2 on
    the H200 a call cost 7% more at capacity 342 than at 257, and a span of 257 gave that back
    (docs/results.md). scale: the softmax logit scale (default
    hd ** -0.5). merge: "kernel", a second launch merges each (row, head)'s chunks; "last", the
    last chunk program of each (row, head) to finish merges them (one launch; KernelOptions.attn_merge)."""
    M, nh, hd = q.shape
    K, V = kv.k, kv.v  # [L, P, max_len, nkv, hd]
    assert K.is_contiguous() and V.is_contiguous() and q.is_contiguous()
    L, P, T, nkv, _ = K.shape
    span = T if span is None else span
    assert 1 <= span <= T, (span, T)
    assert merge in MERGES, merge
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
            Out=out,
            Count=_counters(q.device, M * nh) if merge == "last" else ml,
            SB=16,
            LAST=merge == "last",
            num_warps=CHUNK_WARPS[M > 1],
            **launch_options(pdl),
        )
        if merge == "kernel":
            _attn_merge[(M, nh)](
                acc, ml, out, pos, NH=nh, HD=hd, CHUNK=CHUNK, NSPLIT=nsplit, SB=16, PDL=pdl, **launch_options(pdl)
            )
    return out


MERGES = ("kernel", "last")  # how a (row, head)'s chunks are merged (decode_attention's merge)
COUNTERS = 1 << 20  # (row, head) pairs one call of merge="last" may have
_COUNTS: dict = {}  # device -> int32 counters of merge="last", zero between launches


def _counters(device: torch.device, n: int) -> torch.Tensor:
    """COUNTERS zeroed int32 counters on `device`, one buffer per device for the process's life
    (graphs keep its address). Every launch on a device runs in one stream's order (the engine's
    calls and their graphs), and each launch leaves its counters at zero, so one buffer serves
    them all. Made outside a graph capture (a call's warm-up runs eagerly first)."""
    assert n <= COUNTERS, (n, COUNTERS)
    buf = _COUNTS.get(device)
    if buf is None:
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        assert not capturing, "attention counters must be made before a graph capture (run the call once eagerly)"
        buf = _COUNTS[device] = torch.zeros(COUNTERS, dtype=torch.int32, device=device)
    return buf
