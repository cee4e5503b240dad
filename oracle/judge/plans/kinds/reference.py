"""Block vs loop on the reference (`python -m oracle check` without --backend)."""

from __future__ import annotations

from .. import cases as _cases
from ..plan import Executor, ReferencePlan


def run(plan: ReferencePlan, ex: Executor, v) -> None:
    """The reference's block and loop runs of every case, bit for bit, with each run's schedule, KV
    frontiers and the cache-free recompute (cases.check_case)."""
    for n, case in enumerate(plan.cases):
        at = f"{n + 1}/{len(plan.cases)} {case.name}"
        ex.phase("case", at)
        rep = _cases.check_case(plan.model, case, lambda what, at=at: ex.phase("case", f"{at}: {what}"))
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
