"""The sampler judge's statistics: a chi-square goodness-of-fit test of observed outcome counts
against the exact outcome distribution, and the number of draws that gives it a stated power.

Cells: the outcomes (a, token) of positive probability. Cells expected fewer than MIN_EXPECTED
times in N draws are pooled into one cell (and that cell into the smallest other when it is
itself below MIN_EXPECTED). An observed outcome of probability zero fails outright.

Power: for an alternative P' at total-variation distance delta from P on the (pooled) cells,
the chi-square divergence sum (P' - P)^2 / P >= (sum |P' - P|)^2 = 4 delta^2 (Cauchy-Schwarz,
sum P = 1), so the test statistic is approximately noncentral chi-square with df = cells - 1
and noncentrality lambda >= 4 N delta^2. `draws_for` takes the smallest N for which
P(ncx2(df, 4 N delta^2) > chi2.isf(alpha, df)) >= power, df taken after the pooling at that N
(iterated, as N moves the pooling). `detects` is the inverse: the delta detected with that
power by N draws. Needs scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_EXPECTED = 5.0


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
    """(N, df): the draws for power `power` against TV delta at level alpha (the docstring)."""
    N = 100
    for _ in range(8):
        df = len(cells(probs, N)) - 1
        if df < 1:
            return N, 0
        new = math.ceil(lam_needed(df, alpha, power) / (4 * delta**2))
        if new == N:
            break
        N = new
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


def chi_square(observed: np.ndarray, probs: np.ndarray) -> Fit:
    """observed counts and exact probabilities, both flat over the outcomes."""
    stats, _ = _scipy()
    N = int(observed.sum())
    zero = probs <= 0
    impossible = int(observed[zero].sum())
    resid = np.where(
        zero, np.where(observed > 0, np.inf, 0.0), (observed - N * probs) / np.sqrt(N * np.maximum(probs, 1e-300))
    )
    worst = int(np.argmax(np.abs(resid)))
    groups = cells(probs, N)
    e = np.array([probs[g].sum() for g in groups]) * N
    o = np.array([observed[g].sum() for g in groups], float)
    stat = float(((o - e) ** 2 / e).sum())
    df = len(groups) - 1
    pooled = sum(float(probs[g].sum()) for g in groups if len(g) > 1)
    p_value = 0.0 if impossible else float(stats.chi2.sf(stat, df)) if df else 1.0
    return Fit(math.inf if impossible else stat, df, p_value, impossible, worst, pooled)


def wilson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Wilson score interval of a proportion k / n at two-sided level alpha."""
    stats, _ = _scipy()
    z = float(stats.norm.isf(alpha / 2))
    ph = k / n
    mid = (ph + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)
