"""The small-M GEMV path (kernels/gemv.py) at the ouro-1.4b shape, one device call:
(a) each kernel alone under CUDA graphs vs cuBLAS `x @ W.T` (GB/s of weight streamed),
    with a small sweep of tile configs at M=1 and M=4;
(b) the gemv-path recurrent_call against the existing paths (and an FP32 one);
(c) c(M) with gemv on and off (kernels.bench.measure_c_table).
    PYTHONPATH=. python scripts/gpu_gemv_probe.py        -> $OUT/gemv_probe.json"""
import json
import os
import time

import torch

import kernels.model as km
from kernels import bench, gemv as G
from kernels.kvplanes import KVPlanes
from kernels.options import KernelOptions
from kernels.weights import TorchWeights
from oracle.config import preset

DEV = torch.device("cuda")
CFG = preset("ouro-1.4b")
H, I, NH, NKV, HD, EPS = (CFG.hidden_size, CFG.intermediate_size, CFG.num_heads, CFG.num_kv_heads,
                          CFG.head_dim, CFG.rms_norm_eps)
SWEEP = [(4, 512, 4), (8, 256, 4), (8, 512, 4), (16, 256, 4), (16, 128, 8)]  # BLOCK_N, BLOCK_K, warps
out = {"device": torch.cuda.get_device_name(DEV), "torch": torch.__version__}
t_start = time.time()


# ---- (a) kernels alone: one launch per layer's weight (24 different matrices, so not from L2)
w = TorchWeights.random(CFG, DEV, torch.bfloat16, 0)
kv = KVPlanes(CFG, 1, 4, 257, DEV, torch.bfloat16)
model = km.PackedModel(w, kv, KernelOptions(gemv=True))
Ls = w.layers
kern = {}
for M in (1, 2, 4):
    g = torch.Generator(device=DEV).manual_seed(M)
    x_h, y_h = (torch.randn(M, H, generator=g, device=DEV).bfloat16() for _ in range(2))
    x_i = torch.randn(M, I, generator=g, device=DEV).bfloat16()
    pos = torch.full((M,), 256, device=DEV)
    plane = torch.arange(M, device=DEV)
    ours = {                                       # t: the tile overrides (KernelOptions.gemv_config)
        "qkv": lambda t: [G.qkv_rope_kv(x_h, y_h, L.n_mlp_out, L.n_in, L.qkv, model.cos, model.sin, kv.k[l], kv.v[l],
                                        plane, pos, NH, NKV, HD, EPS, t) for l, L in enumerate(Ls)],
        "o": lambda t: [G.gemv(x_h, L.o, "o", t) for L in Ls],
        "gate_up": lambda t: [G.gate_up_silu(x_h, y_h, L.n_attn_out, L.n_post, L.gate_up, EPS, t) for L in Ls],
        "down": lambda t: [G.gemv(x_i, L.down, "down", t) for L in Ls],
    }
    cublas = {"qkv": lambda: [x_h @ L.qkv.T for L in Ls], "o": lambda: [x_h @ L.o.T for L in Ls],
              "gate_up": lambda: [x_h @ L.gate_up.T for L in Ls], "down": lambda: [x_i @ L.down.T for L in Ls]}
    for name in ours:
        nbytes = getattr(Ls[0], name).numel() * 2
        gbs = lambda ms: round(nbytes / ms / 1e6, 1)
        t_cub = bench.graph_replay_ms(cublas[name], 20, len(Ls))
        res = {"cublas_us": round(t_cub * 1e3, 2), "cublas_GBps": gbs(t_cub)}
        configs = [None] + (SWEEP if M in (1, 4) else [])
        for cfg in configs:
            tiles = {} if cfg is None else {name: cfg}
            try:
                t = bench.graph_replay_ms(lambda: ours[name](tiles), 20, len(Ls))
                key = "default" + str(G._config(name, M)[1:]) if cfg is None else str(cfg)
                res[key] = {"us": round(t * 1e3, 2), "GBps": gbs(t)}
            except Exception as e:                     # e.g. out of resources for a big tile
                res[str(cfg)] = repr(e)[:200]
        kern[f"{name} M={M}"] = res
        print(name, M, res, flush=True)
out["kernels"] = kern
out["kernel_seconds"] = round(time.time() - t_start, 1)

# ---- (b) agreement of one call: gemv vs compiled (default) path, eager torch path and FP32
w32 = TorchWeights.random(CFG, DEV, torch.float32, 0)          # same values before the BF16 cast
agree = {}
for M in (1, 2, 4):
    g = torch.Generator(device=DEV).manual_seed(10 + M)
    h = torch.randn(M, H, generator=g, device=DEV).bfloat16()
    pos = torch.tensor([40, 257 - 1, 100, 7][:M], device=DEV)
    plane = torch.tensor([0, 3, 1, 2][:M], device=DEV)
    res = {}
    for name, ww, kw in (("gemv", w, dict(gemv=True)), ("compiled", w, dict(gemv=False)),
                         ("eager", w, dict(gemv=False, fuse=False, triton_attn=False)),
                         ("fp32", w32, dict(gemv=False, fuse=False, triton_attn=False))):
        kvm = KVPlanes(CFG, 1, 4, 257, DEV, ww.dtype)
        gk = torch.Generator(device=DEV).manual_seed(1)                # same earlier keys for every path
        kvm.k.copy_(torch.randn(kvm.k.shape, generator=gk, device=DEV).bfloat16())
        kvm.v.copy_(torch.randn(kvm.v.shape, generator=gk, device=DEV).bfloat16())
        m = km.PackedModel(ww, kvm, KernelOptions(**kw))
        res[name] = (m.recurrent_call(h.to(ww.dtype), pos, plane, torch.arange(M, device=DEV), plane, 1).float(),
                     kvm.k[:, plane, pos].float())                             # [L, M, nkv, hd] written
    ref_out = res["gemv"][0]
    for name in ("compiled", "eager", "fp32"):
        o, k = res[name]
        agree[f"M={M} gemv vs {name}"] = {
            "rel_err": ((ref_out - o).norm() / o.norm()).item(),
            "max_rel_err": ((ref_out - o).abs().max() / o.abs().max()).item(),
            "kv_rel_err": ((res["gemv"][1] - k).norm() / k.norm()).item()}
    for name in ("compiled", "eager"):
        o = res[name][0]
        agree[f"M={M} {name} vs fp32"] = {"rel_err": ((o - res["fp32"][0]).norm() / res["fp32"][0].norm()).item()}
    print(M, {k: v for k, v in agree.items() if k.startswith(f"M={M}")}, flush=True)
out["agreement"] = agree
del w32, res
torch.cuda.empty_cache()

# ---- (c) c(M) with the gemv path on and off
w = kv = model = None                                   # free the weights for (c)
torch.cuda.empty_cache()
for on in (True, False):
    t0 = time.time()
    ct = bench.measure_c_table("ouro-1.4b", [1, 2, 4], 256, device="cuda", repeats=50,
                               kernel_options=KernelOptions(gemv=None if on else False))
    out[f"c_ms gemv={on}"] = {"c_ms": ct["c_ms"], "seconds": round(time.time() - t0, 1)}
    print(on, out[f"c_ms gemv={on}"], flush=True)
out["floor_ms"] = round(CFG.num_layers * ((NH + 2 * NKV) * HD * H + H * NH * HD + 3 * I * H) * 2 / 4.25e9, 4)  # 4.25 TB/s
out["total_seconds"] = round(time.time() - t_start, 1)
print(json.dumps(out, indent=1))
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "gemv_probe.json"), "w"), indent=1)
