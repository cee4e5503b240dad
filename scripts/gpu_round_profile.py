"""Where a round's time goes beyond sum c(M) + heads: torch.profiler over a few rounds of
each arm at one concurrency (ouro-1.4b shape, graphs on), CUDA time per round by kernel.
    PYTHONPATH=. python scripts/gpu_round_profile.py [C]"""

import argparse
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile

from bench.rounds import make_session, random_weights
from oracle.sampling_params import SamplingParams

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("C", type=int, nargs="?", default=128, help="concurrency (default: 128)")
ap.add_argument(
    "--out", default=os.environ.get("OUT", "."), help="folder for round_profile_C.json (default: $OUT or .)"
)
ARGS = ap.parse_args()
C = ARGS.C
K, d, D, ctx, n = 4, 2, 4, 256, 4
DEV, PRESET = os.environ.get("DEV", "cuda"), os.environ.get("PRESET", "ouro-1.4b")
w = random_weights(PRESET, DEV)
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(0, w.cfg.vocab_size, (ctx,), generator=g).tolist() for _ in range(C)]
out = {}
for mode in ("block", "loop"):
    s = make_session(w, mode, C, ctx, 3 * n, K, d, D)
    for rid, p in enumerate(prompts):
        s.add(rid, p, SamplingParams(seed=rid))
    for _ in range(2):  # capture graphs
        s.step({rid: K + 1 for rid in range(C)})
    torch.cuda.synchronize() if DEV == "cuda" else None
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            s.step({rid: K + 1 for rid in range(C)})
        torch.cuda.synchronize() if DEV == "cuda" else None if DEV == "cuda" else None
    ev = prof.key_averages()
    rows = sorted(
        ((e.key, e.device_time_total / 1e3 / n, e.count / n) for e in ev if e.device_time_total > 0),
        key=lambda r: -r[1],
    )[:25]
    cpu = sum(e.self_cpu_time_total for e in ev) / 1e3 / n
    out[mode] = {
        "cuda_ms_per_round_by_kernel": rows,
        "cuda_ms_per_round": sum(e.self_device_time_total for e in ev) / 1e3 / n,
        "cpu_ms_per_round": cpu,
    }
    print(mode, "total CUDA ms/round", round(out[mode]["cuda_ms_per_round"], 2), "host ms/round", round(cpu, 2))
    for k, t, c in rows[:14]:
        print(f"  {t:8.3f} ms  x{c:6.1f}  {k[:90]}")
    del s
    torch.cuda.empty_cache() if DEV == "cuda" else None
json.dump(out, open(os.path.join(ARGS.out, f"round_profile_C{C}.json"), "w"), indent=1)
