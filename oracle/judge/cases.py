"""The two verdicts built on the one runner (oracle/judge/runner.py): block vs loop on the
reference (`check_case`, `check_cases`) and a backend against the judge (`judge_backend`,
`judge_cases`). Used by `check`, `check --backend`, the property suite and gpu_tests; every
comparison is oracle.judge.compare.compare_runs. The Case type is oracle/judge/scenario.py;
the built-in cases are oracle/cli/catalogue.py.
"""
from __future__ import annotations

from .cache_free import cache_free_check
from .compare import compare_runs
from ..errors import OracleError
from .noise import SIGMA, twin_bounds, twin_bounds_later
from .report import Check, Report
from .runner import REFERENCE, ScenarioRun, draws_host_stream, judge_run, run_scenario
from .scenario import Case
from ..schedule import schedule_violation

MODES = ("block", "loop")
COUNTERS = ("kv_writes_compared", "logits_compared", "rng_events_compared", "tokens_compared", "request_rounds")


def judge_mode(bk, model, sc, mode: str, reproduce: str = "", case: str = "", judge=None,
               **options) -> tuple[Report, ScenarioRun]:
    """The backend's run in one mode against the judge's (default the reference), by the
    backend's tolerance row; device-RNG backends against the judge replaying their uniforms.
    options: session options for both sides (e.g. max_requests, max_len to size the KV)."""
    dtype = "exact" if bk.exact else bk.dtype
    if judge is None and draws_host_stream(bk) and dtype in SIGMA:
        # the reference's side needs nothing of the backend's run: the reference runs first and its
        # noise twin is computed while the backend runs (same bounds, same order of comparison)
        ref = judge_run(model, sc, mode, **options)
        later = twin_bounds_later(model, ref.traces, dtype)
        got = run_scenario(bk, model, sc, mode, **options)
        return compare_runs(ref.traces, got.traces, dtype, reproduce, case, bounds=later.result()), got
    got = run_scenario(bk, model, sc, mode, **options)
    ref = judge_run(model, sc, mode, replay_from=None if draws_host_stream(bk) else got, judge=judge, **options)
    bounds = twin_bounds(model, ref.traces, dtype) if judge is None else None
    return compare_runs(ref.traces, got.traces, dtype, reproduce, case, bounds=bounds), got


def judge_backend(bk, model, sc, reproduce: str = "", case: str = "", catch: bool = False, judge=None) -> list:
    """[(label, Report)]: backend block vs judge block, backend loop vs judge loop, and backend
    block vs backend loop. catch=True: a backend that raises is a failed check."""
    out, runs = [], {}
    for mode in MODES:
        label = f"{case} [{mode}]" if case else mode
        try:
            rep, runs[mode] = judge_mode(bk, model, sc, mode, reproduce, label, judge)
        except Exception as e:                     # noqa: BLE001 -- judged, not aborted
            if not catch:
                raise
            rep = Report(reproduce=reproduce)
            rep.fail("backend", f"{label}: the backend raised {type(e).__name__}: {e}")
            rep.finish()
        out.append((label, rep))
    if len(runs) == 2:
        label = f"{case} [block vs loop]" if case else "block vs loop"
        dtype = "exact" if bk.exact else bk.dtype
        bounds = twin_bounds(model, runs["block"].traces, dtype) if judge is None else None
        if bounds is not None:
            bounds.scale = 2 ** 0.5                       # both sides carry the precision's noise
        out.append((label, compare_runs(runs["block"].traces, runs["loop"].traces, dtype, reproduce, label,
                                        bounds=bounds)))
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
            return Check("kv_frontier", False, f"request {rid}: KV frontiers {sorted(f)} after commit, "
                         f"expected {len(req.tokens) - 1}")
    return Check("kv_frontier", True)


def check_case(model, case: Case) -> Report:
    """Block and loop on the reference, bit for bit, plus each run's schedule and KV frontiers
    and the cache-free recompute of the block run's logits. A mode that raises fails."""
    runs = {}
    for mode in MODES:
        try:
            runs[mode] = run_scenario(REFERENCE, model, case, mode)
        except (OracleError, AssertionError, IndexError, KeyError) as e:
            rep = Report()
            rep.checks.append(Check(f"{mode}_round", False, f"{mode} round raised {type(e).__name__}: {e}"
                                    + (f" (reproduce: {case.reproduce})" if case.reproduce else "")))
            return rep
    rep = compare_runs(runs["block"].traces, runs["loop"].traces, "exact", case.reproduce)
    for r in runs.values():
        rep.checks.append(schedule_check(r.traces))
        rep.checks.append(frontier_check(r.session))
    rep.checks.append(cache_free_check(model, runs["block"].traces)[0])
    return rep


def check_cases(model, cases) -> dict:
    """check_case on every case, summed: {"ok", "cases", "checks", counters, "layers"}."""
    out = {"ok": True, "checks": [], "cases": [], **{k: 0 for k in COUNTERS[:4]}, "layers": model.cfg.num_layers}
    for case in cases:
        rep = check_case(model, case)
        out["ok"] &= rep.ok
        for k in COUNTERS[:4]:
            out[k] += getattr(rep, k)
        out["checks"] += [{"name": f"{case.name}: {c.name}", "ok": c.ok, "detail": c.detail} for c in rep.checks]
        out["cases"].append({"name": case.name, "ok": rep.ok, "d": case.d, "D": case.D, "policy": case.policy,
                             "requests": len(case.prompts), "rounds": len(case.rounds)})
    return out


# ---- a backend against the judge on many cases (`python -m oracle check --backend`) ----

def judge_cases(backend, model, cases, suffix: str = "", judge=None) -> dict:
    """judge_backend on every case whose policy the backend supports, summed into one verdict:
    {"ok", "cases", "checks", counters, "max_rel_err", "excused_divergences", "skipped"}.
    suffix: appended to each case's reproduce line (`--backend X [--reference Y]`)."""
    out = {"ok": True, "checks": [], "cases": [], **{k: 0 for k in COUNTERS}, "excused_divergences": [],
           "max_rel_err": {"kv": 0.0, "logits": 0.0}, "skipped": []}
    for case in cases:
        if case.policy not in backend.policies:
            out["skipped"].append(f"{case.name} (policy {case.policy} not supported by {backend.name})")
            continue
        reproduce = (case.reproduce or "python -m oracle check") + suffix
        reports = judge_backend(backend, model, case, reproduce, case.name, catch=True, judge=judge)
        case_ok = all(rep.ok for _, rep in reports)
        out["ok"] &= case_ok
        out["cases"].append({"name": case.name, "ok": case_ok})
        for label, rep in reports:
            for k in COUNTERS:
                out[k] += getattr(rep, k)
            for k in ("kv", "logits"):
                out["max_rel_err"][k] = max(out["max_rel_err"][k], rep.max_rel_err[k])
            out["excused_divergences"] += rep.divergences
            out["checks"] += [{"name": f"{label}: {c.name}", "ok": c.ok, "detail": c.detail} for c in rep.checks]
    return out
