"""Where a round's device time goes, step by step: CUDA events around every step of a round
(begin, each recurrent call, draft heads, verify, accept; graph replays), each arm at one
concurrency, against c(M) measured in the same process. The gap column is device time between
steps (the host had not enqueued the next one yet). ouro-1.4b shape, BF16, graphs on.
    PYTHONPATH=. python scripts/gpu_round_steps.py [C] [--json out.json]"""
import argparse
import collections
import json
import statistics

import torch

from kernels import bench
from kernels.bench_rounds import make_session, random_weights
from kernels.graphs import GraphRunner
from oracle.sampling import SamplingParams


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("C", type=int, nargs="?", default=1)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json")
    args = ap.parse_args()
    C, K, d, D, ctx, n = args.C, 4, 2, 4, 256, args.rounds
    w = random_weights("ouro-1.4b", "cuda")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, w.cfg.vocab_size, (ctx,), generator=g).tolist() for _ in range(C)]
    steps = []
    real_run = GraphRunner.run

    def timed(self, kind, key, rows, meta, fn, scratch):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = real_run(self, kind, key, rows, meta, fn, scratch)
        b.record()
        steps.append((kind, key, a, b))
        return out

    GraphRunner.run = timed
    res = {"C": C, "K": K, "d": d, "D": D, "context_len": ctx, "rounds": n}
    for mode in ("block", "loop"):
        s = make_session(w, mode, C, ctx, 2 * (n + 2) * (K + 1), K, d, D)
        for rid, p in enumerate(prompts):
            s.add(rid, p, SamplingParams(seed=rid))
        for _ in range(2):                                  # captures
            s.step({rid: K + 1 for rid in range(C)})
        torch.cuda.synchronize()
        steps.clear()
        rounds = []
        for _ in range(n):
            first = len(steps)
            s.step({rid: K + 1 for rid in range(C)})
            rounds.append((first, len(steps)))
        torch.cuda.synchronize()
        by = collections.defaultdict(list)
        per_round = []
        for lo, hi in rounds:
            busy = sum(a.elapsed_time(b) for _, _, a, b in steps[lo:hi])
            span = steps[lo][2].elapsed_time(steps[hi - 1][3])
            per_round.append((busy, span - busy))
            for kind, key, a, b in steps[lo:hi]:
                by[f"{kind} {key}"].append(a.elapsed_time(b))
        table = {k: {"per_round": len(v) / n, "median_ms": statistics.median(v)} for k, v in by.items()}
        res[mode] = {"steps": table, "busy_ms": statistics.median(b for b, _ in per_round),
                     "gap_ms": statistics.median(gp for _, gp in per_round)}
        print(f"{mode}: steps {res[mode]['busy_ms']:.3f} ms/round, gaps between steps {res[mode]['gap_ms']:.3f} ms/round")
        for k, v in sorted(table.items(), key=lambda kv: -kv[1]["per_round"] * kv[1]["median_ms"]):
            print(f"  {k:32s} x{v['per_round']:5.1f}  {v['median_ms']:.4f} ms")
        del s
        torch.cuda.empty_cache()
    GraphRunner.run = real_run
    rows = sorted({int(k.split()[1].strip("(,")) for m in ("block", "loop") for k in res[m]["steps"] if k.startswith("call")})
    res["c_ms"] = bench.measure_c_table("ouro-1.4b", rows, ctx, repeats=50)["c_ms"]
    five = [M for M in rows if M % (K + 1) == 0]
    if five:
        res["c_ms_shared"] = bench.measure_c_table("ouro-1.4b", five, ctx, repeats=50, rows_per_plane=K + 1)["c_ms"]
    print("c(M), rows on their own planes:", res["c_ms"], " K+1 rows per plane:", res.get("c_ms_shared"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
