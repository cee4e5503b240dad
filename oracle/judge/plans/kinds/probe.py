"""The drift probe alone: its drift and precision verdicts (`check --probe-requests N`, the probe
tests, the calibration scripts, which may pass the probe's runs they made)."""

from __future__ import annotations

from . import probe_finish, probe_start
from ...probe import probe_runs
from ...probe.calibration import PROBE_REQUESTS
from ..plan import Executor, ProbePlan
from ....runtime.backends import GuardedBackend
from ....runtime.contract import capabilities


def run(plan: ProbePlan, ex: Executor, v) -> None:
    """The drift probe's two verdicts (or those plan.verdicts names, the drift's floor and rho where
    plan.allowance gives them, on plan.forwards where given): on the caller's probe runs (plan.runs),
    else on runs made now through the backend."""
    backend, model = plan.backend, plan.model
    n = plan.probe_requests or PROBE_REQUESTS
    ex.phase("probe", f"{n} requests through the backend, both modes")
    fits = (plan.forwards, plan.verdicts, plan.allowance)
    jcaps = None if plan.judge is None else capabilities(plan.judge)
    if plan.runs is None:
        guarded = GuardedBackend(backend, plan.timeout) if plan.timeout is not None else backend
        caps = capabilities(backend)
        pending = probe_start.start_drift(guarded, model, plan.probe_reproduce, plan.judge, n, *fits, caps, jcaps)
    else:
        problem = probe_runs.probe_problem(model, plan.runs)
        pending = probe_start.pending_for(backend, model, plan.probe_reproduce, plan.judge, *fits, jcaps)
        pending.runs, pending.error = (None, problem) if problem else (plan.runs, "")
    if pending is None:
        v.skipped.append(f"no probe verdict applies to {backend.name} ({backend.dtype})")
    probe_finish.finish(v, pending, ex)
