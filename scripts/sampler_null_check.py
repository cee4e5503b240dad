"""The sampler judge's own error rates.

Null side: run a correct sampler (default: torch) on drawn cases, each request's chi-square test
at family size 1, and print how its p-values spread (they should be uniform on [0, 1]:
Kolmogorov-Smirnov against the uniform) and how many fall below 0.05 and 0.01.

Power side (--power R): for a few outcome distributions P, draw R samples of the judge's N draws
from the least favourable alternative at TV --tv (half of P's mass scaled up by 2 TV, half
down: chi-square divergence exactly 4 TV^2) and count how often the judge's test (stats.py,
calibrated) rejects at the level of a 32-test family (1e-3 / 32); the judge promises >= 0.99.

    PYTHONPATH=. python scripts/sampler_null_check.py [--backend torch] [--cases 60] [--seed 7]
    PYTHONPATH=. python scripts/sampler_null_check.py --power 300
    PYTHONPATH=. python scripts/sampler_null_check.py --tail 200000

Tail side (--tail R): R null samples of outcome distributions with k cells of E expected draws
(and one large cell), at the level of a 32-test family: how often Pearson's asymptotic p falls
below the level, and how often the judge's calibrated p does (stats.calibrate).
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from oracle.sampler import stats as judge_stats
from oracle.sampler.cases import draw_case
from oracle.sampler.contract import load_sampler
from oracle.sampler.judge import Settings, judge_case

SHAPES = {
    "2 cells": np.array([0.5, 0.5]),
    "6 cells": np.array([0.3, 0.2, 0.2, 0.1, 0.1, 0.1]),
    "40 cells": np.r_[np.full(20, 0.04), np.full(20, 0.01)],
}


def null_side(args) -> None:
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


def power_side(args) -> None:
    rng = np.random.default_rng(args.seed)
    alpha = 1e-3 / 32
    for name, P in SHAPES.items():
        N, df = judge_stats.draws_for(P, args.tv, alpha, 0.99)
        up, mass = np.zeros(len(P), bool), 0.0
        for i in np.argsort(-P, kind="stable"):  # about half the mass up
            if mass + P[i] <= 0.5 + 1e-12:
                up[i], mass = True, mass + P[i]
        Q = np.where(up, P * (1 + args.tv / mass), P * (1 - args.tv / (1 - mass)))
        hits = sum(
            judge_stats.chi_square(rng.multinomial(N, Q).astype(float), P, alpha).p_value < alpha
            for _ in range(args.power)
        )
        print(f"{name}: N {N}, df {df}, TV {0.5 * np.abs(Q - P).sum():.3f}: rejected {hits} of {args.power}")


TAILS = ((1, 5.0, 4213), (10, 5.0, 6219), (10, 20.0, 6219), (30, 6.0, 8000))


def tail_side(args) -> None:
    rng = np.random.default_rng(args.seed)
    alpha = 1e-3 / 32
    for k, E0, N in TAILS:
        P = np.r_[np.full(k, E0 / N), 1 - k * E0 / N]
        X = rng.multinomial(N, P, size=args.tail)
        E = N * P
        asym = stats.chi2.sf(((X - E) ** 2 / E).sum(1), k)
        low = np.flatnonzero(asym < alpha)
        kept = sum(judge_stats.chi_square(X[i].astype(float), P, alpha).p_value < alpha for i in low)
        print(
            f"{k} cell(s) of {E0:g} expected, N {N}: asymptotic p < {alpha:.3g} in {len(low) / args.tail:.2e} "
            f"of {args.tail}, calibrated in {kept / args.tail:.2e}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--power", type=int, default=0, metavar="R", help="the power side, R samples per shape")
    ap.add_argument("--tail", type=int, default=0, metavar="R", help="the tail side, R null samples per shape")
    ap.add_argument("--tv", type=float, default=0.05)
    args = ap.parse_args()
    (tail_side if args.tail else power_side if args.power else null_side)(args)


if __name__ == "__main__":
    main()
