"""c(M) of the packed recurrent call at the ouro-1.4b shape with and without the fused
(torch.compile) pre/post-attention blocks, and their agreement; one device call.
    PYTHONPATH=. python scripts/gpu_fuse_probe.py"""
import json
import os
import time

import torch

import kernels.model as km
from kernels import bench

out = {}
rows = [1, 4, 16, 64, 320]
for fuse in (False, True):
    km.FUSE_DEFAULT = fuse
    t0 = time.time()
    ct = bench.measure_c_table("ouro-1.4b", rows, 256, device="cuda", repeats=50)
    out[f"fuse={fuse}"] = {"c_ms": ct["c_ms"], "seconds": round(time.time() - t0, 1)}
    print(fuse, out[f"fuse={fuse}"], flush=True)
# agreement of the two paths on one call (same weights, same KV)
from kernels.bench_rounds import random_weights
from kernels.kvplanes import KVPlanes
from oracle.config import preset
w = random_weights("ouro-1.4b", "cuda")
res = {}
for fuse in (False, True):
    kv = KVPlanes(preset("ouro-1.4b"), 1, 8, 64, torch.device("cuda"), w.dtype)
    m = km.PackedModel(w, kv, fuse=fuse)
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(8, 2048, device="cuda", generator=g).to(w.dtype)
    r = torch.arange(8, device="cuda")
    res[fuse] = m.recurrent_call(h, torch.full((8,), 5, device="cuda"), r, r, r, 1).float()
rel = ((res[True] - res[False]).norm() / res[False].norm()).item()
out["fused_vs_unfused_rel_err"] = rel
print(json.dumps(out, indent=1))
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "fuse_probe.json"), "w"), indent=1)
