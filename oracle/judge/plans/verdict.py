"""One verdict (docs/DESIGN.md, "The verdict"): `judge(plan, executor)` is the one entry. The plan
(oracle/judge/plans/plan.py) says what is compared, the executor where the work runs; it returns a
`Verdict`, a value that every entry renders (oracle/cli/render.py: text, JSON, HTML; the property
harness as an assertion; gpu_tests and scripts/gpu_parity_full.py as their summaries).

`judge` makes the verdict's heading (the two sides, the dtype, the model's loops) and hands it to
the plan kind's module (oracle/judge/plans/kinds/: reference, backend, pairs, traces, probe,
invariance, rules), which fills it; the drift probe beside the cases is begun in
oracle/judge/plans/kinds/probe_start.py and finished in oracle/judge/plans/kinds/probe_finish.py.

A `Verdict`'s `ok` is derived from its checks, never set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import sides as _sides
from ..probe.drift_text import drift_lines
from ..probe import precision as _precision
from .kinds import backend as _backend
from .kinds import invariance as _invariance_kind
from .kinds import pairs as _pairs
from .kinds import probe as _probe
from .kinds import reference as _reference
from .kinds import rules as _rules
from .kinds import traces as _traces
from ..comparison.malformed import malformed_rounds  # noqa: F401 (trace record's malformed check)
from .plan import Executor, Plan
from ..comparison.report import describe, error_maps
from ...runtime.contract import tolerance_row

COUNTERS = ("kv_writes_compared", "logits_compared", "rng_events_compared", "tokens_compared", "request_rounds")
# plan kind -> its work (oracle/judge/plans/kinds/): run(plan, executor, the verdict to fill)
KINDS = {
    "reference": _reference.run,
    "backend": _backend.run,
    "pairs": _pairs.run,
    "traces": _traces.run,
    "probe": _probe.run,
    "invariance": _invariance_kind.run,
    "rules": _rules.run,
}


@dataclass(slots=True)
class Verdict:
    backend: str
    dtype: str
    exact: bool
    judge: str  # "reference" or the judge backend's name
    layers: int
    checks: list = field(default_factory=list)  # {"name", "ok", "detail", "failure"}, every check made
    cases: list = field(default_factory=list)  # {"name", "ok"} per case judged
    counters: dict = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    max_rel_err: dict = field(default_factory=lambda: {"kv": 0.0, "logits": 0.0})
    excused: list = field(default_factory=list)  # excused near-tie divergences, one line each
    excused_records: list = field(default_factory=list)  # the same, as report.Failure records
    skipped: list = field(default_factory=list)  # cases the backend's policies do not cover
    drift: object = None  # drift.DriftReport or None
    precision: object = None  # precision.PrecisionReport or None
    reports: list = field(default_factory=list)  # (label, compare.Report) per comparison
    runs: dict = field(default_factory=dict)  # case name -> mode -> the backend's ScenarioRun
    info: dict = field(default_factory=dict)  # what the entry adds (threads, timeout, times)
    seconds: float = 0.0
    kind: str = "backend"  # the plan's kind (oracle/judge/plans/plan.py)

    @property
    def tolerance_row(self) -> str:
        return tolerance_row(self)

    @property
    def compared(self) -> bool:
        if self.kind == "invariance":  # the tier's values are what it compares
            return bool(self.info.get("invariance", {}).get("values"))
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
            bad.append({"name": "nothing compared", "ok": False, "detail": f"nothing compared: {why}", "failure": None})
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
        """The drift and precision reports' text (drift_text.drift_lines, precision.report_lines: renderings
        of their JSON), for the renderers, which import no part of the judge."""
        js = self.to_json()
        return (drift_lines(js["drift"]) if "drift" in js else []) + (
            _precision.report_lines(js["precision"]) if "precision" in js else []
        )

    def add(self, label: str, rep) -> None:
        """One comparison's report, summed in."""
        self.reports.append((label, rep))
        for k in COUNTERS:
            self.counters[k] += getattr(rep, k)
        for k in ("kv", "logits"):
            self.max_rel_err[k] = max(self.max_rel_err[k], rep.max_rel_err[k])
        self.excused += [describe(f) for f in rep.divergences]
        self.excused_records += rep.divergences
        self.checks += [
            {"name": f"{label}: {c.name}", "ok": c.ok, "detail": c.detail, "failure": _record(c)} for c in rep.checks
        ]

    def add_probe(self, drift, precision, error: str = "") -> None:
        """The drift probe's reports (drift.DriftReport, precision.PrecisionReport, or None: not
        fitted) and their checks, "drift probe: drift" and "drift probe: precision"; where the probe
        failed (error: the backend raised, or its output was malformed) one failed check naming it."""
        self.drift, self.precision = drift, precision
        if error:
            name = "drift probe: malformed" if ": the backend raised " not in error else "drift probe: drift"
            self.checks.append({"name": name, "ok": False, "detail": error, "failure": None})
            return
        for name, rep in (("drift probe: drift", drift), ("drift probe: precision", precision)):
            if rep is not None:
                self.checks.append({"name": name, "ok": rep.ok, "detail": rep.failure, "failure": None})

    def error_maps(self, limit: int = 12) -> list[dict]:
        """What the report's pictures draw (report.error_maps over this verdict's comparisons)."""
        return error_maps(self.reports, limit)

    def to_json(self) -> dict:
        out = {
            "ok": self.ok,
            "backend": self.backend,
            "dtype": self.dtype,
            "exact": self.exact,
            "judge": self.judge,
            "tolerance_row": self.tolerance_row,
            "layers": self.layers,
            "threads": None,  # check --backend's (with the two below): one schema with and without it
            "threads_from": None,
            "timeout_s": None,
            **self.info,
            "checks": self.checks + [c for c in self.failed if c["name"] == "nothing compared"],
            "cases": self.cases,
            **self.counters,
            "excused_divergences": self.excused,
            "excused_records": [f.to_json() for f in self.excused_records],
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
    if not _sides.sides_ahead_apply(model.cfg, judge_name):
        return None
    return _sides.start_sides(model, cases)


def cancel(handle) -> None:
    _sides.cancel_sides(handle)


# ---- judge: the one entry ----


def judge(plan: Plan, executor: Executor | None = None) -> Verdict:
    """The verdict of a plan (oracle/judge/plans/plan.py), its work run where the executor says."""
    assert plan.kind in KINDS, f"plan kind {plan.kind!r}, expected one of {tuple(KINDS)}"
    ex = executor or Executor()
    t0 = time.perf_counter()
    v = _heading(plan)
    with ex.scope():
        KINDS[plan.kind](plan, ex, v)
    v.kind = plan.kind
    v.seconds = time.perf_counter() - t0
    return v


def _heading(plan: Plan) -> Verdict:
    """The verdict of plan before anything is judged: its two sides, dtype and the model's loops."""
    layers = 0 if plan.model is None else plan.model.cfg.num_layers
    if plan.kind == "reference":
        return Verdict("reference", "float32", True, "reference", layers)
    if plan.kind == "traces":
        return Verdict(plan.names[1], plan.row, plan.row == "exact", plan.names[0], layers)
    if plan.kind == "rules":
        return Verdict(plan.names[1], "float32", True, "rules", layers)
    bk, judge_side = plan.backend, plan.judge
    return Verdict(bk.name, bk.dtype, bool(bk.exact), "reference" if judge_side is None else judge_side.name, layers)


def _record(check) -> dict | None:
    return None if check.failure is None else check.failure.to_json()
