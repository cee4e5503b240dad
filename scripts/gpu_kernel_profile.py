"""Where a GEMV-path call goes, kernel by kernel (ouro-1.4b shape, BF16, H200): each kernel
of kernels/gemv.py and kernels/triton_attention.py launched once per layer (24 launches
captured in one CUDA graph), microseconds per launch against its weight-streaming floor
(its weight bytes at the measured copy bandwidth), for M rows, with and without
programmatic dependent launch (PDL). One device call; $OUT/kernel_profile.json.
    PYTHONPATH=. python scripts/gpu_kernel_profile.py [--rows 1,16] [--tiles FILE] [--old MODULE]
--old MODULE: also time a module with the same kernels (e.g. an earlier kernels/gemv.py)."""
import argparse
import importlib
import json
import os
import time

import torch

from kernels import bench, bench_rounds, gemv as G, triton_attention as TA
from kernels.kvplanes import KVPlanes
from kernels.weights import TorchWeights
from oracle.config import preset

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--rows", default="1,16")
ap.add_argument("--tiles", default=None, help="a LOOPSPEC_GEMV_CONFIG file")
ap.add_argument("--old", default=None)
ap.add_argument("--sweep", action="store_true", help="also sweep tiles (with and without peel) at M = 1 and 16, "
                "and the attention's keys per program")
ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for kernel_profile.json (default: $OUT or .)")
args = ap.parse_args()
OUT = args.out
DEV, CFG = torch.device("cuda"), preset("ouro-1.4b")
H, I, NH, NKV, HD, EPS = (CFG.hidden_size, CFG.intermediate_size, CFG.num_heads, CFG.num_kv_heads,
                          CFG.head_dim, CFG.rms_norm_eps)
tiles = json.load(open(args.tiles)) if args.tiles else {}
t0 = time.time()
w = TorchWeights.random(CFG, DEV, torch.bfloat16, 0)
kv = KVPlanes(CFG, 1, 17, 257, DEV, torch.bfloat16)
Ls = w.layers
cos, sin = w.rope_table(kv.max_len)
bw = bench_rounds.copy_bandwidth("cuda")
g = torch.Generator(device=DEV).manual_seed(0)
res = {"copy_bandwidth": bw, "rows": {}}


def kernels(mod, M, pdl, t):
    x_h, y_h = (torch.randn(M, H, generator=g, device=DEV).bfloat16() for _ in range(2))
    x_i = torch.randn(M, I, generator=g, device=DEV).bfloat16()
    q = torch.randn(M, NH, HD, generator=g, device=DEV).bfloat16()
    pos, plane = torch.full((M,), 256, device=DEV), torch.arange(M, device=DEV)
    kw = {"pdl": pdl} if pdl is not None else {}
    return {
        "qkv": (lambda: [mod.qkv_rope_kv(x_h, y_h, L.n_mlp_out, L.n_in, L.qkv, cos, sin, kv.k[l], kv.v[l], plane, pos,
                                         NH, NKV, HD, EPS, t, **kw) for l, L in enumerate(Ls)], Ls[0].qkv),
        "attention": (lambda: [TA.decode_attention(q, kv, l, plane, pos, **kw) for l in range(len(Ls))], None),
        "o": (lambda: [mod.gemv(x_h, L.o, "o", t, **kw) for L in Ls], Ls[0].o),
        "gate_up": (lambda: [mod.gate_up_silu(x_h, y_h, L.n_attn_out, L.n_post, L.gate_up, EPS, t, **kw) for L in Ls],
                    Ls[0].gate_up),
        "down": (lambda: [mod.gemv(x_i, L.down, "down", t, **kw) for L in Ls], Ls[0].down),
        "final_norm": (lambda: [mod.residual_norm(x_h, y_h, Ls[0].n_mlp_out, w.norm, EPS, **kw) for _ in Ls], None),
    }


def profile(label, mod, M, pdl, t):
    out = {}
    for name, (fn, weight) in kernels(mod, M, pdl, t).items():
        us = bench.graph_replay_ms(fn, 20, len(Ls)) * 1e3
        floor = weight.numel() * weight.element_size() / bw * 1e6 if weight is not None else None
        out[name] = {"us": round(us, 2), "floor_us": round(floor, 2) if floor else None,
                     "x_floor": round(us / floor, 2) if floor else None}
    out["per_layer_us"] = round(sum(v["us"] for k, v in out.items() if k != "final_norm"), 2)
    res["rows"].setdefault(str(M), {})[label] = out
    print(f"M={M} {label}: " + ", ".join(f"{k} {v['us']}" for k, v in out.items() if isinstance(v, dict))
          + f"; per layer {out['per_layer_us']} us [{time.time() - t0:.0f} s]", flush=True)


for M in map(int, args.rows.split(",")):
    for pdl in (False, True):
        profile(f"pdl={pdl}", G, M, pdl, tiles)
    if args.old:
        profile("old", importlib.import_module(args.old), M, None, tiles)
    json.dump(res, open(os.path.join(OUT, "kernel_profile.json"), "w"), indent=1)

# tile sweeps under PDL: (M, kernel) -> configs (BLOCK_N, BLOCK_K, num_warps, num_stages, peel)
SWEEP = {
    (1, "qkv"): [(4, 2048, 8, 2, p) for p in (0, 1)] + [(2, 2048, 4, 2, 1), (8, 1024, 8, 3, 1), (4, 1024, 4, 3, 1)],
    (1, "o"): [(2, 2048, 4, 2, p) for p in (0, 1)] + [(1, 2048, 4, 2, 1), (4, 2048, 8, 2, 1), (2, 1024, 4, 3, 1)],
    (1, "gate_up"): [(16, 512, 8, 3, p) for p in (0, 1)] + [(4, 2048, 8, 2, 1), (4, 2048, 8, 2, 0), (8, 1024, 8, 3, 1),
                                                           (2, 2048, 4, 2, 1), (8, 512, 4, 3, 0)],
    (1, "down"): [(2, 2048, 4, 2, p) for p in (0, 1)] + [(1, 2048, 4, 2, 1), (4, 2048, 8, 2, 1), (2, 1024, 4, 3, 1)],
    (16, "qkv"): [(32, 256, 4, 3, p) for p in (0, 1)] + [(32, 128, 4, 4, 1), (32, 256, 4, 4, 1), (64, 128, 4, 4, 1)],
    (16, "o"): [(16, 256, 4, 4, p) for p in (0, 1)] + [(16, 256, 2, 4, 1), (16, 128, 4, 4, 1)],
    (16, "gate_up"): [(32, 128, 4, 4, p) for p in (0, 1)] + [(32, 256, 4, 3, 1), (64, 128, 4, 4, 1), (16, 128, 4, 4, 1)],
    (16, "down"): [(16, 256, 2, 4, p) for p in (0, 1)] + [(16, 256, 4, 4, 1), (16, 512, 2, 3, 1), (32, 256, 4, 4, 1)],
}
if args.sweep:
    sweep = res["sweep"] = {}
    chunk0, warps0 = TA.CHUNK, TA.CHUNK_WARPS
    for (M, name), configs in SWEEP.items():
        key = name if M == 1 else f"{name}/16"
        for c in configs:
            fn, weight = kernels(G, M, True, {**tiles, key: c})[name]
            try:
                sweep[f"M={M} {name} {c}"] = round(bench.graph_replay_ms(fn, 20, len(Ls)) * 1e3, 2)
            except Exception as e:
                sweep[f"M={M} {name} {c}"] = repr(e)[:160]
        print(f"M={M}", name, {k.split(" ", 2)[2]: v for k, v in sweep.items() if k.startswith(f"M={M} {name} ")},
              f"[{time.time() - t0:.0f} s]", flush=True)
        json.dump(res, open(os.path.join(OUT, "kernel_profile.json"), "w"), indent=1)
    for M in (1, 16):                     # attention: keys per program x warps
        for chunk, warps in ((64, 4), (32, 4), (128, 4), (64, 8), (128, 8), (32, 2), (16, 2)):
            TA.CHUNK, TA.CHUNK_WARPS = chunk, (warps, warps)
            fn, _ = kernels(G, M, True, tiles)["attention"]
            sweep[f"M={M} attention {(chunk, warps)}"] = round(bench.graph_replay_ms(fn, 20, len(Ls)) * 1e3, 2)
        print(f"M={M} attention", {k: v for k, v in sweep.items() if k.startswith(f"M={M} attention")}, flush=True)
    TA.CHUNK, TA.CHUNK_WARPS = chunk0, warps0
    json.dump(res, open(os.path.join(OUT, "kernel_profile.json"), "w"), indent=1)
