"""The GEMV paths (kernels/gemv.py) at the ouro-1.4b shape on the GPU, one device call:
  1. correctness: small-M products against torch (M = 2, 5, 16); whole recurrent calls with
     programmatic dependent launch (PDL) against the same calls without it, eager and graph
     replay, bit for bit (M = 1, 4, 16);
  2. c(1) and c(16) with PDL off and on;
  3. a tile sweep of the small-M kernels at M = 16 (PDL on);
  4. c(M) for M = 1..16 with the best tiles (gemv_max_rows=16), and cuBLAS + compiled blocks
     for M = 2..320; the weight-streaming floor.
Results in $OUT/small_m.json; best tiles in $OUT/small_m_tiles.json (a LOOPSPEC_GEMV_CONFIG file).
    PYTHONPATH=. python scripts/gpu_small_m.py [--quick]"""
import argparse
import json
import os
import sys
import time

import torch

import kernels.model as km
from kernels import bench, bench_rounds, gemv as G
from kernels.kvplanes import KVPlanes
from kernels.options import KernelOptions
from kernels.weights import TorchWeights
from oracle.config import preset
from oracle.model import weight_shapes

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--quick", action="store_true", help="fewer tiles and repeats")
ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for small_m*.json (default: $OUT or .)")
ARGS = ap.parse_args()
OUT, QUICK = ARGS.out, ARGS.quick
DEV, CFG = torch.device("cuda"), preset("ouro-1.4b")
H, I, NH, NKV, HD, EPS = (CFG.hidden_size, CFG.intermediate_size, CFG.num_heads, CFG.num_kv_heads,
                          CFG.head_dim, CFG.rms_norm_eps)
CONFIGS = [(16, 128, 4, 4), (16, 256, 4, 3), (16, 256, 4, 4), (16, 512, 4, 2), (32, 128, 4, 4), (32, 256, 4, 3),
           (32, 256, 8, 3), (64, 128, 4, 3), (64, 256, 8, 3), (16, 256, 2, 4)]
if QUICK:
    CONFIGS = CONFIGS[:3]
t0 = time.time()
res = {"configs": {}, "check": {}, "pdl": {}}


def save():
    json.dump(res, open(os.path.join(OUT, "small_m.json"), "w"), indent=1)


def log(*a):
    print(*a, f"[{time.time() - t0:.0f} s]", flush=True)


w = TorchWeights.random(CFG, DEV, torch.bfloat16, 0)
kv = KVPlanes(CFG, 1, 17, 257, DEV, torch.bfloat16)
Ls = w.layers
g = torch.Generator(device=DEV).manual_seed(0)
M = 16
x_h, y_h = (torch.randn(M, H, generator=g, device=DEV).bfloat16() for _ in range(2))
x_i = torch.randn(M, I, generator=g, device=DEV).bfloat16()
pos, plane = torch.full((M,), 256, device=DEV), torch.arange(M, device=DEV)

# 1. correctness
for m in (2, 5, 16):
    a, b = G.gemv(x_h[:m], Ls[0].o, "o"), x_h[:m] @ Ls[0].o.T
    c, d = G.gemv(x_i[:m], Ls[0].down, "down"), x_i[:m] @ Ls[0].down.T
    res["check"][m] = [((a.float() - b.float()).norm() / b.float().norm()).item(),
                       ((c.float() - d.float()).norm() / d.float().norm()).item()]
log("check o/down rel err vs torch", res["check"])
models = {p: km.PackedModel(w, kv, KernelOptions(gemv=True, gemv_max_rows=16, pdl=p)) for p in (False, True)}
same = {}
for m in (1, 4, 16):
    h = x_h[:m].clone()
    outs = {}
    for p, model in models.items():
        step = lambda: model.recurrent_call(h, pos[:m], plane[:m], plane[:m], plane[:m], 1)   # noqa: E731
        eager = step().clone()
        graph = bench.capture_graph(lambda: outs.__setitem__(("graph", p), step()), DEV)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        outs[("eager", p)] = eager
    ref = outs[("eager", False)]
    same[m] = {f"{k}-pdl={p}": bool(torch.equal(v, ref)) for (k, p), v in outs.items()}
res["check"]["pdl_bitwise_equal"] = same
log("PDL on/off, eager/graph, bitwise equal:", same)
save()

# 2. c(1), c(16) with PDL off and on
for p in (False, True):
    ct = bench.measure_c_table("ouro-1.4b", [1, 16], 256, device="cuda", repeats=50,
                               kernel_options=KernelOptions(gemv_max_rows=16, pdl=p))
    res["pdl"][str(p)] = ct["c_ms"]
    log("pdl", p, "c(M)", ct["c_ms"])
save()

# 3. tile sweep at M = 16 (PDL on)
ours = {
    "qkv": lambda t: [G.qkv_rope_kv(x_h, y_h, L.n_mlp_out, L.n_in, L.qkv, models[True].cos, models[True].sin,
                                    kv.k[l], kv.v[l], plane, pos, NH, NKV, HD, EPS, t, True) for l, L in enumerate(Ls)],
    "o": lambda t: [G.gemv(x_h, L.o, "o", t, True) for L in Ls],
    "gate_up": lambda t: [G.gate_up_silu(x_h, y_h, L.n_attn_out, L.n_post, L.gate_up, EPS, t, True) for L in Ls],
    "down": lambda t: [G.gemv(x_i, L.down, "down", t, True) for L in Ls],
}
cublas = {"qkv": lambda: [x_h @ L.qkv.T for L in Ls], "o": lambda: [x_h @ L.o.T for L in Ls],
          "gate_up": lambda: [x_h @ L.gate_up.T for L in Ls], "down": lambda: [x_i @ L.down.T for L in Ls]}
best = {}
for name, fn in ours.items():
    nbytes = getattr(Ls[0], name).numel() * 2
    r = {"cublas_us": round(bench.graph_replay_ms(cublas[name], 20, len(Ls)) * 1e3, 2),
         "floor_us": round(nbytes / bench_rounds.copy_bandwidth("cuda") * 1e6, 2)}
    for cfg in CONFIGS:
        try:
            us = bench.graph_replay_ms(lambda: fn({f"{name}/16": cfg}), 20, len(Ls)) * 1e3
            r[str(cfg)] = {"us": round(us, 2), "GBps": round(nbytes / us / 1e3, 1)}
        except Exception as e:
            r[str(cfg)] = repr(e)[:200]
    ok = {k: v for k, v in r.items() if isinstance(v, dict)}
    best[name] = min(ok, key=lambda k: ok[k]["us"]) if ok else None
    res["configs"][name] = r
    log(name, "M=16 best", best[name], ok.get(best[name]), "cublas", r["cublas_us"], "floor", r["floor_us"])
    save()
tiles = {f"{n}/16": list(eval(c)) for n, c in best.items() if c}
res["best_tiles"] = tiles
json.dump(tiles, open(os.path.join(OUT, "small_m_tiles.json"), "w"))
del models
torch.cuda.empty_cache()

# 4. c(M) on both paths, and the floor
lin = [n for n in weight_shapes(CFG) if n.startswith("model.layers.") and n.endswith("proj.weight")]
wbytes = 2 * sum(int(torch.tensor(weight_shapes(CFG)[n]).prod()) for n in lin)
res["floor_ms"] = wbytes / bench_rounds.copy_bandwidth("cuda") * 1e3
small = bench.measure_c_table("ouro-1.4b", [1, 2, 4, 8, 16], 256, device="cuda", repeats=50,
                              kernel_options=KernelOptions(gemv_max_rows=16, gemv_config=tiles))
res["c_small_m"], res["path_small_m"] = small["c_ms"], small["path"]
log("c(M), small-M path:", small["c_ms"])
save()
base = bench.measure_c_table("ouro-1.4b", [2, 4, 8, 16, 32, 64, 128, 320], 256, device="cuda", repeats=30,
                             kernel_options=KernelOptions(gemv_max_rows=1))
res["c_cublas"], res["path_cublas"] = base["c_ms"], base["path"]
log("c(M), cuBLAS + compiled:", base["c_ms"], "floor", round(res["floor_ms"], 4))
save()
