"""The one verdict's plans (oracle/judge/plans/plan.py): a backend plan makes all three comparisons of a
case, a malformed run skips only the comparisons that would read it, and a plan refuses what it
cannot mean."""

from __future__ import annotations

import pytest

from oracle.runtime.backends import load_backend
from oracle.checkpoint import build_model
from oracle.judge.plans.plan import INLINE, BackendPlan, Plan, ReferencePlan, backend_plan, probe_plan
from oracle.judge.scenario import make_case
from oracle.judge.plans.verdict import judge
from oracle.sampling import SamplingParams as SP


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
