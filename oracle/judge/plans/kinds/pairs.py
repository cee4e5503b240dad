"""One mode per case, the judge's side in threads (scripts/gpu_parity_full.py: the JAX judge at the
real shape): the backend's run of each (case, mode) against the judge backend's run of it."""

from __future__ import annotations

import threading
import time

from . import invariance, probe_finish, probe_start
from .. import cases as _cases
from ...comparison.compare import compare_runs
from ...comparison.malformed import side_problem
from ..plan import Executor, PairsPlan
from ...runner import draws_host_stream, judge_run, run_scenario
from ....runtime.contract import capabilities, tolerance_row


class Budget:
    """Bytes of device memory held by the judge's runs in flight: a run waits until its KV fits
    beside the others (or none is in flight)."""

    def __init__(self, total: int):
        self.total, self.used, self.cond = total, 0, threading.Condition()

    def take(self, n: int):
        with self.cond:
            self.cond.wait_for(lambda: self.used == 0 or self.used + n <= self.total)
            self.used += n

    def give(self, n: int):
        with self.cond:
            self.used -= n
            self.cond.notify_all()


def run(plan: PairsPlan, ex: Executor, v) -> None:
    """The backend's run of each (case, mode) against the judge backend's run of it (no block-vs-loop),
    and the drift probe's verdicts where the plan probes: its runs through the backend first, its fit
    (the judge's jvp and twin) on a thread beside the cases, waited for after them. With a backend
    that draws each request's host stream the judge's runs need nothing of the backend's: they run
    ex.threads at a time in threads beside the backend's (XLA compiles release the GIL), each waiting
    until ex.kv_bytes(case) fits in ex.budget_bytes; else the judge replays each backend run's uniforms
    after it. plan.options(case): session options of both sides.
    (Over 80 lines: the pair's runs, its memory plan and its judge replay are one sequence per case.)"""
    backend, judge, model = plan.backend, plan.judge, plan.model
    t0 = time.perf_counter()
    options = plan.options or (lambda case: {})
    dtype = tolerance_row(backend)
    pairs = [(c, m) for c, m in plan.pairs if c.policy in backend.policies]
    v.skipped += [
        f"{c.name} (policy {c.policy} not supported by {backend.name})" for c, m in plan.pairs if (c, m) not in pairs
    ]
    bounds = _cases.judge_twin(judge, model, dtype)  # the token rule on the judge's own twin
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
        # first: its fit then runs on a thread beside the judge's runs and the cases
        if plan.probes():
            how = "both modes, fitted by the judge beside the cases"
            pending = probe_start.begin(plan, ex, backend, capabilities(backend), capabilities(judge), how=how)
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
                rep, tj = _cases.malformed(case.name, why, plan.reproduce, mode), 0.0
            else:
                ref, tj = futures[i].result() if ahead else side(case, mode, replay_from=got)
                rep = compare_runs(ref.traces, got.traces, dtype, plan.reproduce, case.name, bounds=bounds, mode=mode)
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
            v.runs.setdefault(case.name, {})[mode] = got
            v.add(case.name, rep)
            if ex.on_case is not None:
                ex.on_case(case, mode, rep, tb, tj)
    finally:
        if pool is not None:
            for f in futures:
                f.cancel()
            pool.shutdown(wait=True)
    if capabilities(backend).batch_invariant:  # on the cases the pairs ran in both modes
        invariance.tier(v, backend, model, list({id(c): c for c, _ in plan.pairs}.values()), plan, ex)
    probe_finish.finish(v, pending)
