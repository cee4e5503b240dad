"""A failing sampler case, shrunk: the smallest case that still fails the same test.

Greedy: each candidate of cases.smaller (the failing request alone, one draft offset less, one
filter off or temperature 1, vocabulary entries dropped) is judged afresh by `judge_fn(case,
rng)` (run.py passes judge.judge_case with the run's sampler and settings: new draws, the same
per-test level alpha / m; passed in, so this module stays below the judge); the first one that still
fails becomes the case, and the search starts again from it, until no candidate fails or the
budget (seconds) runs out (then the smallest failing case so far is the answer, marked partial).
"""

from __future__ import annotations

import time

import numpy as np

from .cases import SamplerCase, smaller


def size(case: SamplerCase) -> str:
    r = case.requests
    return f"{len(r)} request(s), K {'/'.join(str(x.K) for x in r)}, V {r[0].V}"


def shrink(judge_fn, case: SamplerCase, focus: int, budget: float, seed: int, say) -> dict:
    """{"case": the smallest failing case, "focus": its failing request, "tried": candidates
    judged, "steps": moves kept, "partial": the budget ran out, "from"/"to": sizes, "seconds"}."""
    t0 = time.perf_counter()
    start, tried, steps, partial = size(case), 0, 0, False
    moved = True
    while moved:
        moved = False
        for cand in smaller(case, focus):
            if time.perf_counter() - t0 > budget:
                partial = True
                break
            tried += 1
            say(f"shrink: candidate {tried} ({size(cand)})")
            res = judge_fn(cand, np.random.default_rng([seed, 7919, tried]))
            bad = [t.request for t in res.tests if not t.ok]
            if bad:
                case, focus, steps, moved = cand, bad[0], steps + 1, True
                break
        if partial:
            break
    return {
        "case": case,
        "focus": focus,
        "tried": tried,
        "steps": steps,
        "partial": partial,
        "from": start,
        "to": size(case),
        "seconds": time.perf_counter() - t0,
    }
