"""The one verdict's plans (oracle/judge/plans/plan.py): a backend plan makes all three comparisons of a
case, a malformed run skips only the comparisons that would read it, and a plan refuses what it
cannot mean."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest

from oracle.runtime.backends import load_backend
from oracle.checkpoint import build_model
from oracle.judge.comparison.compare import typical_norms
from oracle.judge.probe.forwards import Forwards, drift_contexts
from oracle.judge.plans.plan import INLINE, BackendPlan, Plan, ReferencePlan, backend_plan, probe_plan, traces_plan
from oracle.judge.comparison.report import rel_err
from oracle.judge.runner import judge_run
from oracle.judge.scenario import make_case
from oracle.judge.plans.verdict import judge
from oracle.sampling_params import SamplingParams as SP


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", 0)


def case():
    return make_case("two requests", [{0: 3, 1: 2}], 2, 4, [SP(), SP(temperature=1.0, seed=3)])


def test_a_backend_plan_compares_both_modes_and_block_against_loop(tiny):
    v = judge(backend_plan(load_backend("reference"), tiny, [case()], probe="off"), INLINE)
    assert v.ok, v.failed
    labels = [label for label, _ in v.reports]
    assert labels == ["two requests [block]", "two requests [loop]", "two requests [block vs loop]"], labels


def test_a_malformed_run_skips_block_against_loop_only(tiny, monkeypatch):
    import oracle.judge.plans.cases as cases

    real = cases.run_scenario

    def bad_loop(bk, model, sc, mode, *a, **k):
        run = real(bk, model, sc, mode, *a, **k)
        if mode == "loop":
            tr = run.traces[0]
            rid = tr.requests[0]
            tr.drafts[rid] = [-3] + list(tr.drafts[rid][1:])
        return run

    monkeypatch.setattr(cases, "run_scenario", bad_loop)
    v = judge(backend_plan(load_backend("reference"), tiny, [case()], probe="off"), INLINE)
    labels = [label for label, _ in v.reports]
    assert labels == ["two requests [block]", "two requests [loop]"], labels
    (bad,) = [c for c in v.failed]
    assert bad["name"] == "two requests [loop]: malformed"
    assert "round 0 request 0: draft token at offset 1 is -3" in bad["detail"], bad


def test_plans_refuse_what_they_cannot_mean(tiny):
    with pytest.raises(AssertionError, match="plan kind ''"):
        judge(Plan(tiny), INLINE)  # the thin base is no kind
    with pytest.raises(AssertionError, match="a reference plan needs the model"):
        ReferencePlan(None, [case()])
    with pytest.raises(AssertionError, match="a backend plan needs a backend"):
        BackendPlan(tiny)
    with pytest.raises(AssertionError, match="probe 'sometimes'"):
        backend_plan(load_backend("reference"), tiny, [case()], probe="sometimes")
    with pytest.raises(AssertionError, match="probe_requests"):
        probe_plan(load_backend("reference"), tiny, probe_requests=1)


def test_plan_options_refuse_what_they_cannot_mean(tiny):
    ref = load_backend("reference")
    with pytest.raises(AssertionError, match="verdicts 'precision'"):
        probe_plan(ref, tiny, verdicts="precision")  # a string, not a tuple of verdicts
    with pytest.raises(AssertionError, match=r"verdicts \(\)"):
        probe_plan(ref, tiny, verdicts=())
    with pytest.raises(AssertionError, match=r"allowance \(0.001, 2.0\)"):
        probe_plan(ref, tiny, verdicts=("precision",), allowance=(0.001, 2.0))  # no drift verdict to allow
    with pytest.raises(AssertionError, match=r"allowance \(0.001,\)"):
        probe_plan(ref, tiny, allowance=(0.001,))
    with pytest.raises(AssertionError, match="forwards of another model"):
        probe_plan(ref, tiny, forwards=Forwards(build_model("tiny", 1)))
    with pytest.raises(AssertionError, match="values 1"):
        traces_plan([], [], "bfloat16", values=1)


def test_a_traces_plan_keeps_every_compared_value_where_asked(tiny):
    """values=True: one record per compared KV write and logits vector, each with its place, its
    relative error and the row's bound; a perturbed logits vector's record holds its error. Without
    it, none are kept."""
    a = judge_run(tiny, case(), "block").traces
    b = copy.deepcopy(a)
    key = next(iter(b[0].verify_logits))  # (request, offset) of round 0
    b[0].verify_logits[key] = b[0].verify_logits[key] * np.float32(1.001)
    v = judge(traces_plan(a, b, "bfloat16", tiny, tolerance="fixed", values=True), INLINE)
    (rep,) = [r for _, r in v.reports]
    assert v.ok and len(rep.values) == v.counters["kv_writes_compared"] + v.counters["logits_compared"] > 0
    assert {x.check for x in rep.values} == {"kv_writes", "draft_logits", "verify_logits"}
    moved = [x for x in rep.values if x.error > 0]
    assert [(x.check, x.round, x.request, x.offset) for x in moved] == [("verify_logits", a[0].round, *key)]
    want = rel_err(b[0].verify_logits[key], a[0].verify_logits[key], typical_norms(a[0])[("verify_logits",)])
    assert 0 < moved[0].error == pytest.approx(want, rel=1e-12) and moved[0].bound >= 0.04, moved
    assert all(x.bound >= 0.04 and (x.layer is None) == (x.check != "kv_writes") for x in rep.values)
    (rep,) = [r for _, r in judge(traces_plan(a, b, "bfloat16", tiny, tolerance="fixed"), INLINE).reports]
    assert rep.values is None


def test_a_probe_plan_fits_the_verdicts_it_names(tiny):
    """verdicts=("precision",): the precision report of both verdicts' plan, and no drift fit;
    ("drift",) with an allowance: the drift fit under that floor and rho (drift.fit_drift's), no precision."""
    from oracle.judge.probe import drift, probe_runs
    from oracle.judge.probe.knobs import directions
    from oracle.judge.probe.observations import observed

    runs = probe_runs.probe_runs(load_backend("reference"), tiny, n=4)
    bf16 = SimpleNamespace(name="reference as bfloat16", dtype="bfloat16", exact=False, policies=("sequential",))
    fwd = Forwards(tiny)
    both = judge(probe_plan(bf16, tiny, runs, forwards=fwd), INLINE)
    alone = judge(probe_plan(bf16, tiny, runs, verdicts=("precision",), forwards=fwd), INLINE)
    assert alone.drift is None and [c["name"] for c in alone.checks] == ["drift probe: precision"]
    assert _plain(alone.precision) == _plain(both.precision)
    H = tiny.cfg.hidden_size
    allow = (0.01, drift.allowance_rho(H))  # a wider floor, the model's rho
    wide = judge(probe_plan(bf16, tiny, runs, verdicts=("drift",), allowance=allow, forwards=fwd), INLINE)
    assert wide.precision is None and [c["name"] for c in wide.checks] == ["drift probe: drift"]
    merged, L = observed(runs.values())[1], tiny.cfg.num_layers
    direct = drift.fit_drift(
        tiny, merged, directions(L), made=fwd.probe_forwards([], drift_contexts(merged), "bfloat16")[1], allowance=allow
    )
    assert _plain(wide.drift) == _plain(direct)
    wider = 0.01 - drift.drift_floor(H)
    assert len(wide.drift.estimates) == len(both.drift.estimates) > 0
    for e, w in zip(both.drift.estimates, wide.drift.estimates):  # each allowance widened by the floors' difference
        assert np.subtract(w.allowance, e.allowance) == pytest.approx([-wider, wider]), (e.label, w.label)


def _plain(rep) -> dict:
    out = rep.to_json()
    out.pop("seconds")
    return out
