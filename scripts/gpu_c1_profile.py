"""Where c(1) goes: torch.profiler over eager recurrent calls of one row (ouro-1.4b shape,
BF16, context 256), device time per kernel name and per call, against the graph-replay
time of the same call. One device call.
    PYTHONPATH=. python scripts/gpu_c1_profile.py [M]"""

import argparse
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile

from bench import calls as bench
from kernels.kvplanes import KVPlanes
from kernels.model import PackedModel
from kernels.options import KernelOptions
from kernels.weights import TorchWeights
from oracle.config import preset

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("M", type=int, nargs="?", default=1, help="rows of the profiled call (default: 1)")
ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for cM_profile.json (default: $OUT or .)")
ARGS = ap.parse_args()
M = ARGS.M
cfg, dev, ctx, n = preset("ouro-1.4b"), torch.device("cuda"), 256, 10
w = TorchWeights.random(cfg, dev, torch.bfloat16, 0)
kv = KVPlanes(cfg, 1, M, ctx + 1, dev, torch.bfloat16)
model = PackedModel(w, kv, KernelOptions.from_env())
rows = torch.arange(M, device=dev)
pos = torch.full((M,), ctx, device=dev, dtype=torch.int64)
h = torch.randn(M, cfg.hidden_size, device=dev).to(torch.bfloat16)
step = lambda: model.recurrent_call(h, pos, rows, rows, rows, 1)
for _ in range(3):
    step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(n):
        step()
    torch.cuda.synchronize()
ev = [e for e in prof.key_averages() if e.device_time_total > 0]
rows_ = sorted(((e.key, e.device_time_total / 1e3 / n, e.count / n) for e in ev), key=lambda r: -r[1])
kernels = sum(c for _, _, c in rows_)
dev_ms = sum(t for _, t, _ in rows_)
graph_ms = bench.measure_c_table("ouro-1.4b", [M], ctx, device="cuda", repeats=50)["c_ms"][str(M)]
out = {
    "M": M,
    "kernels_per_call": kernels,
    "kernel_time_ms_per_call": dev_ms,
    "graph_replay_ms": graph_ms,
    "by_kernel": [[k[:120], round(t, 4), c] for k, t, c in rows_],
}
print(f"M={M}: {kernels:.0f} kernels/call, summed kernel time {dev_ms:.3f} ms, graph replay {graph_ms:.3f} ms")
for k, t, c in rows_[:20]:
    print(f"  {t:7.3f} ms  x{c:5.0f}  {k[:100]}")
json.dump(out, open(os.path.join(ARGS.out, f"c{M}_profile.json"), "w"), indent=1)
