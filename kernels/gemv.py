"""Recurrent calls of 1..16 rows (M <= MAX_ROWS) as Triton kernels with the norms,
residuals, RoPE, KV writes and SwiGLU fused in (CUDA; the Triton interpreter on CPU in
tests). One layer of a one-row call is five launches (plus the two of attention):

    qkv      r = h + rms_norm(y2_prev, n_mlp_out_prev); x = rms_norm(r, n_in);
             q, k, v = x @ qkv.T with RoPE; k, v written into the KV planes
    (attention: kernels/triton_attention.py)
    o        y = a @ o.T
    gate_up  r2 = r + rms_norm(y, n_attn_out); x = rms_norm(r2, n_post);
             act = silu(x @ gate.T) * (x @ up.T)
    down     y2 = act @ down.T

and after the last layer `residual_norm`: rms_norm(r2 + rms_norm(y2, n_mlp_out), norm).
The kernels are in kernels/gemv_triton.py, their building blocks in kernels/gemv_blocks.py;
this module holds the tile tables and the launchers.

Every program streams its own BLOCK_N weight rows over all of K once, for all M rows
(FP32 accumulation). One row: a register GEMV, and since a norm needs the statistic of
a whole row, each program of qkv and gate_up recomputes its row's statistics itself (a
few KB from L2) instead of waiting on another kernel; program 0 alone stores the
residual. 2..16 rows (the small-M path): rows padded to 16, one tensor-core product per
weight tile, and the norm before qkv and before gate_up is one `_prenorm_kernel` launch
per call (recomputing 16 rows' statistics in each of hundreds of programs cost more than
the product: docs/results.md). KernelOptions.program_norm_rows moves that line (the
launchers' `program_norm_rows`: calls of up to that many rows norm in every program).
There o and down split K in two (SMALL_M_TILES' sixth entry): twice the programs, each
writing FP32 partial sums [M, 2, N] that the next norm kernel adds
up and rounds as the product's output (gemv_blocks._y_tile); no launch is added. Rounding follows the
torch path in the model dtype: every torch op that yields a model-dtype tensor is
rounded here too (norm before and after the weight, residual adds, GEMM outputs, RoPE
products and sum, silu, silu * up); the values are carried in FP32 in between.

Programmatic dependent launch (pdl=True, sm_90+): each kernel is launched while its
predecessor still runs; it first loads its first weight tile (weights are never written by
a kernel), then `griddepcontrol.wait`s for the predecessor's writes, then lets its own
successor launch (KernelOptions.pdl_trigger="start": before its wait; "late": the four products
after their K loop, gemv_blocks.pdl_late). Every store and every
read of an activation comes after the wait, so the order of writes is the order of launches;
attention's chunks of keys written before the call may be read before it (kernels/triton_attention.py).
Measured and left off (docs/results.md): an L2 prefetch of the program's weight rows before the
wait (a tile config's seventh entry) and the trigger at the start.
"""

from __future__ import annotations

import torch

from .gemv_blocks import available, launch_options, pdl_available, triton  # noqa: F401 (the GEMV paths' API)

if triton is not None:
    from .gemv_triton import (
        _gate_up_kernel,
        _gemv_kernel,
        _prenorm_kernel,
        _qkv_kernel,  # noqa: F401
        _residual_norm_kernel,
    )

MAX_ROWS = 16
# Tile overrides arrive as `config`,
# {name: (BLOCK_N, BLOCK_K, num_warps[, num_stages[, peel[, split[, prefetch]]]])} for one-row calls
# and {name + "/16": ...} for the small-M path (2..16 rows, padded to 16 for tensor-core products)
# (KernelOptions.gemv_config; measured by a tile sweep: docs/results.md).


def _config(name: str, M: int, config: dict | None = None) -> tuple[int, int, int, int, int, bool, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, peel, split, prefetch). BLOCK_N counts output columns
    (qkv: column pairs, gate_up: gate/up pairs, so those programs read 2*BLOCK_N weight rows).
    One row: a register GEMV (BLOCK_M 1). 2..16 rows: BLOCK_M 16, tensor-core products
    (tl.dot needs 16 in every dimension). peel: the first K tile's weights are loaded before
    the PDL wait. split: split-K into at most that many FP32 partials (the largest divisor of the
    number of K tiles), which the next kernel adds up (o, down) or each column block's last
    program to finish (qkv, gate_up: gemv_blocks._arrive). prefetch: K elements of each of
    the program's weight rows prefetched into L2 before the PDL wait (gemv_blocks._l2_prefetch; 0
    none). config[name] (one row) or config[name + "/16"]
    = (BLOCK_N, BLOCK_K, num_warps[, num_stages[, peel[, split[, prefetch]]]]) overrides."""
    BM = 1 if M == 1 else 16
    key = name if BM == 1 else f"{name}/16"
    c = tuple(config[key]) if config and key in config else (ONE_ROW_TILES if BM == 1 else SMALL_M_TILES)[name]
    bn, bk, nw, ns, peel, split, pf = (*c, *(3, True, 1, 0)[len(c) - 3 :])  # defaults: 3 stages, peel, no split
    return BM, bn, bk, nw, ns, bool(peel), split, pf


# (BLOCK_N, BLOCK_K, num_warps, num_stages, peel[, split]), tuned on the H200 at the ouro-1.4b shape
# (docs/results.md): one row, and the small-M path (2..16 rows,
# 16 in every dimension at least)
ONE_ROW_TILES = {
    "qkv": (2, 2048, 4, 2, True),
    "o": (2, 1024, 4, 3, True),
    "gate_up": (2, 2048, 4, 2, True),
    "down": (2, 2048, 4, 2, True),
}
SMALL_M_TILES = {
    "qkv": (32, 256, 4, 3, True),
    "o": (16, 256, 2, 4, True, 2),  # split-K 2: c(2..16) 1-7% less (docs/results.md, 2026-12-04)
    "gate_up": (32, 128, 4, 4, True),
    "down": (16, 256, 2, 4, True, 2),
}


def _rows(x: torch.Tensor) -> int:
    M = x.shape[0]
    assert 0 < M <= MAX_ROWS and x.is_contiguous(), x.shape
    return M


def _pf_bytes(prefetch: int, span: int, w: torch.Tensor) -> int:
    """The PF bytes of a kernel: `prefetch` K elements of a weight row, at most the program's `span`
    of K, in whole 16-byte units (cp.async.bulk's)."""
    return min(prefetch, span) * w.element_size() // 16 * 16


def _split(K: int, BK: int, split: int) -> tuple[int, int]:
    """(S, KS): split-K into S parts of KS columns (whole K tiles; the last part may hang over
    K, masked), S the largest divisor of the K tiles that is at most `split`; (1, K's tiles)
    without split."""
    tiles = triton.cdiv(K, BK)
    s = max(s for s in range(1, split + 1) if tiles % s == 0)
    return s, tiles // s * BK


COUNTERS = 1 << 15  # column blocks one split-K launch of qkv or gate_up may have
_COUNTS: dict = {}  # device -> int32 arrival counters of qkv's and gate_up's split-K, zero between launches


def _counters(device: torch.device, name: str, n: int) -> torch.Tensor:
    """n zeroed int32 arrival counters of `name`'s split-K launches (gemv_blocks._arrive): one
    buffer per device for the process's life (graphs keep its address), qkv's half apart from
    gate_up's. Launches on a device run in one stream's order (the engine's calls and their
    graphs), each waiting for the one before (PDL included), and each leaves its counters at zero.
    Made outside a graph capture (a call's warm-up runs eagerly first)."""
    assert n <= COUNTERS, (n, COUNTERS)
    device = torch.device(device)
    buf = _COUNTS.get(device)
    if buf is None:
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        assert not capturing, "split-K counters must be made before a graph capture (run the call once eagerly)"
        buf = _COUNTS[device] = torch.zeros(2 * COUNTERS, dtype=torch.int32, device=device)
    return buf[COUNTERS:] if name == "gate_up" else buf[:COUNTERS]


def _split_args(name: str, K: int, BM: int, BK: int, split: int, n_blocks: int, n_cols: int, like) -> dict:
    """The split-K keywords of qkv's or gate_up's kernel: FP32 partials WS [S, BM, n_cols] and the
    arrival counters, with the epilogue run by each column block's last program (S >= 2)."""
    S, KS = _split(K, BK, split)
    if S == 1:
        return {"SPLIT": 1, "KS": KS}
    ws = torch.empty(S, BM, n_cols, device=like.device, dtype=torch.float32)
    return {"WS": ws, "Count": _counters(like.device, name, n_blocks), "SPLIT": S, "KS": KS}


def _stats_k(K: int, BM: int, BK: int) -> int:
    """Chunk of the norm-statistics loops: the K tile for one row; for 16 rows a wider one
    (the statistics loop runs before the first product, so fewer, wider steps)."""
    return BK if BM == 1 else min(triton.next_power_of_2(K), max(BK, 512))


def gemv(
    x: torch.Tensor, w: torch.Tensor, name: str = "o", config: dict | None = None, pdl: bool = False
) -> torch.Tensor:
    """x [M, K] @ w [N, K].T -> [M, N] in x's dtype (`name` picks the tile config); with a
    split-K tile config (split S >= 2) the S FP32 partial sums [M, S, N], which
    qkv_rope_kv, gate_up_silu and residual_norm take as their y (`y_parts`)."""
    M, (N, K) = _rows(x), w.shape
    BM, BN, BK, nw, ns, peel, split, pf = _config(name, M, config)
    split, ks = _split(K, BK, split)
    if split > 1:
        out = torch.empty(M, split, N, device=x.device, dtype=torch.float32)
    else:
        out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    _gemv_kernel[(triton.cdiv(N, BN), split)](
        x,
        w,
        out,
        M,
        N,
        K,
        PDL=pdl,
        PEEL=peel,
        BLOCK_M=BM,
        BLOCK_N=BN,
        BLOCK_K=BK,
        SPLIT=split,
        KS=ks,
        PF=_pf_bytes(pf, K - (split - 1) * ks, w),  # at most the last part's K: no prefetch past a row
        num_warps=nw,
        num_stages=ns,
        **launch_options(pdl),
    )
    return out


def y_parts(y: torch.Tensor | None, h: torch.Tensor) -> int:
    """The HAS_Y of a kernel that reads y beside h [M, H]: 0 without y, 1 for y [M, H] in the
    model dtype, S for the S split-K partials [M, S, H] of `gemv`."""
    if y is None:
        return 0
    if y.dim() == 3:
        assert y.shape[0] == h.shape[0] and y.shape[2] == h.shape[1] and y.dtype == torch.float32, y.shape
        return y.shape[1]
    assert y.shape == h.shape, (y.shape, h.shape)
    return 1


def qkv_rope_kv(
    h,
    y_prev,
    n_prev,
    n_in,
    qkv,
    cos,
    sin,
    k_layer,
    v_layer,
    plane,
    pos,
    nh: int,
    nkv: int,
    hd: int,
    eps: float,
    config: dict | None = None,
    pdl: bool = False,
    program_norm_rows: int = 1,
):
    """h [M, H] residual in (with y_prev [M, H] (or split-K partials, `gemv`) and n_prev [H] of the previous layer, or
    None, None for the first layer): r = h + rms_norm(y_prev, n_prev), x = rms_norm(r, n_in),
    q, k, v = x @ qkv.T; RoPE (cos, sin [max_len, hd] tables, at positions pos [M]) on q, k.
    k, v go to k_layer, v_layer [P, max_len, nkv, hd] at (plane [M], pos [M]).
    Returns q [M, nh, hd] and r [M, H] (h itself for the first layer). A call of up to
    program_norm_rows rows norms its input in every program; a larger one in one `_prenorm_kernel`
    launch first."""
    assert qkv.shape == ((nh + 2 * nkv) * hd, h.shape[1]) and k_layer.is_contiguous() and v_layer.is_contiguous()
    q = torch.empty(h.shape[0], nh, hd, device=h.device, dtype=h.dtype)
    outs = (q, k_layer, v_layer, cos, sin, pos, plane)
    mid, heads = (k_layer.shape[1],), {"NH": nh, "NKV": nkv, "HD": hd}  # max_len; the head shape
    r = _pair_product(
        _qkv_kernel, "qkv", qkv, h, y_prev, n_prev, n_in, outs, mid, eps, config, pdl, program_norm_rows, **heads
    )
    return q, r


def gate_up_silu(
    r,
    y,
    n_attn_out,
    n_post,
    gate_up,
    eps: float,
    config: dict | None = None,
    pdl: bool = False,
    program_norm_rows: int = 1,
):
    """r, y [M, H] (or y as split-K partials, `gemv`) -> r2 = r + rms_norm(y, n_attn_out) [M, H] and
    act = silu(g) * u [M, I] where g, u = rms_norm(r2, n_post) @ gate_up.T (gate rows first).
    program_norm_rows: as in qkv_rope_kv."""
    I = gate_up.shape[0] // 2
    act = torch.empty(r.shape[0], I, device=r.device, dtype=r.dtype)
    r2 = _pair_product(
        _gate_up_kernel, "gate_up", gate_up, r, y, n_attn_out, n_post, (act,), (I,), eps, config, pdl, program_norm_rows
    )
    return r2, act


def _pair_product(
    kernel, name: str, w, h, y, w_y, w_x, outs: tuple, mid: tuple, eps, config, pdl, program_norm_rows, **consts
):
    """Launch qkv's or gate_up's kernel (`name`), the products of w [2 * pairs, H] in column pairs, on the
    input x = rms_norm(r, w_x), r = h + rms_norm(y, w_y) (h itself without y; y may be split-K
    partials, `gemv`): `kernel(h, y, w_y, w_x, r, w, *outs, M, H, *mid, eps, **consts, ...)`.
    Returns r. A call of up to program_norm_rows rows norms its input in every program; a larger
    one in one `_prenorm_kernel` launch first."""
    M, H = _rows(h), h.shape[1]
    BM, BN, BK, nw, ns, peel, split, pf = _config(name, M, config)
    has_y = y_parts(y, h)
    normed = M > program_norm_rows
    if not normed:  # each program norms its input itself
        r = torch.empty_like(h) if has_y else h
        args = (h, y if has_y else h, w_y if has_y else w_x, w_x, r)
    else:  # normed once per call, not once per program
        x, r = _prenorm(h, y, w_y, w_x, eps, pdl)
        args = (x, x, w_x, w_x, r)
    n_blocks = triton.cdiv(w.shape[0] // 2, BN)
    sp = _split_args(name, H, BM, BK, split, n_blocks, w.shape[0], h)
    kernel[(n_blocks, sp["SPLIT"])](
        *args,
        w,
        *outs,
        M,
        H,
        *mid,
        eps,
        **consts,
        HAS_Y=min(has_y, 1) if normed else has_y,  # normed: y already added in by _prenorm
        NORMED=normed,
        PDL=pdl,
        PEEL=peel,
        PF=_pf_bytes(pf, H - (sp["SPLIT"] - 1) * sp["KS"], w),
        BLOCK_M=BM,
        BLOCK_N=BN,
        BLOCK_K=BK,
        STATS_K=_stats_k(H, BM, BK),
        **sp,
        num_warps=nw,
        num_stages=ns,
        **launch_options(pdl),
    )
    return r


def _prenorm(h, y, w_y, w_x, eps: float, pdl: bool):
    """The small-M path's norm before a product, one program per row: (x, r) with
    r = h + rms_norm(y, w_y) (h itself without y) and x = rms_norm(r, w_x), [M, H] each."""
    M, H = h.shape
    x = torch.empty_like(h)
    r = torch.empty_like(h) if y is not None else h
    _prenorm_kernel[(M,)](
        h,
        h if y is None else y,
        w_x if y is None else w_y,
        w_x,
        r,
        x,
        H,
        eps,
        HAS_Y=y_parts(y, h),
        PDL=pdl,
        BLOCK_K=min(2048, triton.next_power_of_2(H)),
        num_warps=4,
        **launch_options(pdl),
    )
    return x, r


def residual_norm(h, y, w_y, w_x, eps: float, pdl: bool = False) -> torch.Tensor:
    """rms_norm(h + rms_norm(y, w_y), w_x) for h, y [M, H] (or y as split-K partials, `gemv`) -> [M, H]
    (one program)."""
    M, H = _rows(h), h.shape[1]
    out = torch.empty_like(h)
    _residual_norm_kernel[(1,)](
        h,
        y,
        w_y,
        w_x,
        out,
        M,
        H,
        eps,
        HAS_Y=y_parts(y, h),
        PDL=pdl,
        BLOCK_M=triton.next_power_of_2(M),
        BLOCK_K=min(1024, triton.next_power_of_2(H)),
        num_warps=4,
        **launch_options(pdl),
    )
    return out
