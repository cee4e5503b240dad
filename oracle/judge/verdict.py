"""One verdict (docs/DESIGN.md, "The verdict"): `judge(plan, executor)` is the one entry. The plan
(oracle/judge/plan.py) says what is compared, the executor where the work runs; it returns a
`Verdict`, a value that every entry renders (oracle/cli/render.py: text, JSON, HTML; the property
harness as an assertion; gpu_tests and scripts/gpu_parity_full.py as their summaries).

The work of a backend plan: the reference's sides made in the background (oracle/judge/cases.py),
begun before the backend loaded where the caller started them (`begin`); the drift probe through
the backend first, its fit and the precision verdict in the background (oracle/judge/drift.py);
the judge's runs in threads beside the backend's where the judge's side is a backend (pairs); every
backend run checked for malformed output (oracle/judge/malformed.py) before any twin, fit or
comparison reads it; the comparisons last (oracle/judge/compare.py, the one comparison).

A `Verdict`'s `ok` is derived from its checks, never set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import cases as _cases
from . import drift as _drift
from . import precision as _precision
from . import worker as _worker
from .kind_rules import rules as _rules
from .calibration import HOST_HIDDEN
from .compare import compare_runs
from .forwards import SIGMA, Forwards, of
from .malformed import side_problem
from .noise import twin_bounds
from .plan import Executor, Plan
from .runner import draws_host_stream, judge_run, run_scenario
from ..backends import GuardedBackend
from ..contract import capabilities, tolerance_row

COUNTERS = _cases.COUNTERS


row = tolerance_row  # the backend's row of TOLERANCES: "exact" for an exact backend, else its dtype


@dataclass(slots=True)
class Verdict:
    backend: str
    dtype: str
    exact: bool
    judge: str  # "reference" or the judge backend's name
    layers: int
    checks: list = field(default_factory=list)  # {"name", "ok", "detail"}, every check made
    cases: list = field(default_factory=list)  # {"name", "ok"} per case judged
    counters: dict = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    max_rel_err: dict = field(default_factory=lambda: {"kv": 0.0, "logits": 0.0})
    excused: list = field(default_factory=list)  # excused near-tie divergences, one line each
    skipped: list = field(default_factory=list)  # cases the backend's policies do not cover
    drift: object = None  # drift.DriftReport or None
    precision: object = None  # precision.PrecisionReport or None
    reports: list = field(default_factory=list)  # (label, compare.Report) per comparison
    runs: dict = field(default_factory=dict)  # case name -> mode -> the backend's ScenarioRun
    info: dict = field(default_factory=dict)  # what the entry adds (threads, timeout, times)
    seconds: float = 0.0
    kind: str = "backend"  # the plan's kind (oracle/judge/plan.py)

    @property
    def tolerance_row(self) -> str:
        return tolerance_row(self)

    @property
    def compared(self) -> bool:
        if self.kind == "probe":  # the probe's verdicts are what it compares
            return self.drift is not None or any(c["name"].startswith("drift probe") for c in self.checks)
        return (
            bool(self.cases)
            and bool(self.counters["request_rounds"])
            and bool(self.counters["tokens_compared"] + self.counters["logits_compared"])
        )

    @property
    def failed(self) -> list:
        """Every failed check; with none, "nothing compared" when nothing was."""
        bad = [c for c in self.checks if not c["ok"]]
        if not bad and not self.compared:  # a failed check already says why nothing was compared
            why = "; ".join(self.skipped) or "no request-round was compared"
            bad.append({"name": "nothing compared", "ok": False, "detail": f"nothing compared: {why}"})
        return bad

    @property
    def ok(self) -> bool:
        return not self.failed

    def first_failure(self) -> str:
        bad = self.failed
        if not bad:
            return ""
        more = (
            f" (+{len(bad) - 1} more failed checks: {', '.join(c['name'] for c in bad[1:4])})" if len(bad) > 1 else ""
        )
        return f"{bad[0]['name']}: {bad[0]['detail']}{more}"

    def probe_lines(self) -> list[str]:
        """The drift and precision reports' text (drift.drift_lines, precision.report_lines: renderings
        of their JSON), for the renderers, which import no part of the judge."""
        js = self.to_json()
        return (_drift.drift_lines(js["drift"]) if "drift" in js else []) + (
            _precision.report_lines(js["precision"]) if "precision" in js else []
        )

    def add(self, label: str, rep) -> None:
        """One comparison's report, summed in."""
        self.reports.append((label, rep))
        for k in COUNTERS:
            self.counters[k] += getattr(rep, k)
        for k in ("kv", "logits"):
            self.max_rel_err[k] = max(self.max_rel_err[k], rep.max_rel_err[k])
        self.excused += rep.divergences
        self.checks += [{"name": f"{label}: {c.name}", "ok": c.ok, "detail": c.detail} for c in rep.checks]

    def to_json(self) -> dict:
        out = {
            "ok": self.ok,
            "backend": self.backend,
            "dtype": self.dtype,
            "exact": self.exact,
            "judge": self.judge,
            "tolerance_row": self.tolerance_row,
            "layers": self.layers,
            **self.info,
            "checks": self.checks + [c for c in self.failed if c["name"] == "nothing compared"],
            "cases": self.cases,
            **self.counters,
            "excused_divergences": self.excused,
            "max_rel_err": self.max_rel_err,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 2),
            "kind": self.kind,
        }
        if self.drift is not None:
            out["drift"] = self.drift.to_json()
        if self.precision is not None:
            out["precision"] = self.precision.to_json()
        return out


# ---- the reference's sides, begun before the backend is loaded ----


def begin(model, cases, judge_name=None):
    """The reference's sides begun now, before the backend is loaded (its import overlaps them):
    a handle for judge(early=), or None where that does not apply (a --reference judge, a large
    model). Call cancel(handle) if the backend then fails to load."""
    if not _cases.sides_ahead_apply(model.cfg, judge_name):
        return None
    return _cases.start_sides(model, cases)


def cancel(handle) -> None:
    _cases.cancel_sides(handle)


# ---- judge: the one entry ----


def judge(plan: Plan, executor: Executor | None = None) -> Verdict:
    """The verdict of a plan (oracle/judge/plan.py), its work run where the executor says."""
    ex = executor or Executor()
    t0 = time.perf_counter()
    with ex.scope():
        v = _KINDS[plan.kind](plan, ex)
    v.kind = plan.kind
    v.seconds = time.perf_counter() - t0
    return v


def _backend(plan: Plan, ex: Executor) -> Verdict:
    """The backend on every case whose policy it supports, in both modes, against the judge's side
    (default: the FP32 reference), plus backend block vs backend loop; the drift probe's two verdicts
    where the plan probes. The run's forwards (forwards.Forwards: the twin's and the drift fit's) are
    made once, shared by the cases' twin bounds and the probe's two fits, and let go when it returns."""
    backend, model, judge, early = plan.backend, plan.model, plan.judge, ex.early
    v = _verdict(backend, judge, model)
    guarded = GuardedBackend(backend, plan.timeout) if plan.timeout is not None else backend
    gjudge = (
        None
        if judge is None
        else (GuardedBackend(judge, plan.timeout, judge=True) if plan.timeout is not None else judge)
    )
    # the run's forwards (the twin's and the drift fit's): those begun with the reference's sides, else new
    begun = None if early is None else early.fwd
    fwd = begun if begun is not None and begun.model is model else Forwards(model)
    if early is not None:
        early.fwd = None  # held by this run alone: let go when it returns
    ex.phase("cases", f"{len(plan.cases)} case(s), the reference's sides in the background")
    sides = (
        _cases.sides_for(early, backend)
        if early is not None
        else _cases.reference_sides(backend, model, plan.cases, judge, fwd)
    )
    n = plan.probe_requests or _drift.PROBE_REQUESTS
    if plan.probes():
        ex.phase("probe", f"{n} requests through the backend, both modes")
    pending = start_drift(guarded, model, plan.probe_reproduce, judge, n, fwd) if plan.probes() else None
    # JudgeFailed: the caller's to name
    judged = _judge_cases(v, guarded, model, plan.cases, plan.suffix, gjudge, sides, plan.catch, fwd, ex)
    for case, reports, runs in judged:
        ok = all(rep.ok for _, rep in reports)
        v.cases.append({"name": case.name, "ok": ok})
        v.runs[case.name] = runs
        for label, rep in reports:
            v.add(label, rep)
    if pending is not None:
        ex.phase("fit", "the drift and precision verdicts")
    _finish_probe(v, pending)
    return v


def _verdict(backend, judge, model) -> Verdict:
    return Verdict(
        backend.name,
        backend.dtype,
        bool(backend.exact),
        judge.name if judge is not None else "reference",
        model.cfg.num_layers,
    )


def _judge_cases(v: Verdict, bk, model, cases, suffix: str, judge, sides: dict, catch: bool, fwd, ex) -> list:
    """[(case, [(label, Report)], {mode: run})]: every case's backend runs first, then the comparisons."""
    pending = []
    todo = [c for c in cases if c.policy in bk.policies]
    for case in cases:
        if case.policy not in bk.policies:
            v.skipped.append(f"{case.name} (policy {case.policy} not supported by {bk.name})")
            continue
        ex.phase("case", f"{len(pending) + 1}/{len(todo)} {case.name}")
        runs: dict = {}
        reproduce = case.reproduce + suffix if case.reproduce else ""  # the property suite prints its own
        pending.append(
            (
                case,
                _cases.judge_backend(
                    bk,
                    model,
                    case,
                    reproduce,
                    case.name,
                    catch=catch,
                    judge=judge,
                    ref=sides.get(id(case)),
                    later=bool(sides),
                    runs_out=runs,
                    fwd=fwd,
                ),
                runs,
            )
        )
    if pending:
        ex.phase("compare", f"{len(pending)} case(s)")
    return [(case, reps.result() if isinstance(reps, _cases.Deferred) else reps, runs) for case, reps, runs in pending]


def _finish_probe(v: Verdict, pending) -> None:
    """The drift probe's verdicts into v: its reports and a failed check for each verdict that fails
    (or for the probe, where the backend raised or its output was malformed)."""
    rep, prec, error = finish_probe(pending)
    v.checks += probe_checks(rep, prec, error)
    v.drift, v.precision = rep, prec


def _probe_only(plan: Plan, ex: Executor) -> Verdict:
    """The drift probe's two verdicts alone: on the caller's probe runs (plan.probe_runs), else on
    runs made now through the backend."""
    backend, model = plan.backend, plan.model
    v = _verdict(backend, plan.judge, model)
    n = plan.probe_requests or _drift.PROBE_REQUESTS
    ex.phase("probe", f"{n} requests through the backend, both modes")
    if plan.probe_runs is None:
        guarded = GuardedBackend(backend, plan.timeout) if plan.timeout is not None else backend
        pending = start_drift(guarded, model, plan.probe_reproduce, plan.judge, n)
    else:
        runs = plan.probe_runs
        problem = probe_problem(model, runs)
        pending = _pending(backend, model, plan.probe_reproduce, plan.judge)
        pending.runs, pending.error = (None, problem) if problem else (runs, "")
    if pending is None:
        v.skipped.append(f"no probe verdict applies to {backend.name} ({backend.dtype})")
    else:
        ex.phase("fit", "the drift and precision verdicts")
    _finish_probe(v, pending)
    return v


def _fits(
    model,
    runs: dict,
    dtype: str,
    reproduce: str = "",
    stats_fn=None,
    dirs=None,
    energy_fn=None,
    fwd: Forwards | None = None,
) -> tuple:
    """(DriftReport, PrecisionReport or None) over the probe's runs: the drift fit, and the error
    energy against the noise twin (oracle/judge/precision.py; None without a twin: FP32). With the
    NumPy sensitivities both use the twin's forwards at the backend's tokens, made once (on fwd,
    the run's forwards; None: made for these two fits); with the JAX judge's (stats_fn), its twin
    is energy_fn (judge_jax/twin.py)."""
    fwd = of(model, fwd)
    prec = _precision.fit(model, runs, dtype, reproduce, energy_fn, fwd) if stats_fn is None or energy_fn else None
    return _drift.fit(model, runs, dtype, reproduce, stats_fn, dirs, fwd), prec


# ---- the drift probe's two verdicts, scheduled beside the cases ----


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
    job: object = None  # worker.background's handle of the NumPy fit
    seconds: float = 0.0  # the probe's runs
    error: str = ""  # the backend raised during the probe, or its output was malformed


def _pending(backend, model, reproduce: str = "", judge=None, fwd: Forwards | None = None) -> PendingDrift:
    """The fit's inputs for a backend's probe: the JAX judge's sensitivities and twin where the judge
    offers them (capabilities: drift_stats_fn, precision_energy_fn), else the NumPy fits on fwd."""
    key = (judge, model, backend.dtype)
    if judge is not None and _JUDGE_FITS and _JUDGE_FITS[0][0] == key:  # its jitted functions, made once
        stats_fn, dirs, energy_fn = _JUDGE_FITS[0][1]
        return PendingDrift(model, None, backend.dtype, reproduce, stats_fn, dirs, energy_fn, fwd)
    stats_fn = dirs = None
    caps = None if judge is None else capabilities(judge)
    maker = None if caps is None else caps.drift_stats_fn
    if maker is not None:
        if model.cfg.hidden_size >= _drift.COARSE_HIDDEN:  # per layer would cost one jvp per knob
            dirs = _drift.coarse_directions(model.cfg.num_layers)
        stats_fn = maker(model, backend.dtype, basis=None if dirs is None else np.stack([c for _, c in dirs]))
    twin = None if caps is None else caps.precision_energy_fn
    energy_fn = twin(model, backend.dtype) if twin is not None and stats_fn is not None else None
    if stats_fn is not None:
        _JUDGE_FITS[:] = [(key, (stats_fn, dirs, energy_fn))]  # the last judge's only: a model is large
    return PendingDrift(model, None, backend.dtype, reproduce, stats_fn, dirs, energy_fn, fwd)


_JUDGE_FITS: list = []  # [((judge, model, dtype), (stats_fn, dirs, energy_fn))]: the last one made


def start_drift(
    backend, model, reproduce: str = "", judge=None, n: int = _drift.PROBE_REQUESTS, fwd: Forwards | None = None
) -> PendingDrift | None:
    """The drift verdict of an inexact backend, begun: the probe's runs through the backend now, the
    fit in the background (worker.background: a forked child for the NumPy fit where the platform
    forks, else a thread; with a JAX judge its jvp and twin on a thread), so that it overlaps what the
    check does next; finish_probe waits for it. None: no drift verdict
    applies (exact or FP32: the value rows are far tighter than any drift; no policy: nothing ran).
    fwd: the run's forwards, for the NumPy fits (a forked fit works on its copy)."""
    if backend.exact or backend.dtype in ("float32", "float64") or not backend.policies:
        return None
    pending = _pending(backend, model, reproduce, judge, fwd)
    if pending.stats_fn is None and capabilities(backend).fork_safe and _worker.forks():
        # the probe's runs and the fit in one forked child, beside the cases' runs in this process
        pending.job = _worker.background(_probe_and_fit, backend, model, n, reproduce, fwd)
        return pending
    pending.runs, pending.error, pending.seconds = _probe(backend, model, n)
    if not pending.error:  # the fit (NumPy, or the JAX judge's jvp and twin) beside what comes next
        p = pending
        p.job = _worker.background(_fits, model, p.runs, p.dtype, reproduce, p.stats_fn, p.dirs, p.energy_fn, fwd)
    return pending


def _probe(backend, model, n: int) -> tuple:
    """(the probe's runs, "", seconds), or (None, the backend's exception or the first malformed
    round in a line, seconds): a malformed probe is a failed check naming the place, not a fit."""
    t0 = time.perf_counter()
    try:
        runs = _drift.probe_runs(backend, model, n)
    except Exception as e:  # noqa: BLE001 -- judged: a failed drift check
        return None, f"drift probe: the backend raised {type(e).__name__}: {e}", time.perf_counter() - t0
    problem = probe_problem(model, runs)
    return (None if problem else runs), problem, time.perf_counter() - t0


def probe_problem(model, runs: dict) -> str:
    """The first malformed round of the probe's runs (malformed.side_problem), as a line naming the
    mode; "" if none."""
    for mode, run in runs.items():
        why = side_problem(run.traces, model.cfg)
        if why:
            return f"drift probe [{mode}]: {why}"
    return ""


def _probe_and_fit(backend, model, n: int, reproduce: str, fwd: Forwards | None = None):
    """start_drift's probe and fit in a forked child (on its copy of fwd): ((DriftReport,
    PrecisionReport) or None, the probe's error)."""
    backend = backend.fresh() if hasattr(backend, "fresh") else backend  # a guard with its own thread here
    runs, error, seconds = _probe(backend, model, n)
    if error:
        return None, error
    reps = _fits(model, runs, backend.dtype, reproduce, fwd=fwd)
    reps[0].seconds += seconds
    return reps, ""


def finish_probe(pending: PendingDrift | None) -> tuple:
    """(DriftReport or None, PrecisionReport or None, the probe's error or ""): the verdicts of
    start_drift, waited for."""
    if pending is None:
        return None, None, ""
    if pending.error:
        return None, None, pending.error
    reps = (
        pending.job.result()
        if pending.job is not None
        else _fits(
            pending.model,
            pending.runs,
            pending.dtype,
            pending.reproduce,
            pending.stats_fn,
            pending.dirs,
            pending.energy_fn,
            pending.fwd,
        )
    )
    if isinstance(reps[1], str):  # _probe_and_fit's: the probe ran in the child
        reps, error = reps
        if error:
            return None, None, error
    rep, prec = reps
    rep.seconds += pending.seconds
    return rep, prec, ""


def probe_checks(rep, prec, error: str) -> list[dict]:
    """The probe's checks: "drift probe: drift" (or the probe's error) and "drift probe: precision"."""
    if error:
        name = "drift probe: malformed" if ": the backend raised " not in error else "drift probe: drift"
        return [{"name": name, "ok": False, "detail": error}]
    out = [] if rep is None else [{"name": "drift probe: drift", "ok": rep.ok, "detail": rep.failure}]
    return out + ([] if prec is None else [{"name": "drift probe: precision", "ok": prec.ok, "detail": prec.failure}])


# ---- one mode per case, the judge's side in threads (scripts/gpu_parity_full.py) ----


class Budget:
    """Bytes of device memory held by the judge's runs in flight: a run waits until its KV fits
    beside the others (or none is in flight)."""

    def __init__(self, total: int):
        import threading

        self.total, self.used, self.cond = total, 0, threading.Condition()

    def take(self, n: int):
        with self.cond:
            self.cond.wait_for(lambda: self.used == 0 or self.used + n <= self.total)
            self.used += n

    def give(self, n: int):
        with self.cond:
            self.used -= n
            self.cond.notify_all()


def _pairs(plan: Plan, ex: Executor) -> Verdict:
    """The backend's run of each (case, mode) against the judge backend's run of it (no block-vs-loop),
    and the drift probe's verdicts where the plan probes: its runs through the backend first, its fit
    (the judge's jvp and twin) on a thread beside the cases, waited for after them. With a backend
    that draws each request's host stream the judge's runs need nothing of the backend's: they run
    ex.threads at a time in threads beside the backend's (XLA compiles release the GIL), each waiting
    until ex.kv_bytes(case) fits in ex.budget_bytes; else the judge replays each backend run's uniforms
    after it. plan.options(case): session options of both sides."""
    backend, judge, model = plan.backend, plan.judge, plan.model
    t0 = time.perf_counter()
    options = plan.options or (lambda case: {})
    v = _verdict(backend, judge, model)
    dtype = row(backend)
    pairs = [(c, m) for c, m in plan.pairs if c.policy in backend.policies]
    v.skipped += [
        f"{c.name} (policy {c.policy} not supported by {backend.name})" for c, m in plan.pairs if (c, m) not in pairs
    ]
    ahead = draws_host_stream(backend) and ex.threads > 0
    budget = Budget(ex.budget_bytes) if ahead and ex.budget_bytes else None

    def side(case, mode, replay_from=None):
        need = ex.kv_bytes(case) if budget is not None and ex.kv_bytes is not None else 0
        if budget is not None:
            budget.take(need)
        try:
            t = time.perf_counter()
            run = judge_run(model, case, mode, replay_from=replay_from, judge=judge, **options(case))
            run.session = None  # its device KV let go
            return run, time.perf_counter() - t
        finally:
            if budget is not None:
                budget.give(need)

    pool = futures = None
    if ahead:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(ex.threads, thread_name_prefix="judge")
        futures = [pool.submit(side, case, mode) for case, mode in pairs]
    pending = None
    try:
        if plan.probes():  # first: its fit then runs on a thread beside the judge's runs and the cases
            n = plan.probe_requests or _drift.PROBE_REQUESTS
            ex.phase("probe", f"{n} requests through the backend, both modes, fitted by the judge beside the cases")
            pending = start_drift(backend, model, plan.probe_reproduce, judge, n)
        for i, (case, mode) in enumerate(pairs):
            ex.phase("case", f"{i + 1}/{len(pairs)} {case.name} [{mode}]")
            t = time.perf_counter()
            got = run_scenario(backend, model, case, mode, **options(case))
            got.session = None
            tb = time.perf_counter() - t
            why = side_problem(got.traces, model.cfg)
            if why:
                if futures is not None:
                    futures[i].cancel()
                rep, tj = _cases.malformed(case.name, why, plan.reproduce), 0.0
            else:
                ref, tj = futures[i].result() if ahead else side(case, mode, replay_from=got)
                rep = compare_runs(ref.traces, got.traces, dtype, plan.reproduce, case.name)
            v.cases.append(
                {
                    "name": case.name,
                    "ok": rep.ok,
                    "mode": mode,
                    "backend_s": round(tb, 1),
                    "judge_s": round(tj, 1),
                    "done_at_s": round(time.perf_counter() - t0, 1),
                }
            )
            v.runs[case.name] = {mode: got}
            v.add(case.name, rep)
            if ex.on_case is not None:
                ex.on_case(case, mode, rep, tb, tj)
    finally:
        if pool is not None:
            for f in futures:
                f.cancel()
            pool.shutdown(wait=True)
    _finish_probe(v, pending)
    return v


# ---- block vs loop on the reference (`python -m oracle check` without --backend) ----


def _reference(plan: Plan, ex: Executor) -> Verdict:
    """The reference's block and loop runs of every case, bit for bit, with each run's schedule, KV
    frontiers and the cache-free recompute (cases.check_case)."""
    v = Verdict("reference", "float32", True, "reference", plan.model.cfg.num_layers)
    for n, case in enumerate(plan.cases):
        ex.phase("case", f"{n + 1}/{len(plan.cases)} {case.name}")
        rep = _cases.check_case(plan.model, case)
        v.add(case.name, rep)
        v.cases.append(
            {
                "name": case.name,
                "ok": rep.ok,
                "d": case.d,
                "D": case.D,
                "policy": case.policy,
                "requests": len(case.prompts),
                "rounds": len(case.rounds),
            }
        )
    return v


# ---- recorded traces (trace diff; gpu_tests' pairs of runs) ----


def _traces(plan: Plan, ex: Executor) -> Verdict:
    """Recorded traces: B (plan.traces[1]) against A by tolerance row plan.row. A reduced-precision row
    is judged by the noise twin's bounds at A's contexts where the plan has the model (below
    calibration.HOST_HIDDEN) and asks for no fixed row, as `check --backend` judges; else by the row's
    fixed tolerances. info["bounds"] says which. Either side malformed is a failed check, before any
    twin is made from it."""
    a, b = plan.traces
    row_, model = plan.row, plan.model
    v = Verdict(plan.names[1], row_, row_ == "exact", plan.names[0], 0 if model is None else model.cfg.num_layers)
    cfg = None if model is None else model.cfg
    vocab = _vocab(a) if cfg is None else None
    bad = [(name, side_problem(t, cfg, vocab)) for name, t in zip(plan.names, (a, b))]
    bad = [(name, why) for name, why in bad if why]
    v.cases.append({"name": "traces", "ok": not bad})
    if bad:
        v.add("traces", _cases.malformed(bad[0][0], bad[0][1], plan.reproduce))
        v.info["bounds"] = "not compared"
        return v
    twin = model is not None and plan.tolerance == "auto" and row_ in SIGMA and model.cfg.hidden_size < HOST_HIDDEN
    bounds = None
    if twin:
        ex.phase("twin", "the noise twin's bounds")
        bounds = twin_bounds(model, a, row_)
    if bounds is not None and plan.both_noisy:
        bounds.scale = 2**0.5  # both sides carry the precision's noise
    rep = compare_runs(a, b, row_, plan.reproduce, bounds=bounds)
    v.add("traces", rep)
    v.cases[-1]["ok"] = rep.ok
    v.info["bounds"] = "noise twin" if twin else ("exact" if row_ == "exact" else "fixed row")
    return v


def _vocab(traces) -> int | None:
    """The vocabulary size recorded traces imply (the length of a logits vector), or None."""
    for t in traces:
        for lg in list(t.verify_logits.values())[:1]:
            return len(np.asarray(lg).reshape(-1))
    return None


_KINDS = {"reference": _reference, "backend": _backend, "pairs": _pairs, "traces": _traces, "probe": _probe_only}
_KINDS["rules"] = lambda plan, ex: _rules(plan, Verdict)  # oracle/judge/kind_rules.py
