"""Recorded traces (`trace diff`; gpu_tests' pairs of runs): B against A."""

from __future__ import annotations

import numpy as np

from .. import cases as _cases
from ...probe.calibration import HOST_HIDDEN, SIGMA
from ...comparison.compare import compare_runs
from ...comparison.malformed import side_problem
from ...probe.noise import twin_bounds
from ..plan import Executor, TracesPlan


def run(plan: TracesPlan, ex: Executor, v) -> None:
    """B (plan.traces[1]) against A by tolerance row plan.row. A reduced-precision row is judged by
    the noise twin's bounds at A's contexts where the plan has the model (below
    calibration.HOST_HIDDEN) and asks for no fixed row, as `check --backend` judges; else by the
    row's fixed tolerances. info["bounds"] says which. Either side malformed is a failed check,
    before any twin is made from it. plan.values: the report keeps every compared value (Report.values)."""
    a, b = plan.traces
    row, model = plan.row, plan.model
    cfg = None if model is None else model.cfg
    vocab = _vocab(a) if cfg is None else None
    bad = [(name, side_problem(t, cfg, vocab)) for name, t in zip(plan.names, (a, b))]
    bad = [(name, why) for name, why in bad if why]
    v.cases.append({"name": "traces", "ok": not bad})
    if bad:
        v.add("traces", _cases.malformed(bad[0][0], bad[0][1], plan.reproduce))
        v.info["bounds"] = "not compared"
        return
    twin = model is not None and plan.tolerance == "auto" and row in SIGMA and model.cfg.hidden_size < HOST_HIDDEN
    bounds = None
    if twin:
        ex.phase("twin", "the noise twin's bounds")
        bounds = twin_bounds(model, a, row)
    if bounds is not None and plan.both_noisy:
        bounds.scale = 2**0.5  # both sides carry the precision's noise
    rep = compare_runs(a, b, row, plan.reproduce, bounds=bounds, sides=plan.sides, values=plan.values)
    v.add("traces", rep)
    v.cases[-1]["ok"] = rep.ok
    v.info["bounds"] = "noise twin" if twin else ("exact" if row == "exact" else "fixed row")


def _vocab(traces) -> int | None:
    """The vocabulary size recorded traces imply (the length of a logits vector), or None."""
    for t in traces:
        for lg in list(t.verify_logits.values())[:1]:
            return len(np.asarray(lg).reshape(-1))
    return None
