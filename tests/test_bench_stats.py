import numpy as np
import pytest

from bench.stats import bootstrap_median_ci, paired_summary


def test_paired_summary_detects_known_ratio():
    rng = np.random.default_rng(0)
    loop = 10 + rng.normal(0, 0.2, 15)
    block = loop * 1.05 * (1 + rng.normal(0, 0.002, 15))  # paired noise cancels
    s = paired_summary(block, loop)
    assert s["ratio_ci95"][0] < 1.05 < s["ratio_ci95"][1]
    assert s["ratio_ci95"][0] > 1.03  # a 2% difference is resolved
    assert s["ratio_quartiles"][0] <= s["ratio_median"] <= s["ratio_quartiles"][1]


def test_bootstrap_interval_covers_median_and_shrinks():
    rng = np.random.default_rng(1)
    small = bootstrap_median_ci(rng.normal(1, 0.05, 7))
    large = bootstrap_median_ci(rng.normal(1, 0.05, 200))
    assert large[1] - large[0] < small[1] - small[0]
    assert large[0] < 1 < large[1]
    with pytest.raises(AssertionError):
        bootstrap_median_ci([1.0])
