"""JIT building blocks of the GEMV paths (kernels/gemv.py): rounding as the torch path rounds,
norm statistics and normed input chunks, residuals, weight tiles and their products, and
programmatic dependent launch. The kernels that use them: kernels/gemv_triton.py and
kernels/triton_attention.py."""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs: the torch path is used
    triton = None
try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # a Triton without grid dependency control: no PDL
    gdc_wait = gdc_launch_dependents = None


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def pdl_available(device: torch.device) -> bool:
    """Programmatic dependent launch: Triton with grid dependency control, an sm_90+ device."""
    device = torch.device(device)
    return (
        available(device)
        and gdc_wait is not None
        and not _interpreted()
        and torch.cuda.get_device_capability(device)[0] >= 9
    )


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
    def pdl_enter(PDL: tl.constexpr, LATE: tl.constexpr = False):
        """With programmatic dependent launch (PDL 1): wait for the previous kernel's writes, then
        let the next kernel launch; PDL 2 lets the next kernel launch first, then waits (its own
        wait still waits for this kernel, so the order of writes is kept); PDL 3 as 1, except in
        a kernel that passes LATE, which lets the next kernel launch at pdl_late (after its main
        loop). Call before the first store and before reading activations."""
        if PDL == 2:
            gdc_launch_dependents()
        if PDL:
            gdc_wait()
        if PDL == 1 or (PDL == 3 and not LATE):
            gdc_launch_dependents()

    @triton.jit
    def pdl_late(PDL: tl.constexpr):
        """PDL 3: let the next kernel launch now (a product kernel's main loop is done)."""
        if PDL == 3:
            gdc_launch_dependents()

    @triton.jit
    def _l2_prefetch(W, j0, n_j, k0, K, ROWS: tl.constexpr, HALF: tl.constexpr, HD: tl.constexpr, NBYTES: tl.constexpr):
        """Before the PDL wait: a bulk L2 prefetch (sm_90 `cp.async.bulk.prefetch.L2`, issued by one
        thread) of NBYTES of each of the program's ROWS weight rows, from column k0: row
        (j // HALF) * HD + j % HALF for j = j0.. (j past n_j clamped to the last), so HALF = HD = 1
        for consecutive rows and HD // 2 for qkv's first halves of a head. Weights are never written
        by a kernel, so they may stream while the previous kernel runs. A hint: it changes no value;
        the interpreter skips it (NBYTES: a multiple of 16, 0 none)."""
        if NBYTES > 0 and not _INTERPRETED:
            for i in tl.static_range(ROWS):
                j = tl.minimum(j0 + i, n_j - 1)
                row = (j // HALF) * HD + j % HALF
                tl.inline_asm_elementwise(
                    "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0;\n\t"
                    "@p cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0; }",
                    "=r,l,r",
                    [W + row.to(tl.int64) * K + k0, NBYTES + 0 * j],
                    dtype=tl.int32,
                    is_pure=False,
                    pack=1,
                )

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
    def _y_tile(Y, m, k, mask, K, PARTS: tl.constexpr, DT: tl.constexpr):
        """y [BLOCK_M, BLOCK_K] at rows m, columns k, in FP32: Y [M, K] itself (PARTS 1), or with
        PARTS = S >= 2 the sum of a split-K product's S FP32 partials, Y [M, S, K], rounded to the
        model dtype as the product's output is (kernels/gemv.py, `gemv`)."""
        if PARTS < 2:
            return tl.load(Y + m[:, None] * K + k[None, :], mask=mask, other=0.0).to(tl.float32)
        row = Y + m[:, None] * (PARTS * K) + k[None, :]
        y = tl.load(row, mask=mask, other=0.0)
        for s in tl.static_range(1, PARTS):
            y += tl.load(row + s * K, mask=mask, other=0.0)
        return _rnd(y, DT)

    @triton.jit
    def _inv_rms(X, M, K, eps, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, PARTS: tl.constexpr, DT: tl.constexpr):
        """1 / rms of each row of X [M, K] (with PARTS >= 2 a split-K product's partials: _y_tile)
        -> [BLOCK_M] FP32."""
        m = tl.arange(0, BLOCK_M)
        acc = tl.zeros([BLOCK_M, BLOCK_K], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            mask = (m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :]
            x = _y_tile(X, m, k, mask, K, PARTS, DT)
            acc += x * x
        return tl.rsqrt(tl.sum(acc, 1) / K + eps)

    @triton.jit
    def _residual(H, Y, WY, inv_y, k0, M, K, HAS_Y: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        """Columns k0..k0+BLOCK_K of r = h + rms_norm(y, wy) (just h without y) -> [BLOCK_M, BLOCK_K].
        HAS_Y: 0 no y, 1 y [M, K], S >= 2 y as a split-K product's S partials (_y_tile)."""
        m = tl.arange(0, BLOCK_M)
        k = k0 + tl.arange(0, BLOCK_K)
        mask = (m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :]
        off = m[:, None] * K + k[None, :]
        r = tl.load(H + off, mask=mask, other=0.0).to(tl.float32)
        if HAS_Y:
            DT: tl.constexpr = H.dtype.element_ty
            y = _y_tile(Y, m, k, mask, K, HAS_Y, DT)
            wy = tl.load(WY + k, mask=_k_ok(k, K, BLOCK_K), other=0.0).to(tl.float32)
            t = _rnd(_rnd(y * inv_y[:, None], DT) * wy[None, :], DT)  # rms_norm(y, wy)
            r = _rnd(r + t, DT)
        return r

    @triton.jit
    def _norm_stats(
        H,
        Y,
        WY,
        M,
        K,
        eps,
        HAS_Y: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr,
        SKIP: tl.constexpr = False,
    ):
        """inv_y = 1/rms(y) (if HAS_Y) and inv_r = 1/rms(r), r as in _residual: [BLOCK_M] each
        (zeros with SKIP: the input arrives normed)."""
        inv_y = tl.zeros([BLOCK_M], tl.float32)
        if SKIP:
            return inv_y, inv_y
        if HAS_Y:
            inv_y = _inv_rms(Y, M, K, eps, BLOCK_M, BLOCK_K, HAS_Y, H.dtype.element_ty)
        acc = tl.zeros([BLOCK_M, BLOCK_K], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            r = _residual(H, Y, WY, inv_y, k0, M, K, HAS_Y, BLOCK_M, BLOCK_K)
            acc += r * r
        return inv_y, tl.rsqrt(tl.sum(acc, 1) / K + eps)

    @triton.jit
    def _input_chunk(
        H,
        Y,
        WY,
        WX,
        R,
        inv_y,
        inv_r,
        k0,
        M,
        K,
        STORE_R,
        HAS_Y: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr,
        NORMED: tl.constexpr = False,
    ):
        """Columns k0.. of a product's input -> [BLOCK_M, BLOCK_K]: x = rms_norm(r, wx), r as in
        _residual (r's columns stored if STORE_R); with NORMED, H itself (written by _prenorm_kernel)."""
        if NORMED:
            return _x_chunk(H, M, k0, K, BLOCK_M, BLOCK_K)
        DT: tl.constexpr = H.dtype.element_ty
        m = tl.arange(0, BLOCK_M)
        k = k0 + tl.arange(0, BLOCK_K)
        r = _residual(H, Y, WY, inv_y, k0, M, K, HAS_Y, BLOCK_M, BLOCK_K)
        if HAS_Y:
            tl.store(
                R + m[:, None] * K + k[None, :],
                r.to(DT),
                mask=(m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :] & STORE_R,
            )
        wx = tl.load(WX + k, mask=_k_ok(k, K, BLOCK_K), other=0.0).to(tl.float32)
        return _rnd(_rnd(r * inv_r[:, None], DT) * wx[None, :], DT)

    @triton.jit
    def _w_tile(W, rows, row_mask, k0, K, BLOCK_K: tl.constexpr):
        """W[rows, k0:k0+BLOCK_K] -> [BLOCK_N, BLOCK_K] in W's dtype."""
        k = k0 + tl.arange(0, BLOCK_K)
        return tl.load(
            W + rows.to(tl.int64)[:, None] * K + k[None, :],
            mask=row_mask[:, None] & _k_ok(k, K, BLOCK_K)[None, :],
            other=0.0,
        )

    @triton.jit
    def _dot_w(acc, x, w, BLOCK_M: tl.constexpr):
        """acc [BLOCK_M, BLOCK_N] += x [BLOCK_M, BLOCK_K] (FP32 values) @ w [BLOCK_N, BLOCK_K].T"""
        if BLOCK_M >= 16:
            # small-M path (2..16 rows padded to 16): one tensor-core product per weight tile,
            # so the tile is streamed once for all rows of the call. x holds values of the
            # model dtype (rounded by _input_chunk, or loaded activations), so the BF16
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
                x_i = tl.sum(tl.where(m == i, x, 0.0), 0)  # row i: [BLOCK_K]
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
    def _arrive(WS, Count, acc_a, acc_b, col_a, col_b, ok, NC, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr):
        """Split-K with the epilogue in the finishing program: store this program's FP32 partials
        acc_a, acc_b [BLOCK_M, BLOCK_N] at columns col_a, col_b of part s = program_id(1) of
        WS [SPLIT, BLOCK_M, NC], then count the arrival at Count (one int32 per column block, zero
        before the launch). True for the block's last program to arrive: the acquire makes every
        part's partials visible to it; it resets the counter."""
        m = tl.arange(0, BLOCK_M)[:, None]
        row = WS + tl.program_id(1) * (BLOCK_M * NC) + m * NC
        tl.store(row + col_a[None, :], acc_a, mask=ok[None, :])
        tl.store(row + col_b[None, :], acc_b, mask=ok[None, :])
        tl.debug_barrier()  # every thread's stores issued before the release below
        return tl.atomic_add(Count, 1, sem="acq_rel", scope="gpu") == SPLIT - 1

    @triton.jit
    def _gather(WS, Count, col_a, col_b, ok, NC, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr):
        """In the program _arrive found last: the parts' sums at columns col_a and col_b
        (_part_sum), the counter reset to zero for the next launch."""
        a = _part_sum(WS, col_a, ok, NC, BLOCK_M, SPLIT)
        b = _part_sum(WS, col_b, ok, NC, BLOCK_M, SPLIT)
        tl.store(Count, 0)
        return a, b

    @triton.jit
    def _part_sum(WS, col, ok, NC, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr):
        """Columns col of WS [SPLIT, BLOCK_M, NC] summed over the parts in part order (the same
        sum whichever program arrives last) -> [BLOCK_M, BLOCK_N] FP32; loads from L2 (.cg)."""
        m = tl.arange(0, BLOCK_M)[:, None]
        p = WS + m * NC + col[None, :]
        y = tl.load(p, mask=ok[None, :], other=0.0, cache_modifier=".cg")
        for s in tl.static_range(1, SPLIT):
            y += tl.load(p + s * (BLOCK_M * NC), mask=ok[None, :], other=0.0, cache_modifier=".cg")
        return y
