"""A failing check, shrunk (issue 44): the smallest case that still fails in the same way.

Bookkeeping over `Case` objects and calls to the one verdict, nothing else: every candidate is judged
by `verdict.judge(plan, executor)`, a case by

    verdict.judge(backend_plan(backend, model, [candidate], probe="off", ...), INLINE)

and the drift probe by a probe plan of fewer probe requests (`probe_plan(..., probe_requests=n)`:
the verdict's own probe, n requests). It never compares anything itself. What "the same way"
means: oracle/judge/shrinker/target.py; the moves that make a case smaller:
oracle/judge/shrinker/moves.py.

The search (`shrink`), greedy, each move kept while the failure holds, in the order of moves.PASSES
(requests, rounds, token counts, prompts, depths, sampling), and again while a sweep changed
something (at most MAX_SWEEPS). The probe: the fewest probe requests whose verdict still fails, by
halving the interval (n/2 first; a candidate whose expected time would end past the budget is not
begun). A budget in seconds bounds the search: where it runs out the smallest failing case found so
far is the answer, marked partial. `prepare(case)` (the CLI's --case-json round trip) gives the case
exactly as its reproduce line will make it, or None where that line would be refused: a candidate is
judged only in the form its one line reproduces.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ..plans import verdict
from ..plans.plan import INLINE, backend_plan, probe_plan
from ..scenario import Case
from ..probe.calibration import PROBE_REQUESTS
from .moves import PASSES, describe, plain, with_parts
from .target import Target, hint_of, holds, target_of

MAX_SWEEPS = 3


@dataclass
class Shrunk:
    """The search's answer: the smallest failing case found (or, for the drift probe, the fewest probe
    requests), its failure, the candidates judged and the seconds the search took."""

    target: Target
    original: Case | None = None  # the original case as plain data (its params as run)
    case: Case | None = None  # the smallest failing case (None: the drift probe, or nothing smaller held)
    requests: int | None = None  # the drift probe: the fewest probe requests whose verdict still fails
    original_requests: int | None = None
    failure: dict | None = None  # the shrunk case's failed check ({"name", "ok", "detail"}) of the target's class
    candidates: int = 0  # candidate runs judged
    refused: int = 0  # candidates the reproduce line would refuse (never judged)
    seconds: float = 0.0
    partial: bool = False  # the budget ran out first
    moves: list = field(default_factory=list)  # the passes whose moves were kept, in order

    @property
    def smaller(self) -> bool:
        return self.failure is not None

    @property
    def description(self) -> str:
        """The shrunk case in one line (describe), or the probe's requests; '' where none failed."""
        if self.requests is not None:
            return f"the drift probe, {self.requests} requests"
        return describe(self.case) if self.case is not None else ""

    @property
    def original_description(self) -> str:
        if self.original_requests is not None:
            return f"the drift probe, {self.original_requests} requests"
        return describe(self.original) if self.original is not None else ""


class _OutOfBudget(Exception):
    pass


class _Search:
    def __init__(self, target, test, prepare, budget, on_candidate):
        self.target, self.test, self.prepare = target, test, prepare
        self.t0, self.budget, self.on_candidate = time.perf_counter(), budget, on_candidate
        self.seen: set = set()
        self.out = Shrunk(target)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def run(self, cand: Case) -> bool:
        """Judge one candidate; True (and kept as the best) where it fails as the target does."""
        sig = _signature(cand)
        if sig in self.seen:
            return False
        self.seen.add(sig)
        ready = self.prepare(cand)
        if ready is None:
            self.out.refused += 1
            return False
        if self.elapsed() >= self.budget:
            raise _OutOfBudget
        self.out.candidates += 1
        if self.on_candidate is not None:
            self.on_candidate(self.out.candidates, describe(ready))
        failed = self.test(ready)
        if failed is None:
            return False
        self.out.case, self.out.failure = ready, failed
        return True


def _signature(case: Case) -> str:
    return json.dumps(
        [
            case.prompts,
            [p.to_json() for p in case.params],
            [list(r.items()) for r in case.rounds],
            case.d,
            case.D,
            case.policy,
            case.depths,
        ]
    )


def shrink_case(target: Target, test, prepare=None, budget: float = 30.0, on_candidate=None, model=None) -> Shrunk:
    """The smallest case that still fails as `target` does: test(case) -> the failed check or None
    (a call of the one verdict); prepare(case) -> the case as its reproduce line makes it, or None."""
    search = _Search(target, test, prepare or (lambda c: c), budget, on_candidate)
    best = plain(target.case, model) if model is not None else target.case
    best = search.out.original = with_parts(best)
    search.seen.add(_signature(best))  # the original failed already
    hint = target.hint
    try:
        for _ in range(MAX_SWEEPS):
            changed = False
            for name, moves in PASSES:
                progress = True
                while progress:
                    progress = False
                    for cand in moves(best, hint):
                        if _signature(cand) == _signature(best):
                            continue
                        if search.run(cand):
                            best, hint, changed, progress = (
                                search.out.case,
                                hint_of(search.out.failure),
                                True,
                                True,
                            )
                            if not search.out.moves or search.out.moves[-1] != name:
                                search.out.moves.append(name)
                            break
            if not changed:
                break
    except _OutOfBudget:
        search.out.partial = True
    search.out.seconds = search.elapsed()
    return search.out


def shrink_probe(
    target: Target, test, n: int = PROBE_REQUESTS, budget: float = 30.0, cost=None, on_candidate=None
) -> Shrunk:
    """The fewest probe requests (at least 2: a standard error over requests) whose probe verdict
    still fails as `target` does: test(k) -> the failed check or None. Halving the interval between
    the most requests known not to fail and the fewest known to fail (1 and n at first). cost(k): the
    seconds a probe of k requests is expected to take; a candidate that would end past the budget is
    not begun (the answer is then partial)."""
    t0 = time.perf_counter()
    out = Shrunk(target, requests=None, original_requests=n)

    def run(k) -> bool:
        left = budget - (time.perf_counter() - t0)
        if left <= 0 or (cost is not None and cost(k) > left):
            raise _OutOfBudget
        out.candidates += 1
        if on_candidate is not None:
            on_candidate(out.candidates, f"the drift probe with {k} requests")
        failed = test(k)
        if failed is not None:
            out.requests, out.failure = k, failed
        return failed is not None

    lo, hi = 1, n  # lo: the most requests known not to fail (1: none can), hi: the fewest known to fail
    try:
        while hi - lo > 1:  # halving: each candidate that holds is an answer at once (a budget may end it)
            mid = (lo + hi) // 2
            if run(mid):
                hi = mid
            else:
                lo = mid
    except _OutOfBudget:
        out.partial = True
    if out.requests is not None:
        out.moves.append("probe requests")
    out.seconds = time.perf_counter() - t0
    return out


def probe_verdict(backend, model, n: int, *, judge=None, timeout=None, reproduce="", fallback=True):
    """The drift probe's two verdicts over n probe requests: a probe plan of n requests, judged inline
    (`check --probe-requests N`); where the backend raises in the probe, that is its failed check.
    fallback=False: None where the probe did not run to its fits (not this failure)."""
    plan = probe_plan(backend, model, judge=judge, probe_reproduce=reproduce, probe_requests=n, timeout=timeout)
    v = verdict.judge(plan, INLINE)
    if not fallback and v.drift is None:
        return None
    return v


def shrink(
    v,
    cases,
    backend,
    model,
    *,
    judge=None,
    timeout=None,
    suffix: str = "",
    prepare=None,
    probe_reproduce=None,
    budget: float = 30.0,
    on_candidate=None,
) -> Shrunk | None:
    """The failing verdict `v` of `backend` on `cases`, shrunk; None where it names no failure to
    shrink. Each candidate case is judged alone, inline, without the probe
    (`backend_plan(..., probe="off")`); a drift or precision failure by a probe plan over
    probe_runs.probe_runs(backend, model, k). suffix: the backend's flags, appended to reproduce lines;
    probe_reproduce(k): the line that runs the probe of k requests."""
    target = target_of(v, cases)
    if target is None:
        return None
    if target.probe:

        def test_probe(k):
            line = probe_reproduce(k) if probe_reproduce is not None else ""
            got = probe_verdict(backend, model, k, judge=judge, timeout=timeout, reproduce=line, fallback=False)
            return None if got is None else holds(got, target)

        spent = (v.drift.seconds if v.drift is not None else 0.0) + (
            v.precision.seconds if v.precision is not None else 0.0
        )
        cost = (lambda k: spent * k / PROBE_REQUESTS) if spent else None
        return shrink_probe(target, test_probe, PROBE_REQUESTS, budget, cost, on_candidate)

    def test_case(case):
        plan = backend_plan(backend, model, [case], judge=judge, probe="off", suffix=suffix, timeout=timeout)
        try:
            return holds(verdict.judge(plan, INLINE), target)
        except Exception:  # noqa: BLE001 -- a candidate the judge could not finish is not this failure
            return None

    return shrink_case(target, test_case, prepare, budget, on_candidate, model)
