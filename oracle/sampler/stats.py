"""The sampler judge's statistics: a chi-square goodness-of-fit test of observed outcome counts
against the exact outcome distribution, and the number of draws that gives it a stated power.

Cells: the outcomes (a, token) of positive probability. Cells expected fewer than MIN_EXPECTED
times in N draws are pooled into one cell (and that cell into the smallest other when it is
itself below MIN_EXPECTED). When that leaves one cell (all outcomes but the most likely one are
rare), the test is the most likely outcome against the rest, by an exact binomial test (the
chi-square's tail is no guide at so few expected draws). An observed outcome of probability
zero fails outright.

Calibration: at the small levels a Bonferroni family asks for (3e-5 for 32 tests), the chi-square
tail of Pearson's statistic is too light for cells of a few expected draws: 200,000 simulated
null runs gave P(asymptotic p < 3.13e-5) = 1.8e-4 to 2.7e-4 for cells of 5-6 expected draws and
6e-5 at 20 (docs/results.md, "Sampler judge"; scripts/sampler_null_check.py --tail). So an
asymptotic p below the level is checked by simulation (`calibrate`: null multinomial samples of
the same cells, 10 / alpha of them before a failure is called, about a second at 3e-5). No
shortcut for a p far below the level: a cell of 5 expected draws seen 18 times has an
asymptotic p of 6e-9 but a Poisson tail of 5e-6.

Power: for an alternative P' at total-variation distance delta from P on the (pooled) cells,
the chi-square divergence sum (P' - P)^2 / P >= (sum |P' - P|)^2 = 4 delta^2 (Cauchy-Schwarz,
sum P = 1), so the test statistic is approximately noncentral chi-square with df = cells - 1
and noncentrality lambda >= 4 N delta^2. `draws_for` takes the smallest N for which
P(ncx2(df, 4 N delta^2) > chi2.isf(alpha, df)) >= power, df taken after the pooling at that N
(N raised until it meets the power at its own pooling). `detects` is the inverse: the delta
detected with that power by N draws. Needs scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_EXPECTED = 5.0
CHUNK = 4_000_000  # multinomial cells drawn at once in a calibration


def _scipy():
    from scipy import optimize, stats

    return stats, optimize


def cells(probs: np.ndarray, N: int) -> list[np.ndarray]:
    """Index groups over the flat outcome probabilities (positive ones only), pooled."""
    idx = np.flatnonzero(probs > 0)
    big = [np.array([i]) for i in idx if probs[i] * N >= MIN_EXPECTED]
    small = np.array([i for i in idx if probs[i] * N < MIN_EXPECTED], int)
    if small.size:
        if probs[small].sum() * N >= MIN_EXPECTED or not big:
            big.append(small)
        else:
            j = int(np.argmin([probs[g].sum() for g in big]))
            big[j] = np.concatenate([big[j], small])
    return big


def lam_needed(df: int, alpha: float, power: float) -> float:
    """The noncentrality at which the level-alpha test with df degrees of freedom has this power."""
    stats, optimize = _scipy()
    crit = stats.chi2.isf(alpha, df)
    f = lambda lam: stats.ncx2.sf(crit, df, lam) - power  # noqa: E731
    hi = 1.0
    while f(hi) < 0:
        hi *= 2
    return float(optimize.brentq(f, 1e-9, hi, xtol=1e-6))


def draws_for(probs: np.ndarray, delta: float, alpha: float, power: float) -> tuple[int, int]:
    """(N, df): the draws for power `power` against TV delta at level alpha (the docstring).
    N only grows while it is sought, so the answer meets the power with the cells at that N:
    N >= needed(df(N)). One outcome of positive probability: (100, 0), no test but the zero rule."""
    if np.count_nonzero(probs > 0) < 2:
        return 100, 0
    N = 100
    for _ in range(60):
        df = max(1, len(cells(probs, N)) - 1)  # 1: the top outcome against the rest (chi_square)
        need = math.ceil(lam_needed(df, alpha, power) / (4 * delta**2))
        if need <= N:
            return N, df
        N = need
    return N, len(cells(probs, N)) - 1


def detects(N: int, df: int, alpha: float, power: float) -> float:
    """The TV distance N draws detect with this power at level alpha (df >= 1)."""
    return math.sqrt(lam_needed(df, alpha, power) / (4 * N))


@dataclass(slots=True)
class Fit:
    """One goodness-of-fit test."""

    stat: float
    df: int
    p_value: float
    impossible: int  # draws of outcomes of probability zero
    worst: int  # the flat outcome where the frequencies part most (standardized residual)
    pooled_mass: float  # the pooled cell's probability (0: none)
    null_draws: int = 0  # > 0: p_value is a Monte Carlo p over this many null samples (calibrate)


def chi_square(observed: np.ndarray, probs: np.ndarray, alpha: float | None = None) -> Fit:
    """observed counts and exact probabilities, both flat over the outcomes. alpha: the test's
    level; an asymptotic p below it is replaced by `calibrate`'s (the module docstring)."""
    stats, _ = _scipy()
    N = int(observed.sum())
    zero = probs <= 0
    impossible = int(observed[zero].sum())
    resid = np.where(
        zero, np.where(observed > 0, np.inf, 0.0), (observed - N * probs) / np.sqrt(N * np.maximum(probs, 1e-300))
    )
    worst = int(np.argmax(np.abs(resid)))
    groups, p_value = cells(probs, N), None
    if len(groups) == 1 and np.count_nonzero(probs > 0) > 1:  # all but the top outcome rare: binomial
        top = int(np.argmax(probs))
        rest = np.flatnonzero((probs > 0) & (np.arange(len(probs)) != top))
        groups = [np.array([top]), rest]
        p_value = float(stats.binomtest(int(observed[rest].sum()), N, float(probs[rest].sum())).pvalue)
    e = np.array([probs[g].sum() for g in groups]) * N
    o = np.array([observed[g].sum() for g in groups], float)
    stat = float(((o - e) ** 2 / e).sum())
    df = len(groups) - 1
    null_draws = 0
    if p_value is None:
        p_value = float(stats.chi2.sf(stat, df)) if df else 1.0
        if alpha is not None and not impossible and p_value < alpha:
            p_value, null_draws = calibrate(stat, e / N, N, alpha)
    pooled = sum(float(probs[g].sum()) for g in groups if len(g) > 1)
    p_value = 0.0 if impossible else p_value
    return Fit(math.inf if impossible else stat, df, p_value, impossible, worst, pooled, null_draws)


def calibrate(stat: float, P: np.ndarray, N: int, alpha: float) -> tuple[float, int]:
    """(Monte Carlo p, null samples): the chance that N multinomial(P) draws give a chi-square
    statistic >= stat, from ceil(10 / alpha) samples (seeded), stopped as soon as the p is sure
    to be >= alpha."""
    rng = np.random.default_rng(20261205)
    R = math.ceil(10 / alpha)
    E, hit, done = N * P, 0, 0
    while done < R:
        n = min(max(1000, CHUNK // len(P)), R - done)
        X = rng.multinomial(N, P, size=n)
        hit += int((((X - E) ** 2 / E).sum(1) >= stat).sum())
        done += n
        if (1 + hit) / (1 + R) >= alpha:
            break
    return (1 + hit) / (1 + done), done


def wilson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Wilson score interval of a proportion k / n at two-sided level alpha."""
    stats, _ = _scipy()
    z = float(stats.norm.isf(alpha / 2))
    ph = k / n
    mid = (ph + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)
