"""Median wall time of one block round and one loop round on the reference (tiny preset,
8 requests, K=4, d=2, D=4), paired: each repeat runs both on the same fresh inputs.

    python scripts/bench_tiny_rounds.py [--repeats 30] [--preset tiny]
"""

from __future__ import annotations

import argparse
import statistics
import time

from oracle.checkpoint import build_model
from oracle.sampling_params import SamplingParams
from oracle.session import Session


def one_round(model, mode, n_req, K, d, D, seed):
    s = Session(model, d, D, mode)
    for rid in range(n_req):
        s.add(
            rid,
            [(7 * rid + k) % model.cfg.vocab_size for k in range(6)],
            SamplingParams() if rid % 2 else SamplingParams(1.0, top_p=0.9, seed=seed + rid),
        )
    t = time.perf_counter()
    s.step({rid: K + 1 for rid in range(n_req)})
    return (time.perf_counter() - t) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--requests", type=int, default=8)
    a = ap.parse_args()
    model = build_model(a.preset)
    ms = {"block": [], "loop": []}
    for r in range(a.repeats):
        for mode in ("block", "loop") if r % 2 == 0 else ("loop", "block"):  # alternate order
            ms[mode].append(one_round(model, mode, a.requests, 4, 2, 4, seed=r))
    ratios = sorted(b / l for b, l in zip(ms["block"], ms["loop"]))
    for mode, v in ms.items():
        print(
            f"{mode:5s} round: median {statistics.median(v):.1f} ms  (min {min(v):.1f}, max {max(v):.1f}, n={len(v)})"
        )
    print(f"paired block/loop ratio: median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
