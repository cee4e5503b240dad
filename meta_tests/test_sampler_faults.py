"""The sampler judge catches each faulty sampler of meta_tests/faulty_samplers.py, and passes the
reference's sampler on the same case: for each fault, the first drawn request (seeded) on which
the fault's exact outcome distribution is at least MIN_TV from the truth, judged alone at the
per-test level of a 20-case run (alpha / m, m = 30), with the draws the judge chooses for 99%
power at TV 0.05. The judge's power against the fault on that request is asserted too."""

from __future__ import annotations

import numpy as np
import pytest

from meta_tests import faulty_samplers as fs
from oracle.sampler.cases import SamplerCase, draw_case
from oracle.sampler.judge import Settings, judge_case
from oracle.sampler.reference import make_reference_sampler
from oracle.sampler.rules import RULES

MIN_TV = 0.1
MAX_V = 16  # small cases: fast in CI
ST = Settings(family=30)


def catching_request(name: str) -> SamplerCase:
    rng = np.random.default_rng(2026)
    fault = fs.FAULTS[name]()
    for n in range(400):
        case = draw_case(rng, f"case {n}")
        for i, r in enumerate(case.requests):
            if r.params.greedy or r.V > MAX_V:
                continue
            tv = 0.5 * np.abs(fault.outcome_distribution(r) - RULES.outcome_distribution(r)).sum()
            if tv >= MIN_TV:
                return SamplerCase(f"{case.name} request {i}", [r], case.tags)
    raise AssertionError(f"no drawn request shows the fault {name}")


@pytest.mark.parametrize("name", list(fs.FAULTS))
def test_the_judge_catches_the_faulty_sampler(name):
    case = catching_request(name)
    res = judge_case(fs._factory(name)(), case, ST, np.random.default_rng(1), lambda _: None)
    assert not res.ok, f"{name} passed {case.name} ({res.draws} draws)"
    tv, power, _ = fs.power_against(name, case, 0, res.draws, ST.alpha / ST.family)
    assert tv >= MIN_TV and power >= 0.99, (tv, power)
    ok = judge_case(make_reference_sampler(), case, ST, np.random.default_rng(1), lambda _: None)
    assert ok.ok, [t.message for t in ok.tests]
