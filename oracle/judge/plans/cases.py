"""The comparisons of one case, built on the one runner (oracle/judge/runner.py): block vs loop on
the reference (`check_case`) and a backend against the judge (`judge_backend`, every case of a
backend plan: `judge_cases`, which oracle/judge/plans/kinds/backend.py calls); every comparison is
oracle.judge.comparison.compare.compare_runs. The Case type is oracle/judge/scenario.py;
the built-in cases are oracle/cli/catalogue.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..comparison.cache_free import cache_free_check
from ..probe.calibration import HOST_HIDDEN, SIGMA
from ..comparison.compare import compare_runs, typical_norms
from ...runtime.backends import WrongReturn
from ...runtime.contract import capabilities, tolerance_row
from ...errors import OracleError
from ..probe.forwards import Forwards, of
from ..comparison.malformed import side_problem
from ..probe.noise import judge_bounds, twin_bounds
from ..comparison.report import Check, Failure, Report
from ..runner import REFERENCE, ScenarioRun, draws_host_stream, judge_run, run_scenario
from ..scenario import Case
from ...schedule import schedule_violation
from .worker import Inbox, Part, background

MODES = ("block", "loop")
MODES_VS = "block vs loop"  # the mode of a backend's block run against its loop run


# The reference's side of a case: the FP32 reference's run of it and its noise-twin bounds, made
# once, in the background (worker.background: a forked child where the platform forks, so both
# overlap the backend's runs), and judged against in both modes: a handle whose result() is
# (the reference's round traces, their twin bounds or None, their typical_norms). The reference's
# block and loop rounds agree bit for bit (check_case checks it on every built-in case,
# tests/test_rounds.py on drawn ones), so a backend drawing each request's host stream is judged
# against the one run in either mode; the mode-specific part of its traces, the calls, is checked
# against the backend's own plan (compare_runs). One job makes every case's side (`sides`: each a
# worker.Part of it), or judge_backend makes one case's; fwd: the run's forwards (the twin's; a
# forked job works on its copy).


def _reference_side(model, sc, dtype: str, options: dict, traces=None, fwd: Forwards | None = None):
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
    return [_reference_side(model, c, dtype, {}, fwd=fwd) for c in cases]


def _against_judge(bk, model, sc, mode, got, reproduce, case, judge, fwd, host: bool, **options) -> Report:
    why = side_problem(got.traces, model.cfg)
    if why:
        return malformed(case, why, reproduce, mode)
    dtype = tolerance_row(bk)
    ref_run = judge_run(model, sc, mode, replay_from=None if host else got, judge=judge, **options)
    bounds = twin_bounds(model, ref_run.traces, dtype, fwd=fwd) if judge is None else judge_twin(judge, model, dtype)
    return compare_runs(ref_run.traces, got.traces, dtype, reproduce, case, bounds=bounds, mode=mode)


def judge_twin(judge, model, dtype: str, scale: float = 1.0):
    """Against a judge backend (the JAX judge): the fixed row for values, and the token rule on the
    judge's own noise twin where it offers one (capability twin_logits_fn); None: the fixed row alone."""
    make = capabilities(judge).twin_logits_fn
    return None if make is None or dtype not in SIGMA else judge_bounds(make(model, dtype), scale)


def malformed(case: str, why: str, reproduce: str = "", mode: str = "") -> Report:
    """A comparison that does not run: one side's output is malformed (malformed.side_problem)."""
    rep = Report(reproduce=reproduce)
    rep.fail(Failure("malformed", why, case=case, mode=mode))
    return rep


def judge_against(ref, got: ScenarioRun, dtype: str, reproduce: str = "", case: str = "", mode: str = "") -> Report:
    """A backend's run against the reference's side (its traces and twin bounds)."""
    traces, bounds, norms = ref.result()
    return compare_runs(traces, got.traces, dtype, reproduce, case, bounds=bounds, ref_norms=norms, mode=mode)


def judge_backend(
    bk,
    model,
    sc,
    reproduce: str = "",
    case: str = "",
    catch: bool = False,
    judge=None,
    ref=None,
    later: bool = False,
    runs_out: dict | None = None,
    fwd: Forwards | None = None,
    step=None,
    caps=None,
):
    """[(label, Report)]: backend block vs judge block, backend loop vs judge loop, and backend
    block vs backend loop. catch=True: a backend that raises is a failed check. ref: the
    reference's side of sc, made earlier (sides); made here where it applies.
    later=True: the backend's runs now, and a handle whose result() makes the comparisons (so a
    caller can run every case's backend runs while the reference's sides are being made).
    runs_out: receives the backend's runs by mode. fwd: the run's forwards, for every twin bound
    made here (None: one made for this case). Each run is checked for malformed output at once
    (malformed.side_problem): a malformed run is a failed `malformed` check, and nothing of it
    reaches a twin or a comparison. step(what): told as each step starts (progress). caps: bk's
    Capabilities where the caller read them (None: read here)."""
    step = step or (lambda what: None)
    host = draws_host_stream(bk) if caps is None else caps.host_rng
    out, runs, malformed_modes = [], ({} if runs_out is None else runs_out), set()
    dtype = tolerance_row(bk)
    fwd = of(model, fwd) if judge is None else fwd  # no twin against a judge backend
    if ref is None and judge is None and host:
        step("the reference's block and loop runs")
        ref = background(_reference_side, model, sc, dtype, {}, fwd=fwd)
    for mode in MODES:  # with the reference's side: both runs, then both judged
        label = f"{case} [{mode}]" if case else mode
        step(f"the backend's {mode} run")
        try:
            got = runs[mode] = run_scenario(bk, model, sc, mode)
            why = side_problem(got.traces, model.cfg)
            if why:
                rep = malformed(case, why, reproduce, mode)
                malformed_modes.add(mode)
            elif ref is None:
                rep = _against_judge(bk, model, sc, mode, got, reproduce, case, judge, fwd, host)
            else:
                rep = None  # judged against ref once both runs are made
        except Exception as e:  # noqa: BLE001 -- judged, not aborted
            if not catch:
                raise
            runs.pop(mode, None)
            rep = Report(reproduce=reproduce)
            # got: the exception's class (what the shrinker's candidates must raise too)
            text = f"the backend's {e}" if isinstance(e, WrongReturn) else f"the backend raised {type(e).__name__}: {e}"
            rep.fail(Failure("backend", text, case, mode, got=type(e).__name__))
            rep.finish()
        out.append((label, rep))
    judged = Deferred(_judgments, model, out, runs, ref, dtype, reproduce, case, judge, fwd, malformed_modes)
    return judged if later else judged.result()


class Deferred:
    """fn(*args), made when result() is first asked for."""

    def __init__(self, fn, *args):
        self.fn, self.args, self.value = fn, args, None

    def result(self):
        if self.fn is not None:
            self.value, self.fn, self.args = self.fn(*self.args), None, None
        return self.value


def _judgments(model, out, runs, ref, dtype, reproduce, case, judge, fwd=None, malformed_modes=()) -> list:
    """judge_backend's comparisons, once the backend's runs are made (block vs loop only where
    neither run was malformed at the boundary)."""
    for n, (label, rep) in enumerate(out):
        if rep is None:
            out[n] = (label, judge_against(ref, runs[MODES[n]], dtype, reproduce, case, MODES[n]))
    if len(runs) == 2 and not malformed_modes:
        label = f"{case} [{MODES_VS}]" if case else MODES_VS
        bounds = (
            judge_twin(judge, model, dtype)
            if judge is not None
            else twin_bounds(
                model, runs["block"].traces, dtype, reuse=None if ref is None else ref.result()[1], fwd=fwd
            )
        )
        if bounds is not None:
            bounds.scale = 2**0.5  # both sides carry the precision's noise
        b, lp = runs["block"].traces, runs["loop"].traces  # the loop run judged against the block run
        out.append((label, compare_runs(b, lp, dtype, reproduce, case, bounds, mode=MODES_VS, sides=("loop", "block"))))
    return out


# ---- block vs loop on the reference (`python -m oracle check`) ----


def schedule_check(traces) -> Check:
    """The calls each round executed are exactly its planned schedule."""
    for tr in traces:
        problem = schedule_violation(tr, tr.mode) if tr.mode in MODES else None
        if problem:
            return Check(f"schedule_{tr.mode}", False, problem)
    return Check(f"schedule_{traces[0].mode if traces else ''}", True)


def frontier_check(session) -> Check:
    """After commit or rollback every request's KV frontier is its committed tokens - 1."""
    for rid, req in session.requests.items():
        f = session.kv.frontiers(rid)
        if f != {len(req.tokens) - 1}:
            return Check(
                "kv_frontier",
                False,
                f"request {rid}: KV frontiers {sorted(f)} after commit, expected {len(req.tokens) - 1}",
            )
    return Check("kv_frontier", True)


def check_case(model, case: Case, step=None) -> Report:
    """Block and loop on the reference, bit for bit, plus each run's schedule and KV frontiers
    and the cache-free recompute of the block run's logits. A mode that raises fails. step(what):
    told as each step starts (progress)."""
    step = step or (lambda what: None)
    runs = {}
    for mode in MODES:
        step(f"{mode} round")
        try:
            runs[mode] = run_scenario(REFERENCE, model, case, mode)
        except (OracleError, AssertionError, IndexError, KeyError) as e:
            rep = Report()
            rep.checks.append(
                Check(
                    f"{mode}_round",
                    False,
                    f"{mode} round raised {type(e).__name__}: {e}"
                    + (f" (reproduce: {case.reproduce})" if case.reproduce else ""),
                )
            )
            return rep
    step("compare")
    rep = compare_runs(runs["block"].traces, runs["loop"].traces, "exact", case.reproduce, sides=("loop", "block"))
    for r in runs.values():
        rep.checks.append(schedule_check(r.traces))
        rep.checks.append(frontier_check(r.session))
    step("cache-free recompute")
    rep.checks.append(cache_free_check(model, runs["block"].traces)[0])
    return rep


# ---- a backend against the judge on many cases (`python -m oracle check --backend`) ----

# Below calibration.HOST_HIDDEN the reference sides of every case are made in one background job
# started before the backend's runs (one forked child: a fork per case cost more CPU than it
# saved beside a busy process); above it one case at a time.


def sides(early, backend, model, cases, judge, caps, dtype: str) -> tuple[dict, Forwards]:
    """(id(case) -> the reference's side, the run's forwards) for every case judge_cases will judge against
    the reference (a host-stream backend, no --reference judge), all made by one background job: the
    one start_sides began before the backend loaded (early: its handle, sent the backend's facts
    now), else one started now, so that they are made while the backend runs; {} where none applies
    or the model is large (judge_backend then makes each in turn). The run's forwards (the twin's
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


def judge_cases(v, bk, model, cases, suffix: str, judge, sides: dict, catch: bool, fwd, ex, caps=None) -> list:
    """[(case, [(label, Report)], {mode: run})]: every case's backend runs first, then the comparisons;
    a case whose policy bk does not support is in v.skipped. ex: the plan's executor (its phases);
    caps: bk's Capabilities where the caller read them (None: read for each case)."""
    pending = []
    todo = [c for c in cases if c.policy in bk.policies]
    for case in cases:
        if case.policy not in bk.policies:
            v.skipped.append(f"{case.name} (policy {case.policy} not supported by {bk.name})")
            continue
        at = f"{len(pending) + 1}/{len(todo)} {case.name}"
        ex.phase("case", at)
        runs: dict = {}
        reproduce = case.reproduce + suffix if case.reproduce else ""  # the property suite prints its own
        ref = sides.get(id(case))
        step = lambda what, at=at: ex.phase("case", f"{at}: {what}")  # noqa: E731
        reps = judge_backend(
            bk, model, case, reproduce, case.name, catch, judge, ref, bool(sides), runs, fwd, step, caps
        )
        pending.append((case, reps, runs))
    if pending:
        ex.phase("compare", f"{len(pending)} case(s)")
    return [(case, reps.result() if isinstance(reps, Deferred) else reps, runs) for case, reps, runs in pending]


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
        _reference_side(model, c, dtype, {}, traces=t, fwd=fwd) if c.policy in policies else None
        for c, t in zip(cases, traces)
    ]
