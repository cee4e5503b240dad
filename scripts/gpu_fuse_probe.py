"""c(M) of the packed recurrent call at the ouro-1.4b shape for the attention and fusion
variants, and the variants' agreement on one call; one device call.
    PYTHONPATH=. python scripts/gpu_fuse_probe.py"""
import json
import os
import time

import torch

import kernels.model as km
from kernels import bench
from kernels.bench_rounds import random_weights
from kernels.kvplanes import KVPlanes
from kernels.options import KernelOptions
from oracle.config import preset

out = {}
rows = [1, 4, 16, 64, 160, 320, 640]
for fuse, tri in ((False, True), (True, True), (True, False)):
    t0 = time.time()
    ct = bench.measure_c_table("ouro-1.4b", rows if tri else rows[:4], 256, device="cuda", repeats=50,
                               kernel_options=KernelOptions(fuse=fuse, triton_attn=tri))
    out[f"fuse={fuse},triton_attn={tri}"] = {"c_ms": ct["c_ms"], "seconds": round(time.time() - t0, 1)}
    print(fuse, tri, out[f"fuse={fuse},triton_attn={tri}"], flush=True)
w = random_weights("ouro-1.4b", "cuda")
res = {}
M = 24
g = torch.Generator(device="cuda").manual_seed(0)
h = torch.randn(M, 2048, device="cuda", generator=g).to(w.dtype)
plane = torch.arange(M, device="cuda") % 6                     # 6 planes, 4 rows each
pos = torch.arange(M, device="cuda") // 6 + 40
for fuse, tri in ((False, False), (False, True), (True, True)):
    kv = KVPlanes(preset("ouro-1.4b"), 1, 8, 64, torch.device("cuda"), w.dtype)
    gk = torch.Generator(device="cuda").manual_seed(1)         # same KV content for every variant
    kv.k.normal_(generator=gk)
    kv.v.normal_(generator=gk)
    m = km.PackedModel(w, kv, KernelOptions(fuse=fuse, triton_attn=tri))
    gplane = torch.arange(6, device="cuda")
    qidx = plane * 4 + pos - 40
    res[(fuse, tri)] = m.recurrent_call(h, pos, plane, qidx, gplane, 4).float()
base = res[(False, False)]
for k, v in res.items():
    out[f"rel_err fuse={k[0]} triton={k[1]} vs torch-eager"] = ((v - base).norm() / base.norm()).item()
print(json.dumps(out, indent=1))
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "fuse_probe.json"), "w"), indent=1)
