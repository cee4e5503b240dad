"""The sampler judge's null side: run a correct sampler (default: torch) on drawn cases, each
request's chi-square test at family size 1, and print how its p-values spread (they should be
uniform on [0, 1]: Kolmogorov-Smirnov against the uniform) and how many fall below 0.05 and 0.01.

    PYTHONPATH=. python scripts/sampler_null_check.py [--backend torch] [--cases 60] [--seed 7]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from oracle.sampler.cases import draw_case
from oracle.sampler.contract import load_sampler
from oracle.sampler.judge import Settings, judge_case


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    sampler = load_sampler(args.backend)
    rng = np.random.default_rng(args.seed)
    st = Settings(family=1)
    ps = []
    for n in range(args.cases):
        res = judge_case(sampler, draw_case(rng, f"case {n}"), st, np.random.default_rng([args.seed, n]), lambda _: 0)
        ps += [t.fit.p_value for t in res.tests if t.fit is not None and t.fit.df > 0]
    ks = stats.kstest(ps, "uniform")
    below = {a: int(sum(p < a for p in ps)) for a in (0.05, 0.01)}
    print(f"{args.backend}: {len(ps)} tests; KS against uniform: D = {ks.statistic:.3f}, p = {ks.pvalue:.2f}; ", end="")
    print(f"p < 0.05: {below[0.05]} (expected {0.05 * len(ps):.1f}), p < 0.01: {below[0.01]} ({0.01 * len(ps):.1f})")


if __name__ == "__main__":
    main()
