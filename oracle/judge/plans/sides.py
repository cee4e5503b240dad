"""The reference's sides of a backend plan's cases (`python -m oracle check --backend`, the property
harness), made before the cases are judged: each case's FP32 reference run, its noise-twin bounds
and typical norms, made in the background (oracle/judge/plans/worker.py) while the backend runs,
and begun before the backend is loaded where the model is small (`start_sides`, verdict.begin).
The cases are judged against them in oracle/judge/plans/cases.py."""

from __future__ import annotations

from dataclasses import dataclass

from ..comparison.compare import typical_norms
from ..probe.calibration import HOST_HIDDEN, SIGMA
from ..probe.forwards import Forwards, of
from ..probe.noise import twin_bounds
from ..runner import REFERENCE, judge_run, run_scenario
from .worker import Inbox, Part, background


# The reference's side of a case: the FP32 reference's run of it and its noise-twin bounds, made
# once, in the background (worker.background: a forked child where the platform forks, so both
# overlap the backend's runs), and judged against in both modes: a handle whose result() is
# (the reference's round traces, their twin bounds or None, their typical_norms). The reference's
# block and loop rounds agree bit for bit (cases.check_case checks it on every built-in case,
# tests/test_rounds.py on drawn ones), so a backend drawing each request's host stream is judged
# against the one run in either mode; the mode-specific part of its traces, the calls, is checked
# against the backend's own plan (compare_runs). One job makes every case's side (`sides`: each a
# worker.Part of it), or cases.judge_backend makes one case's; fwd: the run's forwards (the twin's; a
# forked job works on its copy).


def reference_side(model, sc, dtype: str, options: dict, traces=None, fwd: Forwards | None = None):
    """(the reference's block traces of sc, their twin bounds or None, their typical_norms);
    traces: that run, made before; fwd: the forwards the twin bounds are made on."""
    traces = judge_run(model, sc, "block", **options).traces if traces is None else traces
    return (
        traces,
        twin_bounds(model, traces, dtype, fwd=fwd) if dtype in SIGMA else None,
        None if dtype == "exact" else [typical_norms(t) for t in traces],
    )


def _reference_sides(model, cases, dtype: str, fwd: Forwards | None = None) -> list:
    fwd = of(model, fwd)  # one for every case of the job
    return [reference_side(model, c, dtype, {}, fwd=fwd) for c in cases]


# ---- every case's side in one job (`python -m oracle check --backend`) ----

# Below calibration.HOST_HIDDEN the reference sides of every case are made in one background job
# started before the backend's runs (one forked child: a fork per case cost more CPU than it
# saved beside a busy process); above it one case at a time.


def sides(early, backend, model, cases, judge, caps, dtype: str) -> tuple[dict, Forwards]:
    """(id(case) -> the reference's side, the run's forwards) for every case cases.judge_cases will judge against
    the reference (a host-stream backend, no --reference judge), all made by one background job: the
    one start_sides began before the backend loaded (early: its handle, sent the backend's facts
    now), else one started now, so that they are made while the backend runs; {} where none applies
    or the model is large (cases.judge_backend then makes each in turn). The run's forwards (the twin's
    and the drift fit's): those begun with the early sides, else new. caps, dtype: the backend's
    Capabilities and tolerance row, read by the caller."""
    begun = None if early is None else early.fwd
    fwd = begun if begun is not None and begun.model is model else Forwards(model)
    host = caps.host_rng
    if early is not None:
        early.fwd = None  # held by this run alone: let go when it returns
        early.facts.send((dtype, tuple(backend.policies)) if host else None)  # None: the job ends
        job, todo = early.job, list(enumerate(early.cases))  # the job's list holds every case
    elif judge is None and host and model.cfg.hidden_size < HOST_HIDDEN:
        supported = [c for c in cases if c.policy in backend.policies]
        job, todo = background(_reference_sides, model, supported, dtype, fwd), list(enumerate(supported))
    else:
        return {}, fwd
    if not host:
        return {}, fwd
    return {id(c): Part(job, i) for i, c in todo if c.policy in backend.policies}, fwd


# ---- the reference's sides begun before the backend is loaded ----
#
# On a model of hidden size below HOST_HIDDEN each case's reference run needs nothing of the
# backend: one background job starts the runs before the backend's import (torch: about 2 s of CPU
# on the 2-core machines CI uses) and receives through an Inbox, once the backend is loaded, what
# the twin bounds need (its dtype and policies): each case's reference block run -> (dtype,
# policies) -> each case's twin bounds. A backend that draws no host stream ends the job at once;
# one that fails to load cancels it. (The drift probe's reference side is not begun ahead: the BF16
# backend commits other tokens than the reference on about half of the probe's requests, 11 of 24
# on the tiny preset, so forwards at the reference's tokens would mostly be made again.)


@dataclass
class Ahead:
    cases: list
    job: object  # worker.background handle: [(traces, bounds, norms) | None per case] or None
    facts: Inbox
    fwd: Forwards | None = None  # the forwards of the run it begins (verdict.judge takes them on)


def sides_ahead_apply(model_cfg, judge_name) -> bool:
    """Whether `check --backend` begins the reference's sides ahead: the NumPy reference is the judge
    (no --reference) and the model is small enough for them to be made at once."""
    return judge_name in (None, "reference") and model_cfg.hidden_size < HOST_HIDDEN


def start_sides(model, cases) -> Ahead:
    facts, fwd = Inbox(), Forwards(model)
    return Ahead(cases, background(_sides_job, model, cases, facts, fwd), facts, fwd)


def cancel_sides(ahead: Ahead | None) -> None:
    """The backend did not load: the job ends (its input cancelled, its child stopped)."""
    if ahead is not None:
        ahead.facts.cancel()
        if hasattr(ahead.job, "stop"):
            ahead.job.stop()


def _sides_job(model, cases, facts: Inbox, fwd: Forwards | None = None):
    traces = [run_scenario(REFERENCE, model, c, "block").traces for c in cases]
    got = facts.get()
    if got is None:
        return None
    dtype, policies = got
    fwd = of(model, fwd)
    return [
        reference_side(model, c, dtype, {}, traces=t, fwd=fwd) if c.policy in policies else None
        for c, t in zip(cases, traces)
    ]
