"""A backend against the judge on many cases (`python -m oracle check --backend`, the property
harness), in the order `run` reads: the backend's Capabilities and tolerance row; the reference's
sides made in the background (oracle/judge/plans/sides.py), begun before the backend loaded where
the caller started them (verdict.begin); the drift probe through the backend, its fit and the
precision verdict then in the background (probe_start.py); the cases' runs, each checked for
malformed output (oracle/judge/comparison/malformed.py) before any twin, fit or comparison reads
it, and their comparisons (oracle/judge/plans/cases.py, oracle/judge/comparison/compare.py, the one
comparison); the exactness tier (invariance.py); the probe's verdicts, waited for (probe_finish.py)."""

from __future__ import annotations

from . import invariance, probe_finish, probe_start
from .. import cases as _cases
from .. import sides as _sides
from ..plan import BackendPlan, Executor
from ....runtime.backends import GuardedBackend
from ....runtime.contract import capabilities, tolerance_row


def run(plan: BackendPlan, ex: Executor, v) -> None:
    """The backend on every case whose policy it supports, in both modes, against the judge's side
    (default: the FP32 reference), plus backend block vs backend loop; the drift probe's two verdicts
    where the plan probes. The run's forwards (forwards.Forwards: the twin's and the drift fit's) are
    made once, shared by the cases' twin bounds and the probe's two fits, and let go when it returns.
    The backend's Capabilities (and the judge's) and its tolerance row are read here once and handed
    to the cases, the probe and the tier."""
    backend, model, judge, timeout = plan.backend, plan.model, plan.judge, plan.timeout
    caps, dtype = capabilities(backend), tolerance_row(backend)
    jcaps = None if judge is None else capabilities(judge)
    guarded = backend if timeout is None else GuardedBackend(backend, timeout)
    gjudge = judge if judge is None or timeout is None else GuardedBackend(judge, timeout, judge=True)
    ex.phase("cases", f"{len(plan.cases)} case(s), the reference's sides in the background")
    sides, fwd = _sides.sides(ex.early, backend, model, plan.cases, judge, caps, dtype)
    pending = probe_start.begin(plan, ex, guarded, caps, jcaps, fwd) if plan.probes() else None
    # JudgeFailed: the caller's to name
    judged = _cases.judge_cases(v, guarded, model, plan.cases, plan.suffix, gjudge, sides, plan.catch, fwd, ex, caps)
    for case, reports, runs in judged:
        ok = all(rep.ok for _, rep in reports)
        v.cases.append({"name": case.name, "ok": ok})
        v.runs[case.name] = runs
        for label, rep in reports:
            v.add(label, rep)
    if caps.batch_invariant:  # the exactness tier (kinds/invariance.py)
        invariance.tier(v, guarded, model, plan.cases, plan, ex)
    probe_finish.finish(v, pending, ex)
