"""The small-M GEMV path (kernels/gemv.py, 2..16 rows, tensor-core products) at the ouro-1.4b
shape on the GPU: correctness of each kernel against torch, a tile sweep at M = 16, then
c(M) with the small-M path (gemv_max_rows=16) against cuBLAS + compiled blocks, and the
weight-streaming floor. One device call; results in $OUT/small_m.json and best tiles in
$OUT/small_m_tiles.json (a LOOPSPEC_GEMV_CONFIG file).
    PYTHONPATH=. python scripts/gpu_small_m.py"""
import json
import os
import time

import torch

import kernels.model as km
from kernels import bench, bench_rounds, gemv as G
from kernels.kvplanes import KVPlanes
from kernels.options import KernelOptions
from kernels.weights import TorchWeights
from oracle.config import preset
from oracle.model import weight_shapes

OUT = os.environ.get("OUT", ".")
DEV, CFG = torch.device("cuda"), preset("ouro-1.4b")
H, I, NH, NKV, HD, EPS = (CFG.hidden_size, CFG.intermediate_size, CFG.num_heads, CFG.num_kv_heads,
                          CFG.head_dim, CFG.rms_norm_eps)
CONFIGS = [(16, 256, 4, 3), (32, 128, 4, 3), (32, 256, 4, 3), (64, 128, 4, 3), (64, 64, 4, 4), (32, 512, 8, 2),
           (16, 512, 4, 2), (128, 64, 8, 3)]
t0 = time.time()
res = {"configs": {}, "check": {}}


def save():
    json.dump(res, open(os.path.join(OUT, "small_m.json"), "w"), indent=1)


w = TorchWeights.random(CFG, DEV, torch.bfloat16, 0)
kv = KVPlanes(CFG, 1, 17, 257, DEV, torch.bfloat16)
model = km.PackedModel(w, kv, KernelOptions(gemv=True, gemv_max_rows=16))
Ls = w.layers
g = torch.Generator(device=DEV).manual_seed(0)
M = 16
x_h, y_h = (torch.randn(M, H, generator=g, device=DEV).bfloat16() for _ in range(2))
x_i = torch.randn(M, I, generator=g, device=DEV).bfloat16()
pos, plane = torch.full((M,), 256, device=DEV), torch.arange(M, device=DEV)
# correctness at the real shape (M = 2, 5, 16) against torch products
for m in (2, 5, 16):
    a, b = G.gemv(x_h[:m], Ls[0].o, "o"), x_h[:m] @ Ls[0].o.T
    c, d = G.gemv(x_i[:m], Ls[0].down, "down"), x_i[:m] @ Ls[0].down.T
    res["check"][m] = [((a.float() - b.float()).norm() / b.float().norm()).item(),
                       ((c.float() - d.float()).norm() / d.float().norm()).item()]
print("check o/down rel err", res["check"], f"{time.time() - t0:.0f} s", flush=True)
ours = {
    "qkv": lambda t: [G.qkv_rope_kv(x_h, y_h, L.n_mlp_out, L.n_in, L.qkv, model.cos, model.sin, kv.k[l], kv.v[l],
                                    plane, pos, NH, NKV, HD, EPS, t) for l, L in enumerate(Ls)],
    "o": lambda t: [G.gemv(x_h, L.o, "o", t) for L in Ls],
    "gate_up": lambda t: [G.gate_up_silu(x_h, y_h, L.n_attn_out, L.n_post, L.gate_up, EPS, t) for L in Ls],
    "down": lambda t: [G.gemv(x_i, L.down, "down", t) for L in Ls],
}
cublas = {"qkv": lambda: [x_h @ L.qkv.T for L in Ls], "o": lambda: [x_h @ L.o.T for L in Ls],
          "gate_up": lambda: [x_h @ L.gate_up.T for L in Ls], "down": lambda: [x_i @ L.down.T for L in Ls]}
best = {}
for name, fn in ours.items():
    nbytes = getattr(Ls[0], name).numel() * 2
    r = {"cublas_us": round(bench.graph_replay_ms(cublas[name], 20, len(Ls)) * 1e3, 2)}
    for cfg in CONFIGS:
        try:
            us = bench.graph_replay_ms(lambda: fn({f"{name}/16": cfg}), 20, len(Ls)) * 1e3
            r[str(cfg)] = {"us": round(us, 2), "GBps": round(nbytes / us / 1e3, 1)}
        except Exception as e:
            r[str(cfg)] = repr(e)[:200]
    ok = {k: v for k, v in r.items() if isinstance(v, dict)}
    best[name] = min(ok, key=lambda k: ok[k]["us"]) if ok else None
    res["configs"][name] = r
    print(name, "M=16 best", best[name], ok.get(best[name]), "cublas", r["cublas_us"], f"{time.time() - t0:.0f} s",
          flush=True)
    save()
tiles = {f"{n}/16": list(eval(c)) for n, c in best.items() if c}
json.dump(tiles, open(os.path.join(OUT, "small_m_tiles.json"), "w"))
del w, kv, model
torch.cuda.empty_cache()
lin = [n for n in weight_shapes(CFG) if n.startswith("model.layers.") and n.endswith("proj.weight")]
wbytes = 2 * sum(int(torch.tensor(weight_shapes(CFG)[n]).prod()) for n in lin)
res["floor_ms"] = wbytes / bench_rounds.copy_bandwidth("cuda") * 1e3
small = bench.measure_c_table("ouro-1.4b", [1, 2, 4, 8, 16], 256, device="cuda", repeats=50,
                              kernel_options=KernelOptions(gemv_max_rows=16, gemv_config=tiles))
res["c_small_m"] = small["c_ms"]
res["path_small_m"] = small["path"]
print("c(M), small-M path:", small["c_ms"], f"{time.time() - t0:.0f} s", flush=True)
save()
base = bench.measure_c_table("ouro-1.4b", [2, 4, 8, 16, 32, 64, 128, 320], 256, device="cuda", repeats=30,
                             kernel_options=KernelOptions(gemv_max_rows=1))
res["c_cublas"] = base["c_ms"]
res["path_cublas"] = base["path"]
print("c(M), cuBLAS + compiled:", base["c_ms"], "floor", round(res["floor_ms"], 4), f"{time.time() - t0:.0f} s",
      flush=True)
save()
