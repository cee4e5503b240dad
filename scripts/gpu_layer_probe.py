"""A probe, not an engine path: can one persistent launch per layer (or per call) stream the four
weight products of a layer (qkv -> o -> gate_up -> down) faster than four launches?

Every arm runs the same tile code (`_task`): a program's task is BLOCK_N output columns of one
product, 2..16 rows padded to 16, one tensor-core product per weight tile, the output rounded to
BF16 (gate_up: silu(gate) * up of its rounded sums, BLOCK_N gate/up pairs). No norms, RoPE or
attention: o's input is qkv's first `hidden` columns. Arms:
  prod        the engine's product kernel (kernels/gemv.py `gemv`, its small-M tiles, PDL), four
              launches per layer on the same buffers (timing only: its values are not chained);
  launch      four kernels per layer, one task per program, PDL between them;
  layer       one kernel per layer, G programs loop over each product's tasks, a grid barrier
              between products (atomic counter), PDL between layers;
  call        one kernel for all layers, a barrier between every two products.
Outputs of arms with the same tiles are compared bit for bit (their sums run in the same order),
and with a torch chain of the same roundings. A barrier that waits too long gives up and raises a
flag (reported, the arm's figures void), so too many programs for the device cannot hang the run.

  python3 scripts/gpu_layer_probe.py --rows 2,8 --arms launch,layer1,layer2,call1 --json out.json
Under TRITON_INTERPRET=1 (CPU) it checks the arms' values at a small shape (`--check`).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys

import torch

try:  # the kernels need Triton; --help does not
    import triton
    import triton.language as tl
except ImportError:
    triton = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

if triton is not None:
    from kernels.gemv_blocks import _l2_prefetch

    if not INTERPRET:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    else:  # the interpreter has no grid dependency control
        gdc_wait = gdc_launch_dependents = None

    SPIN = tl.constexpr(1 << 16)  # polls of a barrier before it gives up
    INTERPRET_DOT = tl.constexpr(INTERPRET)

    @triton.jit
    def _pdl(PDL: tl.constexpr):
        if PDL:
            gdc_wait()
            gdc_launch_dependents()

    @triton.jit
    def _bf(x):
        # FP32 -> BF16 -> FP32, to nearest even (by hand under the interpreter, whose cast truncates)
        if INTERPRET_DOT:
            b = x.to(tl.uint32, bitcast=True)
            b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
            return b.to(tl.float32, bitcast=True)
        return x.to(tl.bfloat16).to(tl.float32)

    @triton.jit
    def _task(
        t,
        X,
        XS: tl.constexpr,
        W,
        Out,
        M,
        N: tl.constexpr,
        K: tl.constexpr,
        PAIR: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        w0a,
        w0b,
        PEEL: tl.constexpr,
        CG: tl.constexpr = True,
        PK: tl.constexpr = 0,
    ):
        """Task t: columns t*BLOCK_N.. of Out [16, N] (BF16, rows < M stored) = X [16, K] @ W [N, K].T
        rounded, X's rows XS apart (rows >= M neither loaded nor stored). PAIR: W [2N, K] holds gate
        rows 0..N-1 and up rows N..2N-1, Out = silu(gate) * up. Activations load from L2 (.cg): in a
        persistent kernel other programs wrote them, maybe over lines this SM's L1 holds. PEEL (0 or 1):
        the first K tile's weights are w0a, w0b (_w0), loaded before the wait for the input; PK: its
        width (a multiple of BLOCK_K; 0: BLOCK_K)."""
        P: tl.constexpr = BLOCK_K if PK == 0 else PK
        n = t * BLOCK_N + tl.arange(0, BLOCK_N)
        m = tl.arange(0, 16)[:, None]
        acc = tl.zeros([16, BLOCK_N], tl.float32)
        acc2 = tl.zeros([16, BLOCK_N], tl.float32)
        if PEEL:
            x0 = _x(X + m * XS + tl.arange(0, P)[None, :], m < M, CG)
            acc = _dot(acc, x0, w0a)
            if PAIR:
                acc2 = _dot(acc2, x0, w0b)
        for k0 in range(PEEL * P, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x = _x(X + m * XS + k[None, :], m < M, CG)
            acc = _dot(acc, x, tl.load(W + n.to(tl.int64)[:, None] * K + k[None, :]))
            if PAIR:
                acc2 = _dot(acc2, x, tl.load(W + (N + n).to(tl.int64)[:, None] * K + k[None, :]))
        y = _bf(acc)
        if PAIR:
            y = _bf(_bf(y / (1.0 + tl.exp(-y))) * _bf(acc2))
        tl.store(Out + m * N + n[None, :], y.to(tl.bfloat16), mask=m < M)

    @triton.jit
    def _x(p, ok, CG: tl.constexpr):
        if CG:
            return tl.load(p, mask=ok, other=0.0, cache_modifier=".cg")
        return tl.load(p, mask=ok, other=0.0)

    @triton.jit
    def _w0(
        t,
        W,
        N: tl.constexpr,
        K: tl.constexpr,
        PAIR: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        PEEL: tl.constexpr,
    ):
        """Task t's first BLOCK_K columns of weights (gate rows, up rows): loaded with PEEL, zeros without."""
        n = t * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = (n < N)[:, None]
        p = W + n.to(tl.int64)[:, None] * K + tl.arange(0, BLOCK_K)[None, :]
        a = tl.zeros([BLOCK_N, BLOCK_K], W.dtype.element_ty)
        b = a
        if PEEL:
            a = tl.load(p, mask=ok, other=0.0)
            if PAIR:
                b = tl.load(p + N * K, mask=ok, other=0.0)
        return a, b

    @triton.jit
    def _dot(acc, x, w):
        # acc [16, BLOCK_N] += x [16, BLOCK_K] @ w [BLOCK_N, BLOCK_K].T, BF16 values, FP32 sums
        if INTERPRET_DOT:  # the interpreter's BF16 dot is wrong; TF32 products of BF16 values are exact
            return acc + tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="tf32")
        return acc + tl.dot(x, tl.trans(w))

    @triton.jit
    def _phase_kernel(
        X,
        XS: tl.constexpr,
        W,
        Out,
        M,
        N: tl.constexpr,
        K: tl.constexpr,
        PAIR: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        PDL: tl.constexpr,
        PEEL: tl.constexpr,
        CG: tl.constexpr,
        PK: tl.constexpr = 0,
    ):
        # PK: the peeled columns, loaded before the PDL wait (0: one K tile)
        a, b = _w0(tl.program_id(0), W, N, K, PAIR, BLOCK_N, BLOCK_K if PK == 0 else PK, PEEL)
        _pdl(PDL)
        _task(tl.program_id(0), X, XS, W, Out, M, N, K, PAIR, BLOCK_N, BLOCK_K, a, b, PEEL, CG, PK)

    @triton.jit
    def _chunk(W, K: tl.constexpr, RB: tl.constexpr, KC: tl.constexpr, BK: tl.constexpr, b):
        """Task b of W [., K] cut into RB rows x KC columns (row block b // (K / KC)): read as a product's
        program reads its weights, and summed (the `read` arms: the products' bytes without the products)."""
        r = (b // (K // KC)) * RB + tl.arange(0, RB)
        c0 = (b % (K // KC)) * KC
        acc = tl.zeros([RB, BK], tl.float32)
        for k0 in range(0, KC, BK):
            acc += tl.load(W + r.to(tl.int64)[:, None] * K + (c0 + k0 + tl.arange(0, BK))[None, :]).to(tl.float32)
        return tl.sum(tl.sum(acc, 1), 0)

    @triton.jit
    def _read_kernel(
        Wq,
        Wo,
        Wg,
        Wd,
        Out,
        layer0,
        H: tl.constexpr,
        NQ: tl.constexpr,
        I: tl.constexpr,
        ONLY: tl.constexpr,
        RB: tl.constexpr,
        KC: tl.constexpr,
        BK: tl.constexpr,
        PDL: tl.constexpr,
    ):
        """One program per task of RB rows x KC columns (KC 0: whole rows) of one layer's four matrices
        (ONLY 0..3: of that matrix alone), layer layer0 + program_id(1); its sum to Out (never read)."""
        _pdl(PDL)
        L = (layer0 + tl.program_id(1)).to(tl.int64)
        b = tl.program_id(0)
        KH: tl.constexpr = H if KC == 0 else KC  # a task's columns of the matrices H wide
        KI: tl.constexpr = I if KC == 0 else KC  # and of down's, I wide
        P0: tl.constexpr = (NQ // RB) * (H // KH) if ONLY < 0 or ONLY == 0 else 0
        P1: tl.constexpr = P0 + ((H // RB) * (H // KH) if ONLY < 0 or ONLY == 1 else 0)
        P2: tl.constexpr = P1 + ((2 * I // RB) * (H // KH) if ONLY < 0 or ONLY == 2 else 0)
        if b < P0:
            v = _chunk(Wq + L * NQ * H, H, RB, KH, BK, b)
        elif b < P1:
            v = _chunk(Wo + L * H * H, H, RB, KH, BK, b - P0)
        elif b < P2:
            v = _chunk(Wg + L * 2 * I * H, H, RB, KH, BK, b - P1)
        else:
            v = _chunk(Wd + L * H * I, I, RB, KI, BK, b - P2)
        tl.store(Out + L * 65536 + b, v)

    @triton.jit
    def _pf(pid, W, N: tl.constexpr, K: tl.constexpr, PAIR: tl.constexpr, BLOCK_N: tl.constexpr, PF: tl.constexpr):
        """Task pid's weight rows (and its up rows) into L2: PF bytes of each from column 0, -1 the
        whole row (kernels/gemv_blocks._l2_prefetch; the interpreter skips it)."""
        NB: tl.constexpr = K * 2 if PF < 0 else PF
        if PF != 0:
            if pid * BLOCK_N < N:
                _l2_prefetch(W, pid * BLOCK_N, N, 0, K, BLOCK_N, 1, 1, NB)
                if PAIR:
                    _l2_prefetch(W + N * K, pid * BLOCK_N, N, 0, K, BLOCK_N, 1, 1, NB)

    @triton.jit
    def _sync(Bar, G: tl.constexpr, Flag):
        """Grid barrier: every one of the G programs arrives (release), then waits for all (acquire)."""
        tl.debug_barrier()
        tl.atomic_add(Bar, 1, sem="release", scope="gpu")
        v = tl.atomic_add(Bar, 0, sem="acquire", scope="gpu")
        n = 0
        while (v < G) & (n < SPIN):
            v = tl.atomic_add(Bar, 0, sem="acquire", scope="gpu")
            n += 1
        if n >= SPIN:
            tl.atomic_max(Flag, 1)
        tl.debug_barrier()

    @triton.jit
    def _phase(
        pid,
        G: tl.constexpr,
        X,
        XS: tl.constexpr,
        W,
        Out,
        M,
        N: tl.constexpr,
        K: tl.constexpr,
        PAIR: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        w0a,
        w0b,
        PEEL: tl.constexpr,
    ):
        """The product's tasks pid, pid + G, ..; the first with its peeled tile (_w0)."""
        NT: tl.constexpr = N // BLOCK_N
        if pid < NT:
            _task(pid, X, XS, W, Out, M, N, K, PAIR, BLOCK_N, BLOCK_K, w0a, w0b, PEEL)
        for j in range(1, (NT + G - 1) // G):
            t = pid + j * G
            if t < NT:
                _task(t, X, XS, W, Out, M, N, K, PAIR, BLOCK_N, BLOCK_K, w0a, w0b, 0)

    @triton.jit
    def _layers_kernel(
        X,
        Q,
        O,
        A,
        Wq,
        Wo,
        Wg,
        Wd,
        Bar,
        Flag,
        M,
        layer0,
        n_layers: tl.constexpr,
        G: tl.constexpr,
        H: tl.constexpr,
        NQ: tl.constexpr,
        I: tl.constexpr,
        BQ: tl.constexpr,
        BO: tl.constexpr,
        BG: tl.constexpr,
        BD: tl.constexpr,
        KQ: tl.constexpr,
        KO: tl.constexpr,
        KG: tl.constexpr,
        KD: tl.constexpr,
        PDL: tl.constexpr,
        PEEL: tl.constexpr,
        PF: tl.constexpr = 0,
    ):
        """Layers layer0.. of n_layers: X [16, H] in and out; a barrier between two products, each
        product's first weight tile loaded before it (PEEL), the weight rows of the program's first
        task of it prefetched into L2 before it (PF bytes of each row; -1 whole rows)."""
        pid = tl.program_id(0)
        for i in range(n_layers):
            L = (layer0 + i).to(tl.int64)
            b = Bar + i * 4
            wq, wo, wg, wd = Wq + L * NQ * H, Wo + L * H * H, Wg + L * 2 * I * H, Wd + L * H * I
            qa, qb = _w0(pid, wq, NQ, H, False, BQ, KQ, PEEL)
            _pf(pid, wq, NQ, H, False, BQ, PF)
            if i > 0:
                _sync(b - 1, G, Flag)
            else:
                _pdl(PDL)
            _phase(pid, G, X, H, wq, Q, M, NQ, H, False, BQ, KQ, qa, qb, PEEL)
            oa, ob = _w0(pid, wo, H, H, False, BO, KO, PEEL)
            _pf(pid, wo, H, H, False, BO, PF)
            _sync(b, G, Flag)
            _phase(pid, G, Q, NQ, wo, O, M, H, H, False, BO, KO, oa, ob, PEEL)  # o's input: q's first H columns
            ga, gb = _w0(pid, wg, I, H, True, BG, KG, PEEL)
            _pf(pid, wg, I, H, True, BG, PF)
            _sync(b + 1, G, Flag)
            _phase(pid, G, O, H, wg, A, M, I, H, True, BG, KG, ga, gb, PEEL)
            da, db = _w0(pid, wd, H, I, False, BD, KD, PEEL)
            _pf(pid, wd, H, I, False, BD, PF)
            _sync(b + 2, G, Flag)
            _phase(pid, G, A, I, wd, X, M, H, I, False, BD, KD, da, db, PEEL)


class Probe:
    """Buffers and weights of `layers` layers at hidden H, qkv width NQ, intermediate I."""

    def __init__(self, H, NQ, I, layers, device, seed=0):
        g = torch.Generator(device=device).manual_seed(seed)

        def w(n, k):  # [layers, n, k], scaled so activations stay O(1)
            return (torch.randn(layers, n, k, generator=g, device=device) / k**0.5).to(torch.bfloat16)

        self.H, self.NQ, self.I, self.layers, self.device = H, NQ, I, layers, device
        self.Wq, self.Wo, self.Wg, self.Wd = w(NQ, H), w(H, H), w(2 * I, H), w(H, I)
        self.weight_bytes = sum(t.numel() * 2 for t in (self.Wq, self.Wo, self.Wg, self.Wd)) // layers
        self.x0 = torch.randn(16, H, generator=g, device=device).to(torch.bfloat16).float()

    def buffers(self, M):
        """X (the call's input, rows >= M zero), Q, O, A in BF16; barrier counters; the flag."""
        z = lambda n: torch.zeros(16, n, dtype=torch.bfloat16, device=self.device)  # noqa: E731
        x0 = z(self.H)
        x0[:M] = self.x0[:M]
        return dict(
            X=z(self.H),
            Q=z(self.NQ),
            O=z(self.H),
            A=z(self.I),
            X0=x0,
            Bar=torch.zeros(4 * self.layers, dtype=torch.int32, device=self.device),
            Flag=torch.zeros(1, dtype=torch.int32, device=self.device),
            R=torch.zeros(self.layers * 65536, dtype=torch.float32, device=self.device),
        )


def products(p: Probe):
    # (name, its weights, output columns N, K, input buffer, input row stride, output buffer, PAIR)
    H, NQ, I = p.H, p.NQ, p.I
    return [
        ("qkv", p.Wq, NQ, H, "X", H, "Q", False),
        ("o", p.Wo, H, H, "Q", NQ, "O", False),
        ("gate_up", p.Wg, I, H, "O", H, "A", True),
        ("down", p.Wd, H, I, "A", I, "X", False),
    ]


def call(p: Probe, arm: dict, tiles: dict, buf: dict, M: int):
    """One call: X <- X0, counters zeroed, then the arm's launches over all layers."""
    buf["X"].copy_(buf["X0"])
    kind, pdl, peel = arm["kind"], arm.get("pdl", not INTERPRET), arm.get("peel", 1)
    tiles = {**tiles, **arm.get("tiles", {})}
    launch = {"launch_pdl": True} if pdl else {}
    if kind == "prod":  # the engine's product kernel (kernels/gemv.py) at its tiles, on stand-in inputs
        from kernels.gemv import SMALL_M_TILES, gemv

        cfg = {"qkv/16": (64, *SMALL_M_TILES["qkv"][1:]), "gate_up/16": (64, *SMALL_M_TILES["gate_up"][1:])}
        cfg.update({f"{n}/16": (*SMALL_M_TILES[n][:5], 1) for n in ("o", "down") if arm.get("no_split")})
        for L in range(p.layers):
            for name, w, _, K, *_ in products(p):
                gemv(buf["X"][:M] if K == p.H else buf["A"][:M], w[L], name, cfg, pdl=pdl)
        return
    if kind == "read":  # the weights streamed and summed: four launches a layer, one a layer, or one a call
        bn, bk, per = arm.get("bn", 16), arm.get("bk", 256), arm["per"]
        H, NQ, I = p.H, p.NQ, p.I
        rows = {0: NQ, 1: H, 2: 2 * I, 3: H}
        rb, kc = arm.get("even", (bn, 0))  # tasks of rb rows x kc columns (kc 0: whole rows, uneven)
        tasks = {o: rows[o] // rb * (((I if o == 3 else H) // kc) if kc else 1) for o in range(4)}
        for L in range(0, p.layers, 1 if per in ("product", "layer") else p.layers):
            for only in range(4) if per == "product" else (-1,):
                n = tasks[only] if only >= 0 else sum(tasks.values())
                _read_kernel[(n, 1 if per in ("product", "layer") else p.layers)](
                    p.Wq,
                    p.Wo,
                    p.Wg,
                    p.Wd,
                    buf["R"],
                    L,
                    H,
                    NQ,
                    I,
                    only,
                    rb,
                    kc,
                    bk,
                    pdl,
                    num_warps=4,
                    num_stages=arm.get("stages", 3),
                    **launch,
                )
        return
    if kind == "launch":
        for L in range(p.layers):
            for name, w, N, K, src, xs, dst, pair in products(p):
                bn, bk, nw, ns, *pk = tiles[name]  # pk: the peeled columns (default one K tile)
                _phase_kernel[(N // bn,)](
                    buf[src],
                    xs,
                    w[L],
                    buf[dst],
                    M,
                    N,
                    K,
                    pair,
                    bn,
                    bk,
                    pdl,
                    peel,
                    arm.get("cg", True),
                    pk[0] if pk else 0,
                    num_warps=nw,
                    num_stages=ns,
                    **launch,
                )
        return
    buf["Bar"].zero_()
    G, per, t = arm["programs"], (1 if kind == "layer" else p.layers), tiles
    for L in range(0, p.layers, per):
        _layers_kernel[(G,)](
            buf["X"],
            buf["Q"],
            buf["O"],
            buf["A"],
            p.Wq,
            p.Wo,
            p.Wg,
            p.Wd,
            buf["Bar"][4 * L :],
            buf["Flag"],
            M,
            L,
            per,
            G,
            p.H,
            p.NQ,
            p.I,
            t["qkv"][0],
            t["o"][0],
            t["gate_up"][0],
            t["down"][0],
            t["qkv"][1],
            t["o"][1],
            t["gate_up"][1],
            t["down"][1],
            pdl,
            peel,
            arm.get("pf", 0),
            num_warps=arm.get("warps", 4),
            num_stages=arm.get("stages", 3),
            **launch,
        )


def torch_chain(p: Probe, M: int) -> torch.Tensor:
    """The same products and roundings in torch (FP32 sums of BF16 values), rows 0..M-1."""
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    x = p.x0[:M]
    for L in range(p.layers):
        q = bf(x) @ p.Wq[L].float().T
        o = bf(q[:, : p.H]) @ p.Wo[L].float().T
        gu = bf(o) @ p.Wg[L].float().T
        g, u = bf(gu[:, : p.I]), bf(gu[:, p.I :])
        x = bf(bf(bf(g / (1 + torch.exp(-g))) * u) @ p.Wd[L].float().T)
    return x


def result(buf, M):
    return buf["X"][:M].float()


def check(p: Probe, arms: dict, tiles: dict, M: int) -> dict:
    """Every arm's output after two layers (a longer chain of random products shrinks to zeros)
    against the torch chain (relative) and against the first arm (bitwise)."""
    p = copy.copy(p)
    p.layers = min(p.layers, 2)
    ref = torch_chain(p, M)
    outs, rep = {}, {}
    for name, arm in arms.items():
        if arm["kind"] in ("prod", "read"):  # values not chained: timing only
            continue
        buf = p.buffers(M)
        call(p, arm, tiles, buf, M)
        if p.device.type == "cuda":
            torch.cuda.synchronize()
        outs[name] = result(buf, M).clone()
        rel = ((outs[name] - ref).norm() / ref.norm()).item()
        same = torch.equal(outs[name], next(iter(outs.values())))  # the first arm checked
        rep[name] = dict(rel_vs_torch=rel, bitwise_vs_first=same, barrier_timeout=bool(buf["Flag"].item()))
    return rep


TILES = {  # name: (BLOCK_N, BLOCK_K, num_warps, num_stages) of the launch arm (gate_up: BLOCK_N pairs)
    "qkv": (64, 256, 4, 3),
    "o": (16, 256, 2, 4),
    "gate_up": (32, 128, 4, 4),
    "down": (16, 256, 2, 4),
}


def time_arms(p, arms, tiles, M, reps, rounds):
    """Median us per layer of each arm: CUDA graphs of `reps` calls, arms in turn, `rounds` times."""
    graphs, bufs = {}, {}
    for name, arm in arms.items():
        bufs[name] = buf = p.buffers(M)
        call(p, arm, tiles, buf, M)  # compile, warm
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                call(p, arm, tiles, buf, M)
        graphs[name] = g
    ms = {n: [] for n in arms}
    for _ in range(rounds):
        for name, g in graphs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ms[name].append(a.elapsed_time(b) / reps)
    per_layer = {n: 1000 * statistics.median(v) / p.layers for n, v in ms.items()}
    first = next(iter(arms))
    ratio = {n: [x / y for x, y in zip(v, ms[first])] for n, v in ms.items()}
    return dict(
        us_per_layer=per_layer,
        ratio_vs_first={n: [min(r), statistics.median(r), max(r)] for n, r in ratio.items()},
        timeouts={n: bool(b["Flag"].item()) for n, b in bufs.items()},
    )


def copy_bw(device) -> float:
    a = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        b.copy_(a)
    e1.record()
    e1.synchronize()
    return 2 * 10 * a.numel() / (e0.elapsed_time(e1) / 1000)  # bytes read + written per second (as `floor`)


BALANCED = {"qkv": (16, 256, 4, 3), "gate_up": (16, 256, 4, 3)}  # 384 / 352 tasks: whole waves of 132 programs
ARMS = {
    "prod": dict(kind="prod"),
    "prod_nosplit": dict(kind="prod", no_split=True),
    "launch": dict(kind="launch"),
    # the weights streamed without products: four launches a layer (BLOCK_N 16 rows, 128-704
    # programs), one launch a layer (1,344 programs), one launch a call (24 x 1,344)
    "read_product": dict(kind="read", per="product"),
    "read_layer": dict(kind="read", per="layer"),
    "read_call": dict(kind="read", per="call"),
    "read_product64": dict(kind="read", per="product", bn=64),
    "read_product_k1024": dict(kind="read", per="product", bk=1024),
    "read_call_k1024": dict(kind="read", per="call", bk=1024),
    # tasks of equal size, 64 rows x 512 columns (1,568 a layer), read in K tiles of 128
    "read_product_even": dict(kind="read", per="product", even=(64, 512), bk=128),
    "read_layer_even": dict(kind="read", per="layer", even=(64, 512), bk=128),
    "read_call_even": dict(kind="read", per="call", even=(64, 512), bk=128),
    "read_layer_even_k256": dict(kind="read", per="layer", even=(32, 1024), bk=256),
    "launch_nopeel": dict(kind="launch", peel=0),
    "launch_ca": dict(kind="launch", cg=False),  # activations through L1 as well
    # more of each program's weights loaded before the PDL wait: 1024 or 2048 columns of o and down,
    # 512 or 1024 of all four
    "launch_pk_od1024": dict(kind="launch", tiles={n: (*TILES[n], 1024) for n in ("o", "down")}),
    "launch_pk_od2048": dict(kind="launch", tiles={n: (*TILES[n], 2048) for n in ("o", "down")}),
    "launch_pk_all512": dict(kind="launch", tiles={n: (*t, 512) for n, t in TILES.items()}),
    "launch_pk_all1024": dict(kind="launch", tiles={n: (*t, 1024) for n, t in TILES.items()}),
    "launch_nopdl": dict(kind="launch", pdl=False),
    "layer1": dict(kind="layer", programs=132),
    "layer1_nopeel": dict(kind="layer", programs=132, peel=0),
    "layer2": dict(kind="layer", programs=264),
    "layer1b": dict(kind="layer", programs=132, tiles=BALANCED),
    "layer1b4": dict(kind="layer", programs=132, tiles=BALANCED, stages=4),
    "layer1w8": dict(kind="layer", programs=132, warps=8),
    "call1": dict(kind="call", programs=132),
    "call1b": dict(kind="call", programs=132, tiles=BALANCED),
    # before each barrier, the rows of the program's first task of the next product into L2
    "layer1_pf": dict(kind="layer", programs=132, peel=0, pf=-1),
    "layer1_pf1k": dict(kind="layer", programs=132, peel=0, pf=1024),
    "layer2_pf": dict(kind="layer", programs=264, peel=0, pf=-1),
    "call1_pf": dict(kind="call", programs=132, peel=0, pf=-1),
    "call2_pf": dict(kind="call", programs=264, peel=0, pf=-1),
    "call2": dict(kind="call", programs=264),
    # the launch arm's tiles swept: K tiles of 512, wider blocks, 5 stages, 8 warps
    "launch_k512": dict(kind="launch", tiles={n: (t[0], 512, t[2], 2) for n, t in TILES.items()}),
    "launch_wide": dict(
        kind="launch",
        tiles={"qkv": (128, 256, 4, 3), "gate_up": (64, 128, 4, 3), "o": (32, 256, 4, 4), "down": (32, 256, 4, 4)},
    ),
    "launch_s5": dict(kind="launch", tiles={n: (*t[:3], 5) for n, t in TILES.items()}),
    "launch_w8": dict(kind="launch", tiles={n: (t[0], t[1], 8, t[3]) for n, t in TILES.items()}),
    "launch_narrow": dict(kind="launch", tiles={"qkv": (32, 256, 4, 3), "gate_up": (16, 256, 4, 3)}),
}


def parse_tiles(spec: str) -> dict:
    """'qkv=64,256,4,3;o=...' over TILES."""
    tiles = dict(TILES)
    for part in filter(None, spec.split(";")):
        name, vals = part.split("=")
        tiles[name] = tuple(int(v) for v in vals.split(","))
    return tiles


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="2")
    ap.add_argument("--arms", default="launch,layer1,layer2,call1")
    ap.add_argument("--tiles", default="", help="overrides, 'qkv=BN,BK,warps,stages;...'")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--check", action="store_true", help="a small shape's values only (CPU interpreter)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if triton is None:
        sys.exit("gpu_layer_probe: Triton is not installed (its kernels are Triton kernels)")
    tiles = parse_tiles(a.tiles)
    if a.check:  # small shape, one program per persistent launch (the interpreter runs programs in turn)
        p = Probe(64, 192, 128, 2, torch.device("cpu"))
        tiles = {n: (16, 32, 1, 1) for n in TILES}
        arms = {
            "launch": dict(kind="launch"),
            "launch_nopeel": dict(kind="launch", peel=0),
            "launch_ca": dict(kind="launch", cg=False),
            "launch_pk": dict(kind="launch", tiles={n: (16, 32, 1, 1, 64) for n in TILES}),
            "layer": dict(kind="layer", programs=1),
            "layer_nopeel": dict(kind="layer", programs=1, peel=0),
            "layer_pf": dict(kind="layer", programs=1, peel=0, pf=-1),
            "call": dict(kind="call", programs=1),
        }
        rep = {M: check(p, arms, tiles, M) for M in (1, 3)}
        print(json.dumps(rep, indent=1))
        bad = [
            (M, n)
            for M, r in rep.items()
            for n, v in r.items()
            if not v["bitwise_vs_first"] or v["rel_vs_torch"] > 1e-5
        ]
        sys.exit(1 if bad else 0)
    dev = torch.device("cuda")
    p = Probe(2048, 6144, 5632, a.layers, dev)
    bw = copy_bw(dev)
    floor_us = p.weight_bytes / bw * 1e6
    arms = {n: ARMS[n] for n in a.arms.split(",")}
    out = dict(
        tiles=tiles,
        arms=arms,
        copy_TBps=bw / 1e12,
        weight_bytes_per_layer=p.weight_bytes,
        floor_us_per_layer=floor_us,
        rows={},
    )
    print(f"copy {bw / 1e12:.2f} TB/s (read + write); weight floor {floor_us:.2f} us per layer", flush=True)
    for name in list(arms):  # an arm that does not compile (shared memory, say) is reported and left out
        try:
            call(p, arms[name], tiles, p.buffers(2), 2)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            print(f"arm {name} left out: {type(e).__name__}: {str(e)[:200]}", flush=True)
            out.setdefault("left_out", {})[name] = str(e)[:500]
            del arms[name]
    for M in (int(r) for r in a.rows.split(",")):
        chk = check(p, arms, tiles, M)
        t = time_arms(p, arms, tiles, M, a.reps, a.rounds)
        out["rows"][M] = dict(check=chk, **t)
        for n in arms:
            c, (lo, med, hi) = chk.get(n, {}), t["ratio_vs_first"][n]
            print(
                f"M={M} {n:14s} {t['us_per_layer'][n]:7.2f} us/layer ({t['us_per_layer'][n] / floor_us:.2f}x floor) "
                f"ratio {med:.3f} [{lo:.3f}, {hi:.3f}] rel {c.get('rel_vs_torch', float('nan')):.1e} "
                f"same {c.get('bitwise_vs_first')} timeout {t['timeouts'][n] or c.get('barrier_timeout')}",
                flush=True,
            )
        if a.json:
            json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
