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

Every program streams its own BLOCK_N weight rows over all of K once, for all M rows
(FP32 accumulation). One row: a register GEMV, and since a norm needs the statistic of
a whole row, each program of qkv and gate_up recomputes its row's statistics itself (a
few KB from L2) instead of waiting on another kernel; program 0 alone stores the
residual. 2..16 rows (the small-M path): rows padded to 16, one tensor-core product per
weight tile, and the norm before qkv and before gate_up is one `_prenorm_kernel` launch
per call (recomputing 16 rows' statistics in each of hundreds of programs cost more than
the product: docs/results.md). Rounding follows the
torch path in the model dtype: every torch op that yields a model-dtype tensor is
rounded here too (norm before and after the weight, residual adds, GEMM outputs, RoPE
products and sum, silu, silu * up); the values are carried in FP32 in between.

Programmatic dependent launch (pdl=True, sm_90+): each kernel is launched while its
predecessor still runs; it first loads its first weight tile (weights are never written by
a kernel), then `griddepcontrol.wait`s for the predecessor's writes, then lets its own
successor launch. Every store and every read of an activation, position or KV plane comes
after the wait, so the order of writes is the order of launches.
"""
from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU installs: the torch path is used
    triton = None
try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:          # a Triton without grid dependency control: no PDL
    gdc_wait = gdc_launch_dependents = None

MAX_ROWS = 16
# Tile overrides arrive as `config`, {name: (BLOCK_N, BLOCK_K, num_warps[, num_stages[, peel]])} for
# one-row calls and {name + "/16": ...} for the small-M path (2..16 rows, padded to 16 for
# tensor-core products) (KernelOptions.gemv_config; scripts/gpu_kernel_profile.py --sweep measures them).


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def pdl_available(device: torch.device) -> bool:
    """Programmatic dependent launch: Triton with grid dependency control, an sm_90+ device."""
    device = torch.device(device)
    return (available(device) and gdc_wait is not None and not _interpreted()
            and torch.cuda.get_device_capability(device)[0] >= 9)


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def launch_options(pdl: bool) -> dict:
    """Extra launch keywords of a kernel that takes PDL=pdl."""
    return {"launch_pdl": True} if pdl else {}


if triton is not None:
    # under the Triton interpreter: its FP32 -> BF16 cast truncates (round to nearest even by
    # hand there) and its BF16 tl.dot is wrong (TF32 products of the same values there)
    _INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")

    @triton.jit
    def pdl_enter(PDL: tl.constexpr):
        """With programmatic dependent launch: wait for the previous kernel's writes, then let
        the next kernel launch. Call before the first store and before reading activations."""
        if PDL:
            gdc_wait()
            gdc_launch_dependents()

    @triton.jit
    def _rnd(x, DT: tl.constexpr):
        # a torch op's output in the model dtype, carried on in FP32
        if _INTERPRETED and DT == tl.bfloat16:
            b = x.to(tl.uint32, bitcast=True)
            b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
            return b.to(tl.float32, bitcast=True)
        return x.to(DT).to(tl.float32)

    @triton.jit
    def _cast(x, DT: tl.constexpr):
        # FP32 -> model dtype for a store, rounded to nearest even
        return _rnd(x, DT).to(DT)

    @triton.jit
    def _k_ok(k, K: tl.constexpr, BLOCK_K: tl.constexpr):
        # k < K, as a constant where BLOCK_K divides K: a mask that varies along K would
        # keep the loads from being vectorized
        ok = k < K
        if K % BLOCK_K == 0:
            ok = tl.full([BLOCK_K], 1, tl.int1)
        return ok

    @triton.jit
    def _inv_rms(X, M, K, eps, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        """1 / rms of each row of X [M, K] -> [BLOCK_M] FP32."""
        m = tl.arange(0, BLOCK_M)
        acc = tl.zeros([BLOCK_M, BLOCK_K], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            mask = (m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :]
            x = tl.load(X + m[:, None] * K + k[None, :], mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        return tl.rsqrt(tl.sum(acc, 1) / K + eps)

    @triton.jit
    def _residual(H, Y, WY, inv_y, k0, M, K, HAS_Y: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_K: tl.constexpr):
        """Columns k0..k0+BLOCK_K of r = h + rms_norm(y, wy) (just h without y) -> [BLOCK_M, BLOCK_K]."""
        m = tl.arange(0, BLOCK_M)
        k = k0 + tl.arange(0, BLOCK_K)
        mask = (m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :]
        off = m[:, None] * K + k[None, :]
        r = tl.load(H + off, mask=mask, other=0.0).to(tl.float32)
        if HAS_Y:
            DT: tl.constexpr = H.dtype.element_ty
            y = tl.load(Y + off, mask=mask, other=0.0).to(tl.float32)
            wy = tl.load(WY + k, mask=_k_ok(k, K, BLOCK_K), other=0.0).to(tl.float32)
            t = _rnd(_rnd(y * inv_y[:, None], DT) * wy[None, :], DT)       # rms_norm(y, wy)
            r = _rnd(r + t, DT)
        return r

    @triton.jit
    def _norm_stats(H, Y, WY, M, K, eps, HAS_Y: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                    SKIP: tl.constexpr = False):
        """inv_y = 1/rms(y) (if HAS_Y) and inv_r = 1/rms(r), r as in _residual: [BLOCK_M] each
        (zeros with SKIP: the input arrives normed)."""
        inv_y = tl.zeros([BLOCK_M], tl.float32)
        if SKIP:
            return inv_y, inv_y
        if HAS_Y:
            inv_y = _inv_rms(Y, M, K, eps, BLOCK_M, BLOCK_K)
        acc = tl.zeros([BLOCK_M, BLOCK_K], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            r = _residual(H, Y, WY, inv_y, k0, M, K, HAS_Y, BLOCK_M, BLOCK_K)
            acc += r * r
        return inv_y, tl.rsqrt(tl.sum(acc, 1) / K + eps)

    @triton.jit
    def _normed_chunk(H, Y, WY, WX, R, inv_y, inv_r, k0, M, K, STORE_R, HAS_Y: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        """Columns k0.. of x = rms_norm(r, wx) -> [BLOCK_M, BLOCK_K]; stores r's columns if STORE_R."""
        DT: tl.constexpr = H.dtype.element_ty
        m = tl.arange(0, BLOCK_M)
        k = k0 + tl.arange(0, BLOCK_K)
        r = _residual(H, Y, WY, inv_y, k0, M, K, HAS_Y, BLOCK_M, BLOCK_K)
        if HAS_Y:
            tl.store(R + m[:, None] * K + k[None, :], r.to(DT), mask=(m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :] & STORE_R)
        wx = tl.load(WX + k, mask=_k_ok(k, K, BLOCK_K), other=0.0).to(tl.float32)
        return _rnd(_rnd(r * inv_r[:, None], DT) * wx[None, :], DT)

    @triton.jit
    def _input_chunk(H, Y, WY, WX, R, inv_y, inv_r, k0, M, K, STORE_R, HAS_Y: tl.constexpr, NORMED: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        """Columns k0.. of the product's input: H itself if NORMED (written by _prenorm_kernel),
        else x = rms_norm(h + rms_norm(y, wy), wx) as in _normed_chunk."""
        if NORMED:
            return _x_chunk(H, M, k0, K, BLOCK_M, BLOCK_K)
        return _normed_chunk(H, Y, WY, WX, R, inv_y, inv_r, k0, M, K, STORE_R, HAS_Y, BLOCK_M, BLOCK_K)

    @triton.jit
    def _prenorm_kernel(H, Y, WY, WX, R, X, K: tl.constexpr, eps, HAS_Y: tl.constexpr, PDL: tl.constexpr,
                        BLOCK_K: tl.constexpr):
        # one program per row m: r = h + rms_norm(y, wy) (stored if HAS_Y), X = rms_norm(r, wx)
        DT: tl.constexpr = H.dtype.element_ty
        off = tl.program_id(0).to(tl.int64) * K
        pdl_enter(PDL)
        inv_y, inv_r = _norm_stats(H + off, Y + off, WY, 1, K, eps, HAS_Y, 1, BLOCK_K)
        for k0 in range(0, K, BLOCK_K):
            x = _normed_chunk(H + off, Y + off, WY, WX, R + off, inv_y, inv_r, k0, 1, K, True, HAS_Y, 1, BLOCK_K)
            k = k0 + tl.arange(0, BLOCK_K)
            tl.store(X + off + k[None, :], x.to(DT), mask=_k_ok(k, K, BLOCK_K)[None, :])

    @triton.jit
    def _w_tile(W, rows, row_mask, k0, K, BLOCK_K: tl.constexpr):
        """W[rows, k0:k0+BLOCK_K] -> [BLOCK_N, BLOCK_K] in W's dtype."""
        k = k0 + tl.arange(0, BLOCK_K)
        return tl.load(W + rows.to(tl.int64)[:, None] * K + k[None, :],
                       mask=row_mask[:, None] & _k_ok(k, K, BLOCK_K)[None, :], other=0.0)

    @triton.jit
    def _dot_w(acc, x, w, BLOCK_M: tl.constexpr):
        """acc [BLOCK_M, BLOCK_N] += x [BLOCK_M, BLOCK_K] (FP32 values) @ w [BLOCK_N, BLOCK_K].T"""
        if BLOCK_M >= 16:
            # small-M path (2..16 rows padded to 16): one tensor-core product per weight tile,
            # so the tile is streamed once for all rows of the call. x holds values of the
            # model dtype (rounded by _normed_chunk, or loaded activations), so the BF16
            # product is exact and accumulates in FP32; the interpreter takes the same
            # products in TF32 (exact for BF16 values).
            if w.dtype == tl.float32:
                acc += tl.dot(x, tl.trans(w), input_precision="ieee")
            elif _INTERPRETED:
                acc += tl.dot(x, tl.trans(w.to(tl.float32)), input_precision="tf32")
            else:
                acc += tl.dot(x.to(w.dtype), tl.trans(w))
        else:
            wf = w.to(tl.float32)
            # row by row as 2D products (a 3D [M, N, K] product would un-vectorize the weight loads)
            m = tl.arange(0, BLOCK_M)[:, None]
            for i in tl.static_range(BLOCK_M):
                x_i = tl.sum(tl.where(m == i, x, 0.0), 0)                         # row i: [BLOCK_K]
                acc += tl.where(m == i, tl.sum(wf * x_i[None, :], 1)[None, :], 0.0)
        return acc

    @triton.jit
    def _dot_rows(acc, x, W, rows, row_mask, k0, K, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        """acc [BLOCK_M, BLOCK_N] += x [BLOCK_M, BLOCK_K] @ W[rows, k0:k0+BLOCK_K].T"""
        return _dot_w(acc, x, _w_tile(W, rows, row_mask, k0, K, BLOCK_K), BLOCK_M)

    @triton.jit
    def _x_chunk(X, M, k0, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        m = tl.arange(0, BLOCK_M)
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(X + m[:, None] * K + k[None, :], mask=(m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :], other=0.0)
        return x.to(tl.float32)

    @triton.jit
    def _gemv_kernel(X, W, Out, M, N, K: tl.constexpr, PDL: tl.constexpr, PEEL: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # Out [M, N] = X [M, K] @ W [N, K].T. PEEL: the first K tile peeled off the loop, its weights
        # loaded before the PDL wait
        n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        m = tl.arange(0, BLOCK_M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if PEEL:
            w0 = _w_tile(W, n, n < N, 0, K, BLOCK_K)
        pdl_enter(PDL)
        if PEEL:
            acc = _dot_w(acc, _x_chunk(X, M, 0, K, BLOCK_M, BLOCK_K), w0, BLOCK_M)
        for k0 in range(PEEL * BLOCK_K, K, BLOCK_K):
            acc = _dot_rows(acc, _x_chunk(X, M, k0, K, BLOCK_M, BLOCK_K), W, n, n < N, k0, K, BLOCK_M, BLOCK_K)
        tl.store(Out + m[:, None] * N + n[None, :], _cast(acc, Out.dtype.element_ty),
                 mask=(m[:, None] < M) & (n[None, :] < N))

    @triton.jit
    def _qkv_kernel(H, Y, WY, WX, R, W, Q, Kc, Vc, Cos, Sin, pos_ptr, plane_ptr, M, K: tl.constexpr, max_len, eps,
                    NH: tl.constexpr, NKV: tl.constexpr, HD: tl.constexpr, HAS_Y: tl.constexpr, NORMED: tl.constexpr,
                    PDL: tl.constexpr, PEEL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    STATS_K: tl.constexpr):
        # program's columns: pairs (c, c + HD/2) of one head, c = head*HD + d, d < HD/2, so
        # RoPE's rotate_half partner is computed by the same program
        DT: tl.constexpr = H.dtype.element_ty
        HALF: tl.constexpr = HD // 2
        pid = tl.program_id(0)
        j = pid * BLOCK_N + tl.arange(0, BLOCK_N)                  # pair index
        d = j % HALF
        lo = (j // HALF) * HD + d                                  # qkv output column, first half
        n_ok = j < (NH + 2 * NKV) * HALF
        acc_lo = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        acc_hi = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if PEEL:              # the first K tile's weights before the PDL wait
            w_lo, w_hi = _w_tile(W, lo, n_ok, 0, K, BLOCK_K), _w_tile(W, lo + HALF, n_ok, 0, K, BLOCK_K)
        pdl_enter(PDL)
        inv_y, inv_r = _norm_stats(H, Y, WY, M, K, eps, HAS_Y, BLOCK_M, STATS_K, NORMED)
        if PEEL:
            x = _input_chunk(H, Y, WY, WX, R, inv_y, inv_r, 0, M, K, pid == 0, HAS_Y, NORMED, BLOCK_M, BLOCK_K)
            acc_lo = _dot_w(acc_lo, x, w_lo, BLOCK_M)
            acc_hi = _dot_w(acc_hi, x, w_hi, BLOCK_M)
        for k0 in range(PEEL * BLOCK_K, K, BLOCK_K):
            x = _input_chunk(H, Y, WY, WX, R, inv_y, inv_r, k0, M, K, pid == 0, HAS_Y, NORMED, BLOCK_M, BLOCK_K)
            acc_lo = _dot_rows(acc_lo, x, W, lo, n_ok, k0, K, BLOCK_M, BLOCK_K)
            acc_hi = _dot_rows(acc_hi, x, W, lo + HALF, n_ok, k0, K, BLOCK_M, BLOCK_K)
        # RoPE on q and k: (lo, hi) -> (lo*cos - hi*sin, hi*cos + lo*sin), each product rounded
        m = tl.arange(0, BLOCK_M)
        m_ok = m < M
        pos = tl.load(pos_ptr + m, mask=m_ok, other=0).to(tl.int64)[:, None]     # [BLOCK_M, 1]
        a, b = _rnd(acc_lo, DT), _rnd(acc_hi, DT)
        cs = pos * HD + d[None, :]
        ok = m_ok[:, None] & n_ok[None, :]
        c_lo = tl.load(Cos + cs, mask=ok, other=0.0).to(tl.float32)
        c_hi = tl.load(Cos + cs + HALF, mask=ok, other=0.0).to(tl.float32)
        s_lo = tl.load(Sin + cs, mask=ok, other=0.0).to(tl.float32)
        s_hi = tl.load(Sin + cs + HALF, mask=ok, other=0.0).to(tl.float32)
        rot = (lo < (NH + NKV) * HD)[None, :]                      # q and k columns, not v
        a_out = _cast(tl.where(rot, _rnd(a * c_lo, DT) + _rnd(-b * s_lo, DT), a), DT)
        b_out = _cast(tl.where(rot, _rnd(b * c_hi, DT) + _rnd(a * s_hi, DT), b), DT)
        # q -> Q [M, NH*HD]; k, v -> their layer's KV planes at flat index plane*max_len + pos
        plane = tl.load(plane_ptr + m, mask=m_ok, other=0).to(tl.int64)[:, None]
        kv_row = (plane * max_len + pos) * (NKV * HD)
        col = lo[None, :]
        is_q = col < NH * HD
        is_v = col >= (NH + NKV) * HD
        q_off = m[:, None] * (NH * HD) + col
        k_off = kv_row + (col - NH * HD)
        v_off = kv_row + (col - (NH + NKV) * HD)
        _store_qkv(Q + q_off, Kc + k_off, Vc + v_off, a_out, ok, is_q, is_v)
        _store_qkv(Q + q_off + HALF, Kc + k_off + HALF, Vc + v_off + HALF, b_out, ok, is_q, is_v)

    @triton.jit
    def _store_qkv(q_ptrs, k_ptrs, v_ptrs, val, ok, is_q, is_v):
        tl.store(q_ptrs, val, mask=ok & is_q)
        tl.store(k_ptrs, val, mask=ok & ~is_q & ~is_v)
        tl.store(v_ptrs, val, mask=ok & is_v)

    @triton.jit
    def _gate_up_kernel(H, Y, WY, WX, R, W, Act, M, K: tl.constexpr, I, eps, NORMED: tl.constexpr, PDL: tl.constexpr,
                        PEEL: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STATS_K: tl.constexpr):
        # program's columns: gate rows j and up rows I + j of W [2I, K]
        DT: tl.constexpr = H.dtype.element_ty
        pid = tl.program_id(0)
        j = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        j_ok = j < I
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if PEEL:              # the first K tile's weights before the PDL wait
            w_g, w_u = _w_tile(W, j, j_ok, 0, K, BLOCK_K), _w_tile(W, I + j, j_ok, 0, K, BLOCK_K)
        pdl_enter(PDL)
        inv_y, inv_r = _norm_stats(H, Y, WY, M, K, eps, True, BLOCK_M, STATS_K, NORMED)
        # The same two-accumulator K loop as qkv_rope_kv's (deliberately written out in each
        # kernel: Triton inlines it either way, and each pairs its columns differently).
        if PEEL:
            x = _input_chunk(H, Y, WY, WX, R, inv_y, inv_r, 0, M, K, pid == 0, True, NORMED, BLOCK_M, BLOCK_K)
            acc_g = _dot_w(acc_g, x, w_g, BLOCK_M)
            acc_u = _dot_w(acc_u, x, w_u, BLOCK_M)
        for k0 in range(PEEL * BLOCK_K, K, BLOCK_K):
            x = _input_chunk(H, Y, WY, WX, R, inv_y, inv_r, k0, M, K, pid == 0, True, NORMED, BLOCK_M, BLOCK_K)
            acc_g = _dot_rows(acc_g, x, W, j, j_ok, k0, K, BLOCK_M, BLOCK_K)
            acc_u = _dot_rows(acc_u, x, W, I + j, j_ok, k0, K, BLOCK_M, BLOCK_K)
        g, u = _rnd(acc_g, DT), _rnd(acc_u, DT)                    # GEMM outputs
        act = _rnd(g / (1.0 + tl.exp(-g)), DT) * u                # F.silu in the model dtype, then * up
        m = tl.arange(0, BLOCK_M)
        tl.store(Act + m[:, None] * I + j[None, :], _cast(act, DT), mask=(m[:, None] < M) & j_ok[None, :])

    @triton.jit
    def _residual_norm_kernel(H, Y, WY, WX, Out, M, K: tl.constexpr, eps, PDL: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_K: tl.constexpr):
        # Out = rms_norm(h + rms_norm(y, wy), wx); one program
        DT: tl.constexpr = H.dtype.element_ty
        pdl_enter(PDL)
        inv_y, inv_r = _norm_stats(H, Y, WY, M, K, eps, True, BLOCK_M, BLOCK_K)
        m = tl.arange(0, BLOCK_M)
        for k0 in range(0, K, BLOCK_K):
            x = _normed_chunk(H, Y, WY, WX, Out, inv_y, inv_r, k0, M, K, False, True, BLOCK_M, BLOCK_K)
            k = k0 + tl.arange(0, BLOCK_K)
            tl.store(Out + m[:, None] * K + k[None, :], x.to(DT), mask=(m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :])


def _config(name: str, M: int, config: dict | None = None) -> tuple[int, int, int, int, int, bool]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, peel). BLOCK_N counts output columns
    (qkv: column pairs, gate_up: gate/up pairs, so those programs read 2*BLOCK_N weight rows).
    One row: a register GEMV (BLOCK_M 1). 2..16 rows: BLOCK_M 16, tensor-core products
    (tl.dot needs 16 in every dimension). peel: the first K tile's weights are loaded before
    the PDL wait. config[name] (one row) or config[name + "/16"]
    = (BLOCK_N, BLOCK_K, num_warps[, num_stages[, peel]]) overrides."""
    BM = 1 if M == 1 else 16
    key = name if BM == 1 else f"{name}/16"
    c = tuple(config[key]) if config and key in config else (ONE_ROW_TILES if BM == 1 else SMALL_M_TILES)[name]
    bn, bk, nw, ns, peel = (*c, 3, True)[:5] if len(c) == 3 else (*c, True)[:5]
    return BM, bn, bk, nw, ns, bool(peel)


# (BLOCK_N, BLOCK_K, num_warps, num_stages, peel), tuned on the H200 at the ouro-1.4b shape
# (scripts/gpu_kernel_profile.py, docs/results.md): one row, and the small-M path (2..16 rows,
# 16 in every dimension at least)
ONE_ROW_TILES = {"qkv": (2, 2048, 4, 2, True), "o": (2, 1024, 4, 3, True), "gate_up": (2, 2048, 4, 2, True),
                 "down": (2, 2048, 4, 2, True)}
SMALL_M_TILES = {"qkv": (32, 256, 4, 3, True), "o": (16, 256, 2, 4, True), "gate_up": (32, 128, 4, 4, True),
                 "down": (16, 256, 2, 4, True)}


def _rows(x: torch.Tensor) -> int:
    M = x.shape[0]
    assert 0 < M <= MAX_ROWS and x.is_contiguous(), x.shape
    return M


def _stats_k(K: int, BM: int, BK: int) -> int:
    """Chunk of the norm-statistics loops: the K tile for one row; for 16 rows a wider one
    (the statistics loop runs before the first product, so fewer, wider steps)."""
    return BK if BM == 1 else min(triton.next_power_of_2(K), max(BK, 512))


def gemv(x: torch.Tensor, w: torch.Tensor, name: str = "o", config: dict | None = None,
         pdl: bool = False) -> torch.Tensor:
    """x [M, K] @ w [N, K].T -> [M, N] in x's dtype (`name` picks the tile config)."""
    M, (N, K) = _rows(x), w.shape
    BM, BN, BK, nw, ns, peel = _config(name, M, config)
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    _gemv_kernel[(triton.cdiv(N, BN),)](x, w, out, M, N, K, PDL=pdl, PEEL=peel, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                                        num_warps=nw, num_stages=ns, **launch_options(pdl))
    return out


def qkv_rope_kv(h, y_prev, n_prev, n_in, qkv, cos, sin, k_layer, v_layer, plane, pos,
                nh: int, nkv: int, hd: int, eps: float, config: dict | None = None, pdl: bool = False):
    """h [M, H] residual in (with y_prev [M, H] and n_prev [H] of the previous layer, or
    None, None for the first layer): r = h + rms_norm(y_prev, n_prev), x = rms_norm(r, n_in),
    q, k, v = x @ qkv.T; RoPE (cos, sin [max_len, hd] tables, at positions pos [M]) on q, k.
    k, v go to k_layer, v_layer [P, max_len, nkv, hd] at (plane [M], pos [M]).
    Returns q [M, nh, hd] and r [M, H] (h itself for the first layer)."""
    M, H = _rows(h), h.shape[1]
    assert qkv.shape == ((nh + 2 * nkv) * hd, H) and k_layer.is_contiguous() and v_layer.is_contiguous()
    BM, BN, BK, nw, ns, peel = _config("qkv", M, config)
    has_y = y_prev is not None
    q = torch.empty(M, nh, hd, device=h.device, dtype=h.dtype)
    grid = (triton.cdiv((nh + 2 * nkv) * hd // 2, BN),)
    if BM == 1:               # one row: each program norms its input itself
        r = torch.empty_like(h) if has_y else h
        args = (h, y_prev if has_y else h, n_prev if has_y else n_in, n_in, r)
    else:                     # small M: normed once per call, not once per program
        x, r = _prenorm(h, y_prev, n_prev, n_in, eps, pdl)
        args = (x, x, n_in, n_in, r)
    _qkv_kernel[grid](*args, qkv, q, k_layer, v_layer,
                      cos, sin, pos, plane, M, H, k_layer.shape[1], eps, NH=nh, NKV=nkv, HD=hd, HAS_Y=has_y,
                      NORMED=BM > 1, PDL=pdl, PEEL=peel, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, STATS_K=_stats_k(H, BM, BK), num_warps=nw,
                      num_stages=ns, **launch_options(pdl))
    return q, r


def gate_up_silu(r, y, n_attn_out, n_post, gate_up, eps: float, config: dict | None = None, pdl: bool = False):
    """r, y [M, H] -> r2 = r + rms_norm(y, n_attn_out) [M, H] and
    act = silu(g) * u [M, I] where g, u = rms_norm(r2, n_post) @ gate_up.T (gate rows first)."""
    M, H = _rows(r), r.shape[1]
    I = gate_up.shape[0] // 2
    BM, BN, BK, nw, ns, peel = _config("gate_up", M, config)
    act = torch.empty(M, I, device=r.device, dtype=r.dtype)
    if BM == 1:               # one row: each program norms its input itself
        r2 = torch.empty_like(r)
        args = (r, y, n_attn_out, n_post, r2)
    else:                     # small M: normed once per call, not once per program
        x, r2 = _prenorm(r, y, n_attn_out, n_post, eps, pdl)
        args = (x, x, n_post, n_post, r2)
    _gate_up_kernel[(triton.cdiv(I, BN),)](*args, gate_up, act, M, H, I, eps, NORMED=BM > 1, PDL=pdl, PEEL=peel,
                                           BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, STATS_K=_stats_k(H, BM, BK),
                                           num_warps=nw, num_stages=ns, **launch_options(pdl))
    return r2, act


def _prenorm(h, y, w_y, w_x, eps: float, pdl: bool):
    """The small-M path's norm before a product, one program per row: (x, r) with
    r = h + rms_norm(y, w_y) (h itself without y) and x = rms_norm(r, w_x), [M, H] each."""
    M, H = h.shape
    x = torch.empty_like(h)
    r = torch.empty_like(h) if y is not None else h
    _prenorm_kernel[(M,)](h, h if y is None else y, w_x if y is None else w_y, w_x, r, x, H, eps, HAS_Y=y is not None,
                          PDL=pdl, BLOCK_K=min(2048, triton.next_power_of_2(H)), num_warps=4, **launch_options(pdl))
    return x, r


def residual_norm(h, y, w_y, w_x, eps: float, pdl: bool = False) -> torch.Tensor:
    """rms_norm(h + rms_norm(y, w_y), w_x) for h, y [M, H] -> [M, H] (one program)."""
    M, H = _rows(h), h.shape[1]
    out = torch.empty_like(h)
    _residual_norm_kernel[(1,)](h, y, w_y, w_x, out, M, H, eps, PDL=pdl, BLOCK_M=triton.next_power_of_2(M),
                                BLOCK_K=min(1024, triton.next_power_of_2(H)), num_warps=4, **launch_options(pdl))
    return out
