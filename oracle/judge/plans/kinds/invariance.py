"""The exactness tier (oracle/judge/plans/invariance.py) as the verdict runs it: `tier` after a backend or
pairs plan's cases, where the backend declares batch invariance, and `run`, the invariance plan kind
(the claims alone on any backend: `python -m oracle localize`)."""

from __future__ import annotations

from .. import invariance as _invariance
from ..localize import localize
from ..plan import Executor, InvariancePlan
from ...comparison.report import describe
from ...runner import run_scenario


def run(plan: InvariancePlan, ex: Executor, v) -> None:
    """The backend's block and loop runs of each case, then the claims, bitwise, each failure localized."""
    bk, model = plan.backend, plan.model
    for n, case in enumerate(plan.cases):
        if case.policy not in bk.policies:
            v.skipped.append(f"{case.name} (policy {case.policy} not supported by {bk.name})")
            continue
        ex.phase("case", f"{n + 1}/{len(plan.cases)} {case.name}: block and loop")
        v.runs[case.name] = {mode: run_scenario(bk, model, case, mode) for mode in ("block", "loop")}
        v.cases.append({"name": case.name, "ok": True})
    tier(v, bk, model, plan.cases, plan, ex)


def tier(v, bk, model, cases, plan, ex: Executor) -> None:
    """The tier on every case the backend ran in both modes (v.runs): one check "invariance" per
    failed claim (a record naming the first place and operation where its two runs part), or one
    passing check per case; v.info["invariance"] counts the values compared, claim by claim."""
    info = v.info.setdefault("invariance", {"values": 0, "claims": dict.fromkeys(_invariance.CLAIMS, True)})
    catch, suffix = getattr(plan, "catch", True), getattr(plan, "suffix", "")
    for case in cases:
        runs = v.runs.get(case.name, {})
        if set(runs) != {"block", "loop"} or any(r is None or not r.traces for r in runs.values()):
            continue
        ex.phase("exactness", f"{case.name}: block = loop = plain decoding = alone, bitwise")
        try:
            results = _invariance.claims(bk, model, case, runs, lambda part, sides: localize(bk, model, part, sides))
        except Exception as e:  # noqa: BLE001 -- judged: the backend raised in the tier's runs
            if not catch:
                raise
            text = f"{case.name}: the backend raised {type(e).__name__}: {e}"
            v.checks.append({"name": f"{case.name}: invariance", "ok": False, "detail": text, "failure": None})
            continue
        bad = [r for r in results if not r.ok]
        reproduce = case.reproduce + suffix if case.reproduce else ""
        records = [_invariance.failure(case.name, r, reproduce) for r in bad]
        v.checks += [
            {"name": f"{case.name}: invariance", "ok": False, "detail": describe(f), "failure": f.to_json()}
            for f in records
        ] or [{"name": f"{case.name}: invariance", "ok": True, "detail": "", "failure": None}]
        info["values"] += sum(r.values for r in results)
        info.setdefault("results", []).extend(
            {"case": case.name, "claim": r.claim, "ok": r.ok, "values": r.values} for r in results
        )
        for r in results:
            info["claims"][r.claim] &= r.ok
        if bad:
            v.cases = [dict(c, ok=False) if c["name"] == case.name else c for c in v.cases]
