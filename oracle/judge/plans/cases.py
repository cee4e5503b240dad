"""The comparisons of one case, built on the one runner (oracle/judge/runner.py): block vs loop on
the reference (`check_case`) and a backend against the judge (`judge_backend`, every case of a
backend plan: `judge_cases`, which oracle/judge/plans/kinds/backend.py calls, against the
reference's sides made before them in oracle/judge/plans/sides.py); every comparison is
oracle.judge.comparison.compare.compare_runs. The Case type is oracle/judge/scenario.py;
the built-in cases are oracle/cli/catalogue.py.
"""

from __future__ import annotations


from ..comparison.cache_free import cache_free_check
from ..probe.calibration import SIGMA
from ..comparison.compare import compare_runs
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
from .sides import reference_side
from .worker import background

MODES = ("block", "loop")
MODES_VS = "block vs loop"  # the mode of a backend's block run against its loop run


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
        ref = background(reference_side, model, sc, dtype, {}, fwd=fwd)
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
