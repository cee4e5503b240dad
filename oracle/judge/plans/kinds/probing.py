"""The drift probe's two verdicts scheduled beside the cases (the backend, pairs and probe kinds):
the probe's runs through the backend first, its fit and the precision verdict in the background
(worker.background: a forked child for the NumPy fit where the platform forks, else a thread; the
JAX judge's jvp and twin on a thread), waited for after the cases (`finish`). Every probe run is
checked for malformed output (malformed.side_problem) before a fit reads it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...probe import drift as _drift
from ...probe import drift_model
from ...probe import precision as _precision
from .. import worker as _worker
from ...probe.calibration import COARSE_HIDDEN, PROBE_REQUESTS
from ...probe.forwards import Forwards, of
from ..plan import VERDICTS, Executor, Probed


def begin(plan: Probed, ex: Executor, backend, caps, judge_caps=None, fwd: Forwards | None = None, how="both modes"):
    """The drift probe of a plan that probes (plan.probes()), begun (start_drift) through `backend`
    (the plan's, or it guarded), its phase heard. caps, judge_caps: the backend's and the judge's
    Capabilities, read by the caller (judge_caps None: no judge)."""
    n = plan.probe_requests or PROBE_REQUESTS
    ex.phase("probe", f"{n} requests through the backend, {how}")
    return start_drift(backend, plan.model, plan.probe_reproduce, plan.judge, n, fwd, caps=caps, judge_caps=judge_caps)


def finish(v, pending, ex: Executor | None = None) -> None:
    """The drift probe's verdicts into v, waited for: its reports and a failed check for each verdict
    that fails (or for the probe, where the backend raised or its output was malformed)."""
    if pending is not None and ex is not None:
        ex.phase("fit", "the drift and precision verdicts")
    rep, prec, error = finish_probe(pending)
    v.checks += probe_checks(rep, prec, error)
    v.drift, v.precision = rep, prec


def _fits(
    model,
    runs: dict,
    dtype: str,
    reproduce: str = "",
    stats_fn=None,
    dirs=None,
    energy_fn=None,
    fwd: Forwards | None = None,
    verdicts: tuple = VERDICTS,
    allowance: tuple = (),
) -> tuple:
    """(DriftReport, PrecisionReport or None) over the probe's runs: the drift fit, and the error
    energy against the noise twin (oracle/judge/probe/precision.py; None without a twin: FP32). With the
    NumPy sensitivities both use the twin's forwards at the backend's tokens, made once (on fwd,
    the run's forwards; None: made for these two fits); with the JAX judge's (stats_fn), its twin
    is energy_fn (judge_jax/twin.py). verdicts: those fitted (one left out: None); allowance: the
    drift's (floor, rho) (drift.fit)."""
    fwd = of(model, fwd)
    prec = None
    if "precision" in verdicts and (stats_fn is None or energy_fn):
        prec = _precision.fit(model, runs, dtype, reproduce, energy_fn, fwd)
    rep = _drift.fit(model, runs, dtype, reproduce, stats_fn, dirs, fwd, allowance) if "drift" in verdicts else None
    return rep, prec


@dataclass
class PendingDrift:
    """A drift verdict under way (start_drift): the probe ran; its fit runs in the background."""

    model: object
    runs: dict | None
    dtype: str
    reproduce: str
    stats_fn: object = None
    dirs: object = None
    energy_fn: object = None  # the JAX judge's noise twin (judge_jax/twin.py), or None
    fwd: object = None  # the run's forwards.Forwards (the NumPy fits'), or None: made for the fits
    verdicts: tuple = VERDICTS  # the verdicts fitted (ProbePlan.verdicts)
    allowance: tuple = ()  # the drift's (floor, rho), or (): the model's (ProbePlan.allowance)
    job: object = None  # worker.background's handle of the NumPy fit
    seconds: float = 0.0  # the probe's runs
    error: str = ""  # the backend raised during the probe, or its output was malformed


def pending_for(
    backend,
    model,
    reproduce: str = "",
    judge=None,
    fwd: Forwards | None = None,
    verdicts=VERDICTS,
    allowance=(),
    judge_caps=None,
) -> PendingDrift:
    """The fit's inputs for a backend's probe: the JAX judge's sensitivities and twin where the judge
    offers them (judge_caps, its Capabilities read by the caller: drift_stats_fn, precision_energy_fn),
    else the NumPy fits on fwd. Without the drift verdict (verdicts): the judge's twin where it offers
    one, else the NumPy twin."""
    key = (judge, model, backend.dtype)
    p = PendingDrift(model, None, backend.dtype, reproduce, fwd=fwd, verdicts=verdicts, allowance=allowance)
    if "drift" in verdicts and judge is not None and _JUDGE_FITS and _JUDGE_FITS[0][0] == key:  # made once
        p.stats_fn, p.dirs, p.energy_fn = _JUDGE_FITS[0][1]
        return p
    caps = judge_caps
    if "drift" not in verdicts:
        twin = None if caps is None else caps.precision_energy_fn
        p.energy_fn = None if twin is None else twin(model, backend.dtype)
        return p
    stats_fn = dirs = None
    maker = None if caps is None else caps.drift_stats_fn
    if maker is not None:
        if model.cfg.hidden_size >= COARSE_HIDDEN:  # per layer would cost one jvp per knob
            dirs = drift_model.coarse_directions(model.cfg.num_layers)
        stats_fn = maker(model, backend.dtype, basis=None if dirs is None else np.stack([c for _, c in dirs]))
    twin = None if caps is None else caps.precision_energy_fn
    energy_fn = twin(model, backend.dtype) if twin is not None and stats_fn is not None else None
    if stats_fn is not None:
        _JUDGE_FITS[:] = [(key, (stats_fn, dirs, energy_fn))]  # the last judge's only: a model is large
    p.stats_fn, p.dirs, p.energy_fn = stats_fn, dirs, energy_fn
    return p


_JUDGE_FITS: list = []  # [((judge, model, dtype), (stats_fn, dirs, energy_fn))]: the last one made


def start_drift(
    backend,
    model,
    reproduce: str = "",
    judge=None,
    n: int = PROBE_REQUESTS,
    fwd: Forwards | None = None,
    verdicts: tuple = VERDICTS,
    allowance: tuple = (),
    caps=None,
    judge_caps=None,
) -> PendingDrift | None:
    """The drift verdict of an inexact backend, begun: the probe's runs through the backend now, the
    fit in the background (worker.background: a forked child for the NumPy fit where the platform
    forks, else a thread; with a JAX judge its jvp and twin on a thread), so that it overlaps what the
    check does next; finish_probe waits for it. None: no drift verdict
    applies (exact or FP32: the value rows are far tighter than any drift; no policy: nothing ran).
    fwd: the run's forwards, for the NumPy fits (a forked fit works on its copy). verdicts, allowance:
    ProbePlan's. caps, judge_caps: the backend's and the judge's Capabilities, read by the caller."""
    assert caps is not None, "start_drift: the caller reads the backend's Capabilities"
    if backend.exact or backend.dtype in ("float32", "float64") or not backend.policies:
        return None
    p = pending_for(backend, model, reproduce, judge, fwd, verdicts, allowance, judge_caps)
    fits = (p.stats_fn, p.dirs, p.energy_fn, fwd, verdicts, allowance)
    if p.stats_fn is None and p.energy_fn is None and caps.fork_safe and _worker.forks():
        # the probe's runs and the fit in one forked child, beside the cases' runs in this process
        job = (_probe_and_fit, backend, model, n, reproduce, fits)
    else:  # the probe's runs now; the fit (NumPy, or the JAX judge's jvp and twin) beside what comes next
        p.runs, p.error, p.seconds = _drift.run_probe(backend, model, n)
        job = None if p.error else (_fits, model, p.runs, p.dtype, reproduce, *fits)
    p.job = None if job is None else _worker.background(*job)
    return p


def _probe_and_fit(backend, model, n: int, reproduce: str, fits: tuple):
    """start_drift's probe and fit in a forked child (fits: _fits's arguments after reproduce, on its
    copy of the forwards): ((DriftReport or None, PrecisionReport or None) or None, the probe's error)."""
    backend = backend.fresh() if hasattr(backend, "fresh") else backend  # a guard with its own thread here
    runs, error, seconds = _drift.run_probe(backend, model, n)
    if error:
        return None, error
    reps = _fits(model, runs, backend.dtype, reproduce, *fits)
    if reps[0] is not None:
        reps[0].seconds += seconds
    return reps, ""


def finish_probe(pending: PendingDrift | None) -> tuple:
    """(DriftReport or None, PrecisionReport or None, the probe's error or ""): the verdicts of
    start_drift, waited for."""
    if pending is None:
        return None, None, ""
    if pending.error:
        return None, None, pending.error
    p = pending
    fits = (p.stats_fn, p.dirs, p.energy_fn, p.fwd, p.verdicts, p.allowance)
    reps = p.job.result() if p.job is not None else _fits(p.model, p.runs, p.dtype, p.reproduce, *fits)
    if isinstance(reps[1], str):  # _probe_and_fit's: the probe ran in the child
        reps, error = reps
        if error:
            return None, None, error
    rep, prec = reps
    if rep is not None:
        rep.seconds += pending.seconds
    return rep, prec, ""


def probe_checks(rep, prec, error: str) -> list[dict]:
    """The probe's checks: "drift probe: drift" (or the probe's error) and "drift probe: precision"."""
    if error:
        name = "drift probe: malformed" if ": the backend raised " not in error else "drift probe: drift"
        return [{"name": name, "ok": False, "detail": error, "failure": None}]
    out = [] if rep is None else [("drift probe: drift", rep)]
    out += [] if prec is None else [("drift probe: precision", prec)]
    return [{"name": name, "ok": r.ok, "detail": r.failure, "failure": None} for name, r in out]
