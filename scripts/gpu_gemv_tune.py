"""Tile configs of the one-row GEMV kernels (kernels/gemv.py) at the ouro-1.4b shape: each
kernel over the 24 layers' weights in a CUDA graph, per config; then c(1) with the best
config of each kernel. One device call.
    PYTHONPATH=. python scripts/gpu_gemv_tune.py        -> $OUT/gemv_tune.json"""
import json
import os

import torch

import kernels.model as km
from kernels import bench, gemv as G
from kernels.kvplanes import KVPlanes
from kernels.options import KernelOptions
from kernels.weights import TorchWeights
from oracle.config import preset

DEV, CFG = torch.device("cuda"), preset("ouro-1.4b")
H, I, NH, NKV, HD, EPS = (CFG.hidden_size, CFG.intermediate_size, CFG.num_heads, CFG.num_kv_heads,
                          CFG.head_dim, CFG.rms_norm_eps)
# (BLOCK_N, BLOCK_K, num_warps, num_stages)
CONFIGS = [(2, 1024, 4, 3), (4, 512, 4, 3), (4, 512, 4, 4), (4, 1024, 4, 3), (4, 1024, 8, 3), (8, 512, 4, 3),
           (8, 512, 4, 4), (8, 512, 8, 3), (8, 1024, 8, 3), (16, 512, 8, 3), (4, 2048, 8, 2), (2, 2048, 4, 2)]


w = TorchWeights.random(CFG, DEV, torch.bfloat16, 0)
kv = KVPlanes(CFG, 1, 1, 257, DEV, torch.bfloat16)
model = km.PackedModel(w, kv, KernelOptions(gemv=True))
Ls = w.layers
g = torch.Generator(device=DEV).manual_seed(0)
x_h, y_h = (torch.randn(1, H, generator=g, device=DEV).bfloat16() for _ in range(2))
x_i = torch.randn(1, I, generator=g, device=DEV).bfloat16()
pos, plane = torch.full((1,), 256, device=DEV), torch.zeros(1, dtype=torch.int64, device=DEV)
ours = {                                           # t: the tile overrides (KernelOptions.gemv_config)
    "qkv": lambda t: [G.qkv_rope_kv(x_h, y_h, L.n_mlp_out, L.n_in, L.qkv, model.cos, model.sin, kv.k[l], kv.v[l],
                                    plane, pos, NH, NKV, HD, EPS, t) for l, L in enumerate(Ls)],
    "o": lambda t: [G.gemv(x_h, L.o, "o", t) for L in Ls],
    "gate_up": lambda t: [G.gate_up_silu(x_h, y_h, L.n_attn_out, L.n_post, L.gate_up, EPS, t) for L in Ls],
    "down": lambda t: [G.gemv(x_i, L.down, "down", t) for L in Ls],
}
out, best = {}, {}
for name, fn in ours.items():
    nbytes = getattr(Ls[0], name).numel() * 2
    res = {}
    for cfg in CONFIGS:
        try:
            us = bench.graph_replay_ms(lambda: fn({name: cfg}), 30, len(Ls)) * 1e3
            res[str(cfg)] = {"us": round(us, 2), "GBps": round(nbytes / us / 1e3, 1)}
        except Exception as e:
            res[str(cfg)] = repr(e)[:160]
    ok = {k: v for k, v in res.items() if isinstance(v, dict)}
    best[name] = min(ok, key=lambda k: ok[k]["us"])
    out[name] = res
    print(name, "best", best[name], ok[best[name]], flush=True)
out["best"] = best
del w, kv, model
torch.cuda.empty_cache()
tuned = KernelOptions(gemv_config={name: eval(cfg) for name, cfg in best.items()})
out["c1_best_ms"] = bench.measure_c_table("ouro-1.4b", [1], 256, device="cuda", repeats=100,
                                          kernel_options=tuned)["c_ms"]["1"]
out["c1_default_ms"] = bench.measure_c_table("ouro-1.4b", [1], 256, device="cuda", repeats=100,
                                             kernel_options=KernelOptions())["c_ms"]["1"]
print(json.dumps({k: out[k] for k in ("best", "c1_best_ms", "c1_default_ms")}))
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "gemv_tune.json"), "w"), indent=1)
json.dump({k: list(eval(v)) for k, v in best.items()}, open(os.path.join(os.environ.get("OUT", "."), "gemv_best.json"), "w"))
