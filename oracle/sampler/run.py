"""One run of the sampler judge (`python -m oracle sampler`): the cases, each judged
(judge.py) while the budget lasts, failures shrunk (shrink.py), and the run's JSON object
(`Run.to_json`, a stable schema: SCHEMA)."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field

import numpy as np

from .cases import SamplerCase, to_json
from .judge import CaseResult, Settings, judge_case
from .shrink import shrink

SCHEMA = "oracle.sampler/1"


@dataclass(slots=True)
class Run:
    sampler: str  # the --backend spec
    settings: Settings
    seed: int
    planned: int  # cases drawn or given
    results: list = field(default_factory=list)  # CaseResult
    stopped: str = ""  # why cases were left unjudged ("budget")
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every test held, and there was one: a run that judged nothing (every case refused or
        skipped) fails, as a check that compares nothing does."""
        return any(r.tests for r in self.results) and all(r.ok for r in self.results)

    def reproduce(self, case: SamplerCase) -> str:
        exact = " --exact" if self.settings.exact else ""
        spec, case_json = shlex.quote(self.sampler), shlex.quote(to_json(case))
        return f"python -m oracle sampler --backend {spec}{exact} --case-json {case_json}"

    def to_json(self) -> dict:
        st = self.settings
        return {
            "schema": SCHEMA,
            "ok": self.ok,
            "sampler": self.sampler,
            "mode": "exact" if st.exact else "distribution",
            "seed": self.seed,
            "alpha_familywise": st.alpha,
            "tests_in_family": st.family,
            "alpha_per_test": st.alpha / st.family,
            "tv_detected": st.delta,
            "power": st.power,
            "cases_planned": self.planned,
            "cases_judged": sum(1 for r in self.results if not r.skipped),
            "stopped": self.stopped or None,
            "seconds": round(self.seconds, 3),
            "cases": [self._case_json(r) for r in self.results],
        }

    def _case_json(self, r: CaseResult) -> dict:
        out = {
            "name": r.case.name,
            "ok": r.ok,
            "tags": list(r.case.tags),
            "skipped": r.skipped or None,
            "refused": r.refused,
            "draws": r.draws,
            "seconds": round(r.seconds, 3),
            "tests": [_test_json(t) for t in r.tests],
            "case_json": to_json(r.case),
        }
        if not r.ok:
            out["reproduce"] = self.reproduce(r.case)
        if r.shrunk:
            s = r.shrunk
            out["shrunk"] = {k: s[k] for k in ("from", "to", "tried", "steps", "partial")} | {
                "seconds": round(s["seconds"], 3),
                "reproduce": self.reproduce(s["case"]),
            }
        return out


def _test_json(t) -> dict:
    out = {"request": t.request, "kind": t.kind, "mode": t.mode, "ok": t.ok, "draws": t.draws}
    out["message"] = t.message or None
    if t.fit is not None:
        f = t.fit
        out |= {
            "chi_square": None if f.stat == float("inf") else round(f.stat, 4),
            "df": f.df,
            "p_value": f.p_value,
            "pooled_mass": f.pooled_mass,
            "null_draws": f.null_draws,
            "detects_tv": t.detects_tv,
            "worst": t.worst,
        }
    if t.expected is not None and t.observed is not None:
        K1, V = t.expected.shape
        cells = [(a, x) for a in range(K1) for x in range(V) if t.expected[a, x] > 0 or t.observed[a, x] > 0]
        out["outcomes"] = [[a, x, float(t.expected[a, x]), int(t.observed[a, x])] for a, x in cells]
    return out


def family_size(cases: list, exact: bool, sampler=None) -> int:
    """m: the sampled requests the distribution mode tests, less those the sampler refuses (at least 1)."""
    refuses = getattr(sampler, "refuses", None) or (lambda _: None)
    n = sum(1 for c in cases for r in c.requests if not r.params.greedy and not refuses(r))
    return 1 if exact else max(1, n)


def run(sampler, spec: str, cases: list, st: Settings, seed: int, budget, shrink_budget: float, say, fail_fast=False):
    """Judge the cases in order until the budget (seconds, None: none) is spent, or (fail_fast)
    a case failed; shrink each failure within shrink_budget seconds. -> Run"""
    t0 = time.perf_counter()
    out = Run(spec, st, seed, len(cases))
    for n, case in enumerate(cases):
        if budget is not None and time.perf_counter() - t0 > budget:
            out.stopped = f"budget of {budget:g} s spent: {len(cases) - n} of {len(cases)} cases not judged"
        if fail_fast and not out.ok:
            out.stopped = f"--fail-fast: {len(cases) - n} of {len(cases)} cases not judged after the first failure"
        if out.stopped:
            say(out.stopped)
            break
        say(f"{case.name}: {', '.join(case.tags)}")
        res = judge_case(sampler, case, st, np.random.default_rng([seed, n]), say)
        out.results.append(res)
        bad = [t for t in res.tests if not t.ok]
        if bad and shrink_budget > 0:
            judge_fn = lambda c, g: judge_case(sampler, c, st, g, lambda _: None)  # noqa: E731
            res.shrunk = shrink(judge_fn, case, bad[0].request, shrink_budget, seed, say)
    out.seconds = time.perf_counter() - t0
    return out
