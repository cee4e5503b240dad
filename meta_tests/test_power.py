"""The chi-square property of property_tests/test_distribution.py rejects a sampler biased by
2% total variation (meta_tests.faulty:make_biased_sampler moves 2% of the filtered mass onto
the least likely token of p >= 1%), with the trial counts that property computes for power
>= 1 - 1e-4 at alpha = 1e-6 — the SAME function, seeds and N that pass the reference."""

from __future__ import annotations

import pytest

from meta_tests import faulty
from meta_tests.catch import check
from meta_tests.conftest import RESULTS
from property_tests.test_distribution import CONFIGS, target_distribution

STATISTICAL = [cid for cid, _, _ in CONFIGS if (target_distribution(cid) > 0).sum() > 1]


@pytest.mark.parametrize("config_id", STATISTICAL)
def test_chi_square_rejects_a_2pct_biased_sampler(config_id):
    prop = f"test_distribution::test_emitted_tokens_follow_the_target[config_id={config_id}]"
    o = check(faulty.make_biased_sampler(), "meta_tests.faulty:make_biased_sampler", prop)
    RESULTS.append(("make_biased_sampler", prop, o))
    assert o.caught and "chi-square" in o.message, o.message
