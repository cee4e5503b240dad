"""One verdict (docs/DESIGN.md, "The verdict"): `judge(...)` judges a backend on cases and returns a
`Verdict`; every entry renders it (`check --backend` as text, --json or --report; the property
harness as an assertion; gpu_tests and scripts/gpu_parity_full.py as their summaries).

`judge` owns the scheduling: the reference's sides made in the background (oracle/judge/cases.py),
begun before the backend loaded where the caller started them (`begin`); the drift probe through
the backend first, its fit and the precision verdict in the background (oracle/judge/drift.py);
the judge's runs in threads beside the backend's where the judge's side is a backend (`threads`);
the comparisons last (oracle/judge/compare.py, the one comparison).

A `Verdict` is a value: its `ok` is derived from its checks, never set.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from . import cases as _cases
from . import drift as _drift
from . import precision as _precision
from . import worker as _worker
from .compare import compare_runs
from .decisions import trace_problem
from .forwards import SIGMA, Forwards, of
from .noise import twin_bounds
from .runner import draws_host_stream, judge_run, run_scenario
from ..backends import GuardedBackend
from ..contract import capabilities, tolerance_row
from ..traces import request_problem

COUNTERS = _cases.COUNTERS
AHEAD_HIDDEN = _cases.SIDES_AHEAD_HIDDEN  # up to this hidden size the reference's sides can be begun early


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

    @property
    def tolerance_row(self) -> str:
        return tolerance_row(self)

    @property
    def compared(self) -> bool:
        return (
            bool(self.cases)
            and bool(self.counters["request_rounds"])
            and bool(self.counters["tokens_compared"] + self.counters["logits_compared"])
        )

    @property
    def failed(self) -> list:
        """Every failed check, and "nothing compared" when nothing was."""
        bad = [c for c in self.checks if not c["ok"]]
        if not self.compared:
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
        }
        if self.drift is not None:
            out["drift"] = self.drift.to_json()
        if self.precision is not None:
            out["precision"] = self.precision.to_json()
        return out

    def write_report(self, directory: str) -> str:
        """The third rendering: DIR/index.html with its plots (html_report; matplotlib, the
        `plots` extra, imported only here). Returns the page's path."""
        from .html_report import write_report

        return write_report(self.to_json(), directory)

    def text(self, judge_name: str = "") -> list[str]:
        """`check --backend`'s text: the verdict first, then the failures, the cases, the counts, the
        drift and precision reports."""
        judge_name = judge_name or ("the FP32 reference" if self.judge == "reference" else f"the {self.judge} judge")
        head = (
            f"loopspec-oracle check: backend {self.backend} ({self.dtype}, exact={self.exact}) against "
            f"{judge_name}, tolerance row {self.tolerance_row!r}"
        )
        lines = [head] + [f"  [{'PASS' if c['ok'] else 'FAIL'}] {c['name']}" for c in self.cases]
        lines += [f"  FAIL [{c['name'].rsplit(': ', 1)[-1]}] {c['detail']}" for c in self.failed]
        lines += [f"  skipped: {s}" for s in self.skipped]
        lines += [f"  excused: {d}" for d in self.excused[:10]]
        if len(self.excused) > 10:
            lines.append(f"  excused: ... {len(self.excused) - 10} more")
        explained = not any(not c["ok"] and c["name"].endswith(": decisions") for c in self.checks)
        n = self.counters
        lines.append(
            f"  compared: {n['request_rounds']} request-rounds, {n['kv_writes_compared']} KV writes, "
            f"{n['logits_compared']} logits vectors, {n['rng_events_compared']} RNG events, "
            f"{n['tokens_compared']} tokens; max relative error KV {self.max_rel_err['kv']:.3g}, logits "
            f"{self.max_rel_err['logits']:.3g}; {len(self.excused)} excused near-tie divergences; every "
            f"decision explained by the backend's own logits: {'yes' if explained else 'NO'}"
        )
        if self.drift is not None:
            lines += _drift.drift_lines(self.drift.to_json())
        if self.precision is not None:
            lines += _precision.report_lines(self.precision.to_json())
        lines.append(f"  {'OK' if self.ok else 'FAILED'} in {round(self.seconds, 2)} s")
        return lines


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


# ---- judge ----


def judge(
    backend,
    model,
    cases,
    *,
    judge=None,
    drift: bool = True,
    suffix: str = "",
    probe_reproduce: str = "",
    early=None,
    timeout: float | None = None,
    catch: bool = True,
    inline: bool = False,
) -> Verdict:
    """The backend on every case whose policy it supports, in both modes, against the judge's side
    (default: the FP32 reference), plus backend block vs backend loop; with drift (bfloat16 and
    float16 backends) the drift probe's two verdicts, drift and precision. suffix: appended to each
    case's reproduce line; probe_reproduce: the probe's. early: begin()'s handle. timeout: each
    backend call's limit (GuardedBackend; None: the backend as given). catch=False: a backend
    exception propagates (the property harness) instead of failing a check. inline=True: every job
    here, in this thread (worker.inline; the property suite's many small examples). The run's
    forwards (forwards.Forwards: the twin's and the drift fit's) are made once, shared by the cases'
    twin bounds and the probe's two fits, and let go when it returns."""
    with _worker.inline() if inline else contextlib.nullcontext():
        return _run(backend, model, cases, judge, drift, suffix, probe_reproduce, early, timeout, catch)


def _run(backend, model, cases, judge, drift, suffix, probe_reproduce, early, timeout, catch) -> Verdict:
    """judge()'s body (its jobs inline or not, as the caller set)."""
    t0 = time.perf_counter()
    v = Verdict(
        backend.name,
        backend.dtype,
        bool(backend.exact),
        judge.name if judge is not None else "reference",
        model.cfg.num_layers,
    )
    guarded = GuardedBackend(backend, timeout) if timeout is not None else backend
    gjudge = None if judge is None else (GuardedBackend(judge, timeout, judge=True) if timeout is not None else judge)
    # the run's forwards (the twin's and the drift fit's): those begun with the reference's sides, else new
    begun = None if early is None else early.fwd
    fwd = begun if begun is not None and begun.model is model else Forwards(model)
    if early is not None:
        early.fwd = None  # held by this run alone: let go when it returns
    sides = (
        _cases.sides_for(early, backend)
        if early is not None
        else _cases.reference_sides(backend, model, cases, judge, fwd)
    )
    pending = start_drift(guarded, model, probe_reproduce, judge, fwd=fwd) if drift else None
    # JudgeFailed: the caller's to name
    judged = _judge_cases(v, guarded, model, cases, suffix, gjudge, sides, catch, fwd)
    for case, reports, runs in judged:
        ok = all(rep.ok for _, rep in reports)
        v.cases.append({"name": case.name, "ok": ok})
        v.runs[case.name] = runs
        for label, rep in reports:
            v.add(label, rep)
    _finish_probe(v, pending)
    v.seconds = time.perf_counter() - t0
    return v


def _judge_cases(v: Verdict, bk, model, cases, suffix: str, judge, sides: dict, catch: bool, fwd=None) -> list:
    """[(case, [(label, Report)], {mode: run})]: every case's backend runs first, then the comparisons."""
    pending = []
    for case in cases:
        if case.policy not in bk.policies:
            v.skipped.append(f"{case.name} (policy {case.policy} not supported by {bk.name})")
            continue
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
    return [(case, reps.result() if isinstance(reps, _cases.Deferred) else reps, runs) for case, reps, runs in pending]


def _finish_probe(v: Verdict, pending) -> None:
    """The drift probe's verdicts into v: its reports and a failed check for each verdict that fails
    (or for the probe, where the backend raised)."""
    rep, prec, error = finish_probe(pending)
    v.checks += probe_checks(rep, prec, error)
    v.drift, v.precision = rep, prec


def probe_verdicts(
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
    error: str = ""  # the backend raised during the probe


def start_drift(
    backend, model, reproduce: str = "", judge=None, n: int = _drift.PROBE_REQUESTS, fwd: Forwards | None = None
) -> PendingDrift | None:
    """The drift verdict of an inexact backend, begun: the probe's runs through the backend now, the
    NumPy fit in the background (worker.background), so that it overlaps what the check does next;
    with a JAX judge the sensitivities are its jvp, fitted in finish_drift. None: no drift verdict
    applies (exact or FP32: the value rows are far tighter than any drift; no policy: nothing ran).
    fwd: the run's forwards, for the NumPy fits (a forked fit works on its copy)."""
    if backend.exact or backend.dtype in ("float32", "float64") or not backend.policies:
        return None
    stats_fn = dirs = None
    caps = None if judge is None else capabilities(judge)
    maker = None if caps is None else caps.drift_stats_fn
    if maker is not None:
        if model.cfg.hidden_size >= _drift.COARSE_HIDDEN:  # per layer would cost one jvp per knob
            dirs = _drift.coarse_directions(model.cfg.num_layers)
        stats_fn = maker(model, backend.dtype, basis=None if dirs is None else np.stack([c for _, c in dirs]))
    twin = None if caps is None else caps.precision_energy_fn
    energy_fn = twin(model, backend.dtype) if twin is not None and stats_fn is not None else None
    pending = PendingDrift(model, None, backend.dtype, reproduce, stats_fn, dirs, energy_fn, fwd)
    if stats_fn is None and capabilities(backend).fork_safe and _worker.forks():
        # the probe's runs and the fit in one forked child, beside the cases' runs in this process
        pending.job = _worker.background(_probe_and_fit, backend, model, n, reproduce, fwd)
        return pending
    pending.runs, pending.error, pending.seconds = _probe(backend, model, n)
    if stats_fn is None and not pending.error:
        pending.job = _worker.background(probe_verdicts, model, pending.runs, backend.dtype, reproduce, fwd=fwd)
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


def malformed_rounds(traces, vocab: int) -> list[str]:
    """'round N request R: why' for every request whose part of a round cannot be a round's
    output (decisions.trace_problem, traces.request_problem): what `trace record --backend`
    refuses to write."""
    out = []
    for n, t in enumerate(traces):
        before = len(out)
        for rid, T in zip(t.requests, t.token_counts):
            try:
                why = trace_problem(t, rid, T, vocab)
            except Exception as e:  # noqa: BLE001 -- whatever the trace holds
                why = f"cannot be judged ({type(e).__name__}: {e})"
            if why:
                out.append(f"round {n} request {rid}: {why}")
        problem = None if len(out) > before else request_problem(t)
        if problem:
            out.append(f"round {n}: {problem}")
    return out


def probe_problem(model, runs: dict) -> str:
    """The first value of the probe's runs the fits cannot read (decisions.trace_problem: tokens
    outside the vocabulary, logits not numbers or misshapen; a K/V write not [kv heads, head_dim]
    numbers), as a line naming mode, round and request; "" if none."""
    cfg = model.cfg
    for mode, run in runs.items():
        for tr in run.traces:
            for i, rid in enumerate(tr.requests):
                why = trace_problem(tr, rid, tr.token_counts[i], cfg.vocab_size)
                if why:
                    return f"drift probe [{mode}]: round {tr.round} request {rid}: {why}"
            for (rid, pos, j, l), (_, k, v) in tr.kv_writes.items():
                for name, x in (("K", k), ("V", v)):
                    x = np.asarray(x)
                    if x.dtype.kind not in "fiu" or x.shape != (cfg.num_kv_heads, cfg.head_dim):
                        return (
                            f"drift probe [{mode}]: round {tr.round} request {rid}: the {name} write at position "
                            f"{pos}, depth {j}, layer {l} is {x.dtype} {list(x.shape)}, expected numbers of shape "
                            f"[{cfg.num_kv_heads}, {cfg.head_dim}]"
                        )
    return ""


def _probe_and_fit(backend, model, n: int, reproduce: str, fwd: Forwards | None = None):
    """start_drift's probe and fit in a forked child (on its copy of fwd): ((DriftReport,
    PrecisionReport) or None, the probe's error)."""
    backend = backend.fresh() if hasattr(backend, "fresh") else backend  # a guard with its own thread here
    runs, error, seconds = _probe(backend, model, n)
    if error:
        return None, error
    reps = probe_verdicts(model, runs, backend.dtype, reproduce, fwd=fwd)
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
        else probe_verdicts(
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
        return [{"name": "drift probe: drift", "ok": False, "detail": error}]
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


def judge_pairs(
    backend,
    judge,
    model,
    pairs,
    *,
    threads: int = 0,
    budget_bytes: int | None = None,
    kv_bytes=None,
    options=None,
    reproduce: str = "",
    on_case=None,
) -> Verdict:
    """The backend's run of each (case, mode) against the judge backend's run of it (no block-vs-loop,
    no probe). With a backend that draws each request's host stream the judge's runs need nothing of
    the backend's: they run `threads` at a time in threads beside the backend's (XLA compiles release
    the GIL), each waiting until kv_bytes(case) fits in budget_bytes; else the judge replays each
    backend run's uniforms after it. options(case): session options of both sides. on_case(case,
    mode, report, backend s, judge s): called as each case is judged (progress lines)."""
    t0 = time.perf_counter()
    options = options or (lambda case: {})
    v = Verdict(backend.name, backend.dtype, bool(backend.exact), judge.name, model.cfg.num_layers)
    dtype = row(backend)
    pairs = [(c, m) for c, m in pairs if c.policy in backend.policies]
    ahead = draws_host_stream(backend) and threads > 0
    budget = Budget(budget_bytes) if ahead and budget_bytes else None

    def side(case, mode, replay_from=None):
        need = kv_bytes(case) if budget is not None and kv_bytes is not None else 0
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

        pool = ThreadPoolExecutor(threads, thread_name_prefix="judge")
        futures = [pool.submit(side, case, mode) for case, mode in pairs]
    try:
        for i, (case, mode) in enumerate(pairs):
            t = time.perf_counter()
            got = run_scenario(backend, model, case, mode, **options(case))
            got.session = None
            tb = time.perf_counter() - t
            ref, tj = futures[i].result() if ahead else side(case, mode, replay_from=got)
            rep = compare_runs(ref.traces, got.traces, dtype, reproduce, case.name)
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
            if on_case is not None:
                on_case(case, mode, rep, tb, tj)
    finally:
        if pool is not None:
            for f in futures:
                f.cancel()
            pool.shutdown(wait=True)
    v.seconds = time.perf_counter() - t0
    return v


# ---- block vs loop on the reference (`python -m oracle check` without --backend) ----


def check_reference(model, cases) -> dict:
    """The reference's block and loop runs of every case, bit for bit, with each run's schedule,
    KV frontiers and the cache-free recompute (cases.check_cases); a check that compared nothing
    fails."""
    out = _cases.check_cases(model, cases)
    if not (out["cases"] and out["tokens_compared"] + out["logits_compared"]):
        out["ok"] = False
        out["checks"].append(
            {"name": "nothing compared", "ok": False, "detail": "nothing compared: no request-round was compared"}
        )
    return out


# ---- recorded traces (trace diff) ----

TWIN_HIDDEN = 1024  # from this hidden size trace diff judges by the fixed row (the twin is a host forward)


def judge_traces(ref_traces, got_traces, row: str, model=None, reproduce: str = "", names=("A", "B")) -> Verdict:
    """Recorded traces: got_traces (file B) against ref_traces (file A) by tolerance row `row`. With
    the model the traces name (rebuilt by the caller), a reduced-precision row is judged by the noise
    twin's bounds at A's contexts, as `check --backend` judges; without it, by the row's fixed
    tolerances. info["bounds"] says which."""
    t0 = time.perf_counter()
    v = Verdict(names[1], row, row == "exact", names[0], 0 if model is None else model.cfg.num_layers)
    twin = model is not None and row in SIGMA and model.cfg.hidden_size < TWIN_HIDDEN
    bounds = twin_bounds(model, ref_traces, row) if twin else None
    rep = compare_runs(ref_traces, got_traces, row, reproduce, bounds=bounds)
    v.add("traces", rep)
    v.cases.append({"name": "traces", "ok": rep.ok})
    v.info["bounds"] = "noise twin" if twin else ("exact" if row == "exact" else "fixed row")
    v.seconds = time.perf_counter() - t0
    return v
