"""The Triton kernels of the GEMV paths: what each computes, and the launchers, are in
kernels/gemv.py; their building blocks in kernels/gemv_blocks.py."""

from __future__ import annotations

from .gemv_blocks import triton

if triton is not None:
    import triton.language as tl

    from .gemv_blocks import (
        _cast,
        _dot_rows,
        _arrive,
        _dot_w,
        _gather,
        _input_chunk,
        _k_ok,
        _l2_prefetch,
        _norm_stats,
        _rnd,
        _w_tile,
        _x_chunk,
        pdl_enter,
        pdl_late,
    )

    @triton.jit
    def _prenorm_kernel(
        H, Y, WY, WX, R, X, K: tl.constexpr, eps, HAS_Y: tl.constexpr, PDL: tl.constexpr, BLOCK_K: tl.constexpr
    ):
        # one program per row m: r = h + rms_norm(y, wy) (stored if HAS_Y), X = rms_norm(r, wx);
        # HAS_Y = S >= 2: y as S split-K partials, Y [M, S, K] (gemv_blocks._y_tile)
        DT: tl.constexpr = H.dtype.element_ty
        off = tl.program_id(0).to(tl.int64) * K
        y_off = off
        if HAS_Y > 1:
            y_off = off * HAS_Y
        pdl_enter(PDL)
        inv_y, inv_r = _norm_stats(H + off, Y + y_off, WY, 1, K, eps, HAS_Y, 1, BLOCK_K)
        for k0 in range(0, K, BLOCK_K):
            x = _input_chunk(H + off, Y + y_off, WY, WX, R + off, inv_y, inv_r, k0, 1, K, True, HAS_Y, 1, BLOCK_K)
            k = k0 + tl.arange(0, BLOCK_K)
            tl.store(X + off + k[None, :], x.to(DT), mask=_k_ok(k, K, BLOCK_K)[None, :])

    @triton.jit
    def _gemv_kernel(
        X,
        W,
        Out,
        M,
        N,
        K: tl.constexpr,
        PDL: tl.constexpr,
        PEEL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        SPLIT: tl.constexpr,
        KS: tl.constexpr,
        PF: tl.constexpr,
    ):
        # Out [M, N] = X [M, K] @ W [N, K].T. PEEL: the first K tile peeled off the loop, its weights
        # loaded before the PDL wait. SPLIT = S >= 2 (split-K): program (n, s) sums K tiles
        # s*KS.. of K (KS = the K tiles / SPLIT, times BLOCK_K) into Out [M, S, N] in FP32, for the next kernel to
        # add up (gemv_blocks._y_tile). PF: bytes of each weight row prefetched into L2 before the
        # PDL wait (gemv_blocks._l2_prefetch)
        k_lo = 0
        if SPLIT > 1:
            k_lo = tl.program_id(1) * KS
        n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        m = tl.arange(0, BLOCK_M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        _l2_prefetch(W, tl.program_id(0) * BLOCK_N, N, k_lo, K, BLOCK_N, 1, 1, PF)
        if PEEL:
            w0 = _w_tile(W, n, n < N, k_lo, K, BLOCK_K)
        pdl_enter(PDL, LATE=True)
        if PEEL:
            acc = _dot_w(acc, _x_chunk(X, M, k_lo, K, BLOCK_M, BLOCK_K), w0, BLOCK_M)
        if SPLIT > 1:  # a trip count known at compile time (software-pipelined)
            for t in range(PEEL * BLOCK_K, KS, BLOCK_K):  # (not range(PEEL, ..): a bool start compiles as -1)
                k0 = k_lo + t
                acc = _dot_rows(acc, _x_chunk(X, M, k0, K, BLOCK_M, BLOCK_K), W, n, n < N, k0, K, BLOCK_M, BLOCK_K)
        else:
            for k0 in range(PEEL * BLOCK_K, K, BLOCK_K):
                acc = _dot_rows(acc, _x_chunk(X, M, k0, K, BLOCK_M, BLOCK_K), W, n, n < N, k0, K, BLOCK_M, BLOCK_K)
        pdl_late(PDL)
        ok = (m[:, None] < M) & (n[None, :] < N)
        if SPLIT > 1:
            tl.store(Out + m[:, None] * (SPLIT * N) + tl.program_id(1) * N + n[None, :], acc, mask=ok)
        else:
            tl.store(Out + m[:, None] * N + n[None, :], _cast(acc, Out.dtype.element_ty), mask=ok)

    @triton.jit
    def _pair_sums(
        H, Y, WY, WX, R, W, rows, OFF, row_ok, n_pairs, G: tl.constexpr, GS: tl.constexpr, M, K: tl.constexpr, eps,
        HAS_Y: tl.constexpr, NORMED: tl.constexpr, PDL: tl.constexpr, PEEL: tl.constexpr, PF: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STATS_K: tl.constexpr,
        SPLIT: tl.constexpr, KS: tl.constexpr,
    ):  # fmt: skip
        """The K loop of _qkv_kernel and _gate_up_kernel: two accumulators over one input, the FP32
        sums [BLOCK_M, BLOCK_N] of the product's input (_input_chunk; program 0 stores r) times W's
        rows `rows` and `rows + OFF` (row_ok: their mask), over the K columns k_lo..k_lo+KS, k_lo =
        program_id(1) * KS with SPLIT (else 0). Before the PDL wait: the L2 prefetch of both row
        sets (pair j -> row (j // G) * GS + j % G for j < n_pairs: _l2_prefetch) and, with PEEL,
        the first K tile's weights."""
        pid = tl.program_id(0)
        k_lo = 0
        if SPLIT > 1:
            k_lo = tl.program_id(1) * KS
        acc_a = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        acc_b = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        _l2_prefetch(W, pid * BLOCK_N, n_pairs, k_lo, K, BLOCK_N, G, GS, PF)
        _l2_prefetch(W + OFF * K, pid * BLOCK_N, n_pairs, k_lo, K, BLOCK_N, G, GS, PF)
        if PEEL:
            w_a, w_b = _w_tile(W, rows, row_ok, k_lo, K, BLOCK_K), _w_tile(W, rows + OFF, row_ok, k_lo, K, BLOCK_K)
        pdl_enter(PDL, LATE=True)
        inv_y, inv_r = _norm_stats(H, Y, WY, M, K, eps, HAS_Y, BLOCK_M, STATS_K, NORMED)
        if PEEL:
            x = _input_chunk(H, Y, WY, WX, R, inv_y, inv_r, k_lo, M, K, pid == 0, HAS_Y, BLOCK_M, BLOCK_K, NORMED)
            acc_a = _dot_w(acc_a, x, w_a, BLOCK_M)
            acc_b = _dot_w(acc_b, x, w_b, BLOCK_M)
        for t in range(PEEL * BLOCK_K, KS, BLOCK_K):
            k0 = k_lo + t
            x = _input_chunk(H, Y, WY, WX, R, inv_y, inv_r, k0, M, K, pid == 0, HAS_Y, BLOCK_M, BLOCK_K, NORMED)
            acc_a = _dot_rows(acc_a, x, W, rows, row_ok, k0, K, BLOCK_M, BLOCK_K)
            acc_b = _dot_rows(acc_b, x, W, rows + OFF, row_ok, k0, K, BLOCK_M, BLOCK_K)
        pdl_late(PDL)
        return acc_a, acc_b

    @triton.jit
    def _qkv_kernel(
        H,
        Y,
        WY,
        WX,
        R,
        W,
        Q,
        Kc,
        Vc,
        Cos,
        Sin,
        pos_ptr,
        plane_ptr,
        M,
        K: tl.constexpr,
        max_len,
        eps,
        NH: tl.constexpr,
        NKV: tl.constexpr,
        HD: tl.constexpr,
        HAS_Y: tl.constexpr,
        NORMED: tl.constexpr,
        PDL: tl.constexpr,
        PEEL: tl.constexpr,
        PF: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        STATS_K: tl.constexpr,
        WS=None,
        Count=None,
        SPLIT: tl.constexpr = 1,
        KS: tl.constexpr = 0,  # K columns per program (K without split), a multiple of BLOCK_K
    ):
        # program's columns: pairs (c, c + HD/2) of one head, c = head*HD + d, d < HD/2, so
        # RoPE's rotate_half partner is computed by the same program. SPLIT = S >= 2 (split-K):
        # program (pid, s) sums K columns s*KS.. into FP32 partials WS [S, BLOCK_M, N]; the last
        # of a column block's S programs to finish adds them up (gemv_blocks._arrive, _gather)
        # and runs the epilogue
        HALF: tl.constexpr = HD // 2
        pid = tl.program_id(0)
        j = pid * BLOCK_N + tl.arange(0, BLOCK_N)  # pair index
        d = j % HALF
        lo = (j // HALF) * HD + d  # qkv output column, first half
        n_ok = j < (NH + 2 * NKV) * HALF
        acc_lo, acc_hi = _pair_sums(
            H, Y, WY, WX, R, W, lo, HALF, n_ok, (NH + 2 * NKV) * HALF, HALF, HD, M, K, eps,
            HAS_Y, NORMED, PDL, PEEL, PF, BLOCK_M, BLOCK_N, BLOCK_K, STATS_K, SPLIT, KS,
        )  # fmt: skip
        if SPLIT > 1:
            NC: tl.constexpr = (NH + 2 * NKV) * HD
            if _arrive(WS, Count + pid, acc_lo, acc_hi, lo, lo + HALF, n_ok, NC, BLOCK_M, SPLIT):
                acc_lo, acc_hi = _gather(WS, Count + pid, lo, lo + HALF, n_ok, NC, BLOCK_M, SPLIT)
                _qkv_out(acc_lo, acc_hi, lo, d, n_ok, Q, Kc, Vc, Cos, Sin, pos_ptr, plane_ptr, M, max_len, NH, NKV, HD)
        else:
            _qkv_out(acc_lo, acc_hi, lo, d, n_ok, Q, Kc, Vc, Cos, Sin, pos_ptr, plane_ptr, M, max_len, NH, NKV, HD)

    @triton.jit
    def _qkv_out(
        acc_lo,
        acc_hi,
        lo,
        d,
        n_ok,
        Q,
        Kc,
        Vc,
        Cos,
        Sin,
        pos_ptr,
        plane_ptr,
        M,
        max_len,
        NH: tl.constexpr,
        NKV: tl.constexpr,
        HD: tl.constexpr,
    ):
        # qkv's epilogue: the column pairs' sums acc_lo, acc_hi [BLOCK_M, BLOCK_N] (FP32)
        DT: tl.constexpr = Q.dtype.element_ty
        BLOCK_M: tl.constexpr = acc_lo.shape[0]
        HALF: tl.constexpr = HD // 2
        # RoPE on q and k: (lo, hi) -> (lo*cos - hi*sin, hi*cos + lo*sin), each product rounded
        m = tl.arange(0, BLOCK_M)
        m_ok = m < M
        pos = tl.load(pos_ptr + m, mask=m_ok, other=0).to(tl.int64)[:, None]  # [BLOCK_M, 1]
        a, b = _rnd(acc_lo, DT), _rnd(acc_hi, DT)
        cs = pos * HD + d[None, :]
        ok = m_ok[:, None] & n_ok[None, :]
        c_lo = tl.load(Cos + cs, mask=ok, other=0.0).to(tl.float32)
        c_hi = tl.load(Cos + cs + HALF, mask=ok, other=0.0).to(tl.float32)
        s_lo = tl.load(Sin + cs, mask=ok, other=0.0).to(tl.float32)
        s_hi = tl.load(Sin + cs + HALF, mask=ok, other=0.0).to(tl.float32)
        rot = (lo < (NH + NKV) * HD)[None, :]  # q and k columns, not v
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
    def _gate_up_kernel(
        H,
        Y,
        WY,
        WX,
        R,
        W,
        Act,
        M,
        K: tl.constexpr,
        I,
        eps,
        HAS_Y: tl.constexpr,
        NORMED: tl.constexpr,
        PDL: tl.constexpr,
        PEEL: tl.constexpr,
        PF: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        STATS_K: tl.constexpr,
        WS=None,
        Count=None,
        SPLIT: tl.constexpr = 1,
        KS: tl.constexpr = 0,  # K columns per program (K without split), a multiple of BLOCK_K
    ):
        # program's columns: gate rows j and up rows I + j of W [2I, K]; SPLIT as in _qkv_kernel
        # (partials WS [S, BLOCK_M, 2I])
        pid = tl.program_id(0)
        j = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        j_ok = j < I
        acc_g, acc_u = _pair_sums(
            H, Y, WY, WX, R, W, j, I, j_ok, I, 1, 1, M, K, eps,
            HAS_Y, NORMED, PDL, PEEL, PF, BLOCK_M, BLOCK_N, BLOCK_K, STATS_K, SPLIT, KS,
        )  # fmt: skip
        if SPLIT > 1:
            if _arrive(WS, Count + pid, acc_g, acc_u, j, I + j, j_ok, 2 * I, BLOCK_M, SPLIT):
                acc_g, acc_u = _gather(WS, Count + pid, j, I + j, j_ok, 2 * I, BLOCK_M, SPLIT)
                _silu_out(acc_g, acc_u, j, j_ok, Act, M, I, BLOCK_M)
        else:
            _silu_out(acc_g, acc_u, j, j_ok, Act, M, I, BLOCK_M)

    @triton.jit
    def _silu_out(acc_g, acc_u, j, j_ok, Act, M, I, BLOCK_M: tl.constexpr):
        # gate_up's epilogue: act = silu(g) * u from the sums acc_g, acc_u [BLOCK_M, BLOCK_N] (FP32)
        DT: tl.constexpr = Act.dtype.element_ty
        g, u = _rnd(acc_g, DT), _rnd(acc_u, DT)  # GEMM outputs
        act = _rnd(g / (1.0 + tl.exp(-g)), DT) * u  # F.silu in the model dtype, then * up
        m = tl.arange(0, BLOCK_M)
        tl.store(Act + m[:, None] * I + j[None, :], _cast(act, DT), mask=(m[:, None] < M) & j_ok[None, :])

    @triton.jit
    def _residual_norm_kernel(
        H,
        Y,
        WY,
        WX,
        Out,
        M,
        K: tl.constexpr,
        eps,
        HAS_Y: tl.constexpr,
        PDL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        # Out = rms_norm(h + rms_norm(y, wy), wx); one program (HAS_Y: 1, or S split-K partials of y)
        DT: tl.constexpr = H.dtype.element_ty
        pdl_enter(PDL)
        inv_y, inv_r = _norm_stats(H, Y, WY, M, K, eps, HAS_Y, BLOCK_M, BLOCK_K)
        m = tl.arange(0, BLOCK_M)
        for k0 in range(0, K, BLOCK_K):
            x = _input_chunk(H, Y, WY, WX, Out, inv_y, inv_r, k0, M, K, False, HAS_Y, BLOCK_M, BLOCK_K)
            k = k0 + tl.arange(0, BLOCK_K)
            tl.store(Out + m[:, None] * K + k[None, :], x.to(DT), mask=(m[:, None] < M) & _k_ok(k, K, BLOCK_K)[None, :])
