"""Does a persistent kernel pay at M = 1? (issue 14, part 1: "if measurement shows it pays, a
whole-layer or whole-loop persistent kernel")

The four weight products of every layer (qkv 6144x2048, o 2048x2048, gate_up 11264x2048,
down 2048x5632; the ouro-1.4b shape, BF16, 24 layers, one row) chained as
x -> qkv -> o (on qkv's first 2048) -> gate_up -> down (on gate_up's first 5632) -> x,
without the norms, RoPE or attention, run two ways:
  * launches: kernels/gemv.py's one-row kernel, four launches per layer (96 per call), PDL
    on and off, in one CUDA graph: what main does for these products;
  * persistent: ONE launch of NPROG programs (k per SM, all resident) that walk the 96
    products in order, a grid barrier (an atomic counter in global memory) between products;
    optionally each program loads its first weight chunk of the next product before the
    barrier (weights never depend on activations), so memory stays busy across it.
Also the barrier alone (96 barriers, no products). Every variant's output is checked
against the launches' (the chain is the same math; FP32 accumulation in another order).
Times: CUDA graph replays, median of REPS, microseconds per call and per layer.

    PYTHONPATH=. python scripts/gpu_persistent_probe.py [--json out.json]
"""
import argparse
import json

import torch
import triton
import triton.language as tl

from kernels import bench, gemv as G

H, NQKV, I, L = 2048, 6144, 5632, 24
BK = 512


@triton.jit
def _grid_sync(Bar, target):
    # every program arrives once; all wait until `target` arrivals (counter never reset in a call)
    tl.debug_barrier()
    tl.atomic_add(Bar, 1, sem="release", scope="gpu")
    while tl.atomic_add(Bar, 0, sem="acquire", scope="gpu") < target:
        pass
    tl.debug_barrier()


@triton.jit
def _w_chunk(W, t, n_tiles, K: tl.constexpr, k0, BN: tl.constexpr, BK: tl.constexpr):
    n = t * BN + tl.arange(0, BN)
    k = k0 + tl.arange(0, BK)
    return tl.load(W + n[:, None].to(tl.int64) * K + k[None, :], mask=(t < n_tiles), other=0.0)


@triton.jit
def _tile(X, W, Out, t, n_tiles, K: tl.constexpr, w0, HAVE_W0: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # Out[t*BN : t*BN+BN] = W[rows] @ X[:K] for one tile; w0: its first K chunk, if already loaded
    acc = tl.zeros([BN], tl.float32)
    k_first = 0
    if HAVE_W0:
        x = tl.load(X + tl.arange(0, BK), cache_modifier=".cg").to(tl.float32)
        acc += tl.sum(w0.to(tl.float32) * x[None, :], 1)
        k_first = BK
    for k0 in range(k_first, K, BK):
        x = tl.load(X + k0 + tl.arange(0, BK), cache_modifier=".cg").to(tl.float32)
        acc += tl.sum(_w_chunk(W, t, n_tiles, K, k0, BN, BK).to(tl.float32) * x[None, :], 1)
    n = t * BN + tl.arange(0, BN)
    tl.store(Out + n, acc.to(Out.dtype.element_ty), mask=(n < n_tiles * BN) & (t < n_tiles))


@triton.jit
def _product(X, W, Out, N: tl.constexpr, K: tl.constexpr, pid, w0, PREFETCH: tl.constexpr, NPROG: tl.constexpr,
             BN: tl.constexpr, BK: tl.constexpr):
    n_tiles: tl.constexpr = N // BN
    _tile(X, W, Out, pid, n_tiles, K, w0, PREFETCH, BN, BK)          # the first tile (w0 loaded early)
    for t in range(pid + NPROG, n_tiles, NPROG):
        _tile(X, W, Out, t, n_tiles, K, w0, False, BN, BK)


@triton.jit
def _first_chunk(W, pid, n_tiles, K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREFETCH: tl.constexpr):
    # a program's first weight chunk of a product, loaded early (PREFETCH) or not at all
    if PREFETCH:
        w = _w_chunk(W, pid, n_tiles, K, 0, BN, BK)
    else:
        w = tl.zeros([BN, BK], W.dtype.element_ty)
    return w


@triton.jit
def _persistent(X, Wq, Wo, Wg, Wd, Q, Y, GU, Bar, NL: tl.constexpr, PREFETCH: tl.constexpr, NPROG: tl.constexpr,
                BQ: tl.constexpr, BO: tl.constexpr, BG: tl.constexpr, BD: tl.constexpr, BK: tl.constexpr,
                BKD: tl.constexpr, HH: tl.constexpr, NQ: tl.constexpr, II: tl.constexpr):
    # BK: K chunk of the products over the hidden size; BKD: of down (K = I)
    pid = tl.program_id(0)
    wq = _first_chunk(Wq, pid, NQ // BQ, HH, BQ, BK, PREFETCH)
    for l in range(NL):
        _product(X, Wq + l * NQ * HH, Q, NQ, HH, pid, wq, PREFETCH, NPROG, BQ, BK)
        wo = _first_chunk(Wo + l * HH * HH, pid, HH // BO, HH, BO, BK, PREFETCH)
        _grid_sync(Bar, (4 * l + 1) * NPROG)
        _product(Q, Wo + l * HH * HH, Y, HH, HH, pid, wo, PREFETCH, NPROG, BO, BK)
        wg = _first_chunk(Wg + l * 2 * II * HH, pid, 2 * II // BG, HH, BG, BK, PREFETCH)
        _grid_sync(Bar, (4 * l + 2) * NPROG)
        _product(Y, Wg + l * 2 * II * HH, GU, 2 * II, HH, pid, wg, PREFETCH, NPROG, BG, BK)
        wd = _first_chunk(Wd + l * HH * II, pid, HH // BD, II, BD, BKD, PREFETCH)
        _grid_sync(Bar, (4 * l + 3) * NPROG)
        _product(GU, Wd + l * HH * II, X, HH, II, pid, wd, PREFETCH, NPROG, BD, BKD)
        if l + 1 < NL:
            wq = _first_chunk(Wq + (l + 1) * NQ * HH, pid, NQ // BQ, HH, BQ, BK, PREFETCH)
        _grid_sync(Bar, (4 * l + 4) * NPROG)


@triton.jit
def _barriers_only(Bar, N_SYNC: tl.constexpr, NPROG: tl.constexpr):
    for i in range(N_SYNC):
        _grid_sync(Bar, (i + 1) * NPROG)


def us_per_replay(fn, reps: int) -> float:
    """Median microseconds of one replay of fn captured in a CUDA graph."""
    return bench.graph_replay_ms(fn, reps) * 1e3


def bn_for(N: int, nprog: int, bk: int) -> int:
    """Largest power-of-two tile height (<= 16, <= 16384 weights per load) that still gives
    every program a tile."""
    bn = min(16, 16384 // bk)
    while bn > 1 and N // bn < nprog:
        bn //= 2
    return bn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    std = 1 / H ** 0.5                                  # keeps the chain's activations O(1)
    Wq = (torch.randn(L, NQKV, H, device=dev) * std).to(dt)
    Wo = (torch.randn(L, H, H, device=dev) * std).to(dt)
    Wg = (torch.randn(L, 2 * I, H, device=dev) * std).to(dt)
    Wd = (torch.randn(L, H, I, device=dev) * (1 / I ** 0.5)).to(dt)
    x0 = torch.randn(1, H, device=dev).to(dt)
    wbytes = sum(w.numel() * 2 for w in (Wq, Wo, Wg, Wd))
    res = {"sms": sms, "weight_bytes": wbytes, "reps": args.reps, "variants": []}

    def launches(pdl):
        def run():
            x = x0
            for l in range(L):
                q = G.gemv(x, Wq[l], "qkv", None, pdl)
                y = G.gemv(q[:, :H], Wo[l], "o", None, pdl)
                gu = G.gemv(y, Wg[l], "gate_up", None, pdl)
                x = G.gemv(gu[:, :I], Wd[l], "down", None, pdl)
            out.copy_(x)
        return run

    out = torch.empty(1, H, device=dev, dtype=dt)
    ref = None
    for pdl in (False, True):
        us = us_per_replay(launches(pdl), args.reps)
        if ref is None:
            ref = out.float().clone()
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        res["variants"].append({"name": f"launches pdl={pdl}", "us": us, "per_layer_us": us / L, "rel_err": err})
        print(f"launches pdl={pdl}: {us:8.1f} us/call  {us / L:6.2f} us/layer  err {err:.2e}", flush=True)

    X = torch.empty(H, device=dev, dtype=dt)
    Q = torch.empty(NQKV, device=dev, dtype=dt)
    Y = torch.empty(H, device=dev, dtype=dt)
    GU = torch.empty(2 * I, device=dev, dtype=dt)
    bar = torch.zeros(1, device=dev, dtype=torch.int32)
    for k in (1, 2, 4):
        nprog = k * sms
        bars_us = us_per_replay(lambda: (bar.zero_(), _barriers_only[(nprog,)](bar, N_SYNC=4 * L, NPROG=nprog,
                                                                             num_warps=4)), args.reps)
        res["variants"].append({"name": f"barriers only, {k}/SM", "us": bars_us, "per_barrier_us": bars_us / (4 * L)})
        print(f"{4 * L} barriers, {nprog} programs: {bars_us:8.1f} us ({bars_us / (4 * L):.2f} us each)", flush=True)
        for prefetch in (False, True):
            for bk, nw in ((512, 4), (2048, 8)):
                bq, bo, bg = (bn_for(n, nprog, bk) for n in (NQKV, H, 2 * I))
                bd = bn_for(H, nprog, BK)

                def run():
                    bar.zero_()
                    X.copy_(x0[0])
                    _persistent[(nprog,)](X, Wq, Wo, Wg, Wd, Q, Y, GU, bar, NL=L, PREFETCH=prefetch, NPROG=nprog,
                                          BQ=bq, BO=bo, BG=bg, BD=bd, BK=bk, BKD=BK, HH=H, NQ=NQKV, II=I,
                                          num_warps=nw)
                us = us_per_replay(run, args.reps)
                err = ((X.float()[None] - ref).abs().max() / ref.abs().max()).item()
                name = f"persistent {k}/SM prefetch={prefetch} BK={bk} warps={nw} BN={bq},{bo},{bg},{bd}"
                res["variants"].append({"name": name, "us": us, "per_layer_us": us / L, "rel_err": err})
                print(f"{name}: {us:8.1f} us/call  {us / L:6.2f} us/layer  err {err:.2e}", flush=True)
    bw = None
    try:
        from kernels.bench_rounds import copy_bandwidth
        bw = copy_bandwidth("cuda")
    except Exception as e:                               # the floor is context, not the result
        print("copy bandwidth not measured:", e)
    if bw:
        res["floor_us"] = wbytes / bw * 1e6
        print(f"floor (weights at copy bandwidth {bw / 1e12:.2f} TB/s): {res['floor_us']:.1f} us/call, "
              f"{res['floor_us'] / L:.2f} us/layer")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
