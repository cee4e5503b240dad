"""Statistics of a paired benchmark: per-repeat ratios, median, quartiles and a bootstrap
interval of the median. Pure Python + NumPy."""

from __future__ import annotations

import numpy as np


def quartiles(xs) -> tuple[float, float, float]:
    q = np.percentile(np.asarray(xs, np.float64), [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def bootstrap_median_ci(xs, level: float = 0.95, n_boot: int = 10000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of xs."""
    xs = np.asarray(xs, np.float64)
    assert xs.size >= 2, "a bootstrap needs at least two repeats"
    rng = np.random.default_rng(seed)
    meds = np.median(xs[rng.integers(0, xs.size, (n_boot, xs.size))], axis=1)
    lo, hi = np.percentile(meds, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def paired_summary(block_ms, loop_ms) -> dict:
    """block_ms[r], loop_ms[r]: the two arms of repeat r. Ratio = block / loop (> 1: loop faster)."""
    assert len(block_ms) == len(loop_ms) and len(block_ms) >= 2
    ratios = [b / l for b, l in zip(block_ms, loop_ms)]
    lo, hi = bootstrap_median_ci(ratios)
    q1, med, q3 = quartiles(ratios)
    return {
        "ratio_median": med,
        "ratio_ci95": [lo, hi],
        "ratio_ci95_width": hi - lo,
        "ratio_quartiles": [q1, q3],
        "ratios": ratios,
        "block_ms_median": float(np.median(block_ms)),
        "loop_ms_median": float(np.median(loop_ms)),
    }
