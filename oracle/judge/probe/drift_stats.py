"""The statistics of the drift verdict (docs/DESIGN.md, "Reduced precision"): Student's t
distribution without scipy, the Bonferroni threshold, and the one-sample t-test over requests.

A sample is one request: its estimate of a parameter's drift. Under "no drift" the estimates of
independent requests have mean 0, so t = mean / (sd / sqrt(n)) follows Student's t with n - 1
degrees of freedom (exactly for normal estimates; rounding noise summed over hundreds of values
is close to normal, and heavier tails make the test conservative).
"""

from __future__ import annotations

import math

import numpy as np

from .calibration import FAMILY_ALPHA

# FAMILY_ALPHA: the family-wise false-alarm rate of one verdict (the probability that a correct
# implementation fails on some parameter or group, Bonferroni over those tested), one constant for
# the drift and the precision verdicts: oracle/judge/probe/calibration.py.


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 400):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return f


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_two_sided(t: float, dof: int) -> float:
    """P(|T| >= |t|) for Student's t with dof degrees of freedom."""
    return betainc(dof / 2.0, 0.5, dof / (dof + t * t))


def t_critical(alpha: float, dof: int) -> float:
    """The |t| whose two-sided tail probability is alpha (bisection)."""
    lo, hi = 0.0, 1.0
    while t_two_sided(hi, dof) > alpha:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_two_sided(mid, dof) > alpha else (lo, mid)
    return hi


def one_sample_t(x) -> tuple[float, float, float]:
    """(mean, standard error, t) of the samples x (one per request)."""
    x = np.asarray(x, np.float64)
    n = len(x)
    mean = float(np.mean(x))
    se = float(np.std(x, ddof=1) / math.sqrt(n)) if n > 1 else float("inf")
    return mean, se, (mean / se if se > 0 else (0.0 if mean == 0 else math.copysign(float("inf"), mean)))


def beyond_interval(x, lo: float, hi: float) -> tuple[float, float, float]:
    """(mean, standard error, t) where t tests lo <= mean <= hi: the distance of the mean past the
    nearer end over se, signed (0 inside: the least favourable point of the null is that end)."""
    mean, se, _ = one_sample_t(x)
    excess = mean - hi if mean > hi else (mean - lo if mean < lo else 0.0)
    t = 0.0 if excess == 0 else (excess / se if se > 0 else math.copysign(float("inf"), excess))
    return mean, se, t


def threshold(n_tests: int, n_samples: int, family_alpha: float = FAMILY_ALPHA) -> float:
    """The |t| beyond which a drift is called: Bonferroni over n_tests parameters."""
    return t_critical(family_alpha / max(1, n_tests), n_samples - 1)
