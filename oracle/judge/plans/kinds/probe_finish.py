"""The drift probe's two verdicts after the cases (the backend, pairs and probe kinds): their fits
(`fits`: the precision verdict's error energies and the drift fit over the probe's runs; in the
background where probe_start.py began them, or here), waited for (`finish_probe`), and handed to the
verdict (`finish`: Verdict.add_probe)."""

from __future__ import annotations

import time

from ...probe import drift as _drift
from ...probe import probe_runs as _probe_runs
from ...probe import precision_fit as _precision_fit
from ...probe.forwards import Forwards, drift_contexts, of, span
from ...probe.noise import numpy_energy_fn
from ...probe.observations import observed
from ..plan import VERDICTS, Executor


def finish(v, pending, ex: Executor | None = None) -> None:
    """The drift probe's verdicts into v, waited for (pending: probe_start.start_drift's PendingDrift,
    or None): its reports and their checks (Verdict.add_probe)."""
    if pending is not None and ex is not None:
        ex.phase("fit", "the drift and precision verdicts")
    rep, prec, error = finish_probe(pending)
    v.add_probe(rep, prec, error)


def finish_probe(pending) -> tuple:
    """(DriftReport or None, PrecisionReport or None, the probe's error or ""): the verdicts of
    probe_start.start_drift, waited for."""
    if pending is None:
        return None, None, ""
    if pending.error:
        return None, None, pending.error
    p = pending
    args = (p.stats_fn, p.dirs, p.energy_fn, p.fwd, p.verdicts, p.allowance)
    reps = p.job.result() if p.job is not None else fits(p.model, p.runs, p.dtype, p.reproduce, *args)
    if isinstance(reps[1], str):  # probe_and_fit's: the probe ran in the child
        reps, error = reps
        if error:
            return None, None, error
    rep, prec = reps
    if rep is not None:
        rep.seconds += pending.seconds
    return rep, prec, ""


def fits(
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
    """(DriftReport, PrecisionReport or None) over the probe's runs, in order: what the runs
    committed (observations.observed: both fits' inputs, made once), the NumPy forwards both fits
    read (Forwards.probe_forwards on fwd, the run's forwards, None: made for these fits: the noise
    twin's at every request's span, the finite differences at the drift's), the precision verdict
    (precision_fit.py; None without a twin: FP32), then the drift fit (drift.fit_drift). With the
    JAX judge's sensitivities (stats_fn) its twin is energy_fn (judge_jax/twin.py) and no NumPy
    forward is made. dirs: the directions the drift verdict tests (probe_start.pending_for's);
    verdicts: those fitted (one left out: None); allowance: the drift's (floor, rho). The drift
    report's seconds count the forwards."""
    fwd = of(model, fwd)
    seen, merged = observed(runs.values())  # both fits' inputs: what the runs committed, made once
    precision = "precision" in verdicts and (stats_fn is None or energy_fn)
    twin_ctx = [span(*s) for s in seen.values()] if precision and energy_fn is None else []
    drift_ctx = drift_contexts(merged) if "drift" in verdicts and stats_fn is None else []
    t0 = time.perf_counter()
    twins, made = fwd.probe_forwards(twin_ctx, drift_ctx, dtype)  # both fits' forwards, once
    made_s = time.perf_counter() - t0
    prec = rep = None
    if precision:
        prec = _precision_fit.fit(model, seen, dtype, energy_fn or numpy_energy_fn(twins), reproduce)
    if "drift" in verdicts:
        rep = _drift.fit_drift(model, merged, dirs, reproduce, stats_fn, made, allowance)
        rep.seconds += made_s
    return rep, prec


def probe_and_fit(backend, model, n: int, reproduce: str, args: tuple):
    """probe_start.start_drift's probe and fit in a forked child (args: `fits`'s arguments after
    reproduce, on its copy of the forwards): ((DriftReport or None, PrecisionReport or None) or
    None, the probe's error)."""
    backend = backend.fresh() if hasattr(backend, "fresh") else backend  # a guard with its own thread here
    runs, error, seconds = _probe_runs.run_probe(backend, model, n)
    if error:
        return None, error
    reps = fits(model, runs, backend.dtype, reproduce, *args)
    if reps[0] is not None:
        reps[0].seconds += seconds
    return reps, ""
