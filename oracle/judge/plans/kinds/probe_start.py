"""The drift probe's two verdicts begun beside the cases (the backend, pairs and probe kinds): the
probe's runs through the backend first (probe_runs.run_probe: every probe run checked for malformed
output before a fit reads it), its fit and the precision verdict then in the background
(worker.background: a forked child for the NumPy fit where the platform forks, else a thread; the
JAX judge's jvp and twin on a thread). The fits and the wait for them after the cases are
probe_finish.py."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import probe_finish as _finish
from ...probe import probe_runs as _probe_runs
from ...probe import knobs
from .. import worker as _worker
from ...probe.calibration import COARSE_HIDDEN, PROBE_REQUESTS
from ...probe.forwards import Forwards
from ..plan import VERDICTS, Executor, Probed


def begin(plan: Probed, ex: Executor, backend, caps, judge_caps=None, fwd: Forwards | None = None, how="both modes"):
    """The drift probe of a plan that probes (plan.probes()), begun (start_drift) through `backend`
    (the plan's, or it guarded), its phase heard. caps, judge_caps: the backend's and the judge's
    Capabilities, read by the caller (judge_caps None: no judge)."""
    n = plan.probe_requests or PROBE_REQUESTS
    ex.phase("probe", f"{n} requests through the backend, {how}")
    return start_drift(backend, plan.model, plan.probe_reproduce, plan.judge, n, fwd, caps=caps, judge_caps=judge_caps)


@dataclass
class PendingDrift:
    """A drift verdict under way (start_drift): the probe ran; its fit runs in the background."""

    model: object
    runs: dict | None
    dtype: str
    reproduce: str
    stats_fn: object = None
    dirs: object = None  # the directions the drift verdict tests (knobs.directions, or the JAX judge's coarse ones)
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
            dirs = knobs.coarse_directions(model.cfg.num_layers)
        stats_fn = maker(model, backend.dtype, basis=None if dirs is None else np.stack([c for _, c in dirs]))
    dirs = knobs.directions(model.cfg.num_layers) if dirs is None else dirs  # the verdict's: every knob per layer
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
    check does next; probe_finish.finish_probe waits for it. None: no drift verdict
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
        job = (_finish.probe_and_fit, backend, model, n, reproduce, fits)
    else:  # the probe's runs now; the fit (NumPy, or the JAX judge's jvp and twin) beside what comes next
        p.runs, p.error, p.seconds = _probe_runs.run_probe(backend, model, n)
        job = None if p.error else (_finish.fits, model, p.runs, p.dtype, reproduce, *fits)
    p.job = None if job is None else _worker.background(*job)
    return p
