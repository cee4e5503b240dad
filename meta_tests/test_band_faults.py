"""The precision verdict fails precision losses between the old constant limit (2x the twin's error
energy) and the measured one (issue 46): each band fault of meta_tests/band_faults.py (a coarser
rounding in one place of the torch CPU BF16 path: one layer's o_proj output, V storage, the
attention probabilities, one layer's residual adds, one layer's attention output; V storage and the
attention output are kernel faults, in force on the GPU's paths too) has its largest group energy between 1.5x and
1.9x the twin's at the preset it is tested on, and fails, naming the group where its error enters
first; the correct backend passes there, and so does the legitimate variant with the most error
energy (an unfused norm with HF-eager attention scaling). docs/results.md, "The precision limit,
measured".
"""

from __future__ import annotations

import contextlib

import pytest

from meta_tests import band_faults
from oracle.checkpoint import build_model
from oracle.judge.probe import precision
from oracle.judge.plans.plan import INLINE, probe_plan
from oracle.judge.plans.verdict import judge

torch = pytest.importorskip("torch")

PRESETS = sorted({preset for _, preset, _, _ in band_faults.BAND_FAULTS.values()})


@pytest.fixture(scope="module")
def models():
    """preset -> (model, its Forwards: the twin's forwards are shared by the module's fits, as the
    faults commit mostly the same tokens)."""
    from oracle.judge.probe.forwards import Forwards

    out = {}
    for p in PRESETS:
        m = build_model(p, 0)
        out[p] = (m, Forwards(m))
    return out


@contextlib.contextmanager
def one_thread():
    """One torch and one BLAS thread, as `check --backend` takes them below hidden 512 (two threads
    per core on a busy machine made the probe 10-25x slower: property_tests/harness.py)."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    try:
        with threadpool_limits(1, user_api="blas"):
            torch.set_num_threads(1)
            yield
    finally:
        torch.set_num_threads(before)


def fit(model_fwd, spec: str = "", fault: str = ""):
    """The precision verdict of the rounding variant `spec`, or of band fault `fault`'s backend: the
    verdict of a probe plan of the precision verdict alone (the probe run through the backend, its fit
    on the module's forwards); its one check agrees with its report."""
    model, fwd = model_fwd
    bk = band_faults.band_backend(fault) if fault else band_faults.rounding_backend(spec)
    with one_thread():
        v = judge(probe_plan(bk, model, verdicts=("precision",), forwards=fwd), INLINE)
    assert v.drift is None and [c["name"] for c in v.checks] == ["drift probe: precision"], v.checks
    assert v.ok == v.precision.ok and v.checks[0]["detail"] == v.precision.failure, v.checks
    return v.precision


def lines(prec) -> list:
    return [g.line("bfloat16") for g in prec.groups]


@pytest.mark.parametrize("fault", sorted(band_faults.BAND_FAULTS))
def test_band_fault_fails_naming_its_group(models, fault):
    """Largest group energy within 1.5-1.9x the twin's (passed under the constant 2x of before); the
    verdict fails, naming the first group past the threshold in compute order, no earlier than the
    first value the fault's error reaches; every group before that one is within its limit."""
    _, preset, bound, _ = band_faults.BAND_FAULTS[fault]
    prec = fit(models[preset], fault=fault)
    assert 1.5 <= max(g.energy for g in prec.groups) <= 1.9, lines(prec)
    assert not prec.ok, lines(prec)
    bad = [g for g in prec.groups if g.t > g.threshold]
    first = min(bad, key=lambda g: precision.compute_order(g.key))
    assert prec.failure.startswith(precision.group_label(first.key) + ": error energy"), prec.failure
    assert f"(limit {first.limit:.2f}x" in prec.failure and "computed or stored below bfloat16" in prec.failure
    assert precision.compute_order(first.key) >= precision.compute_order(bound), prec.failure
    before = [g for g in prec.groups if precision.compute_order(g.key) < precision.compute_order(bound)]
    assert all(g.t <= g.threshold for g in before), lines(prec)


@pytest.mark.parametrize("spec", ["", "scale_bf16+norm_bf16"])
def test_correct_and_legitimate_variants_pass(models, spec):
    """The correct path, and the legitimate variant with the most error energy (HF-eager attention
    scaling with an unfused norm), at each preset the band faults are tested on: within every kind's
    limit, the headroom reported per kind."""
    for preset in PRESETS:
        prec = fit(models[preset], spec)
        assert prec.ok, prec.failure
        kinds = prec.to_json()["kinds"]
        assert [k["kind"] for k in kinds] == list(precision.KIND.values())
        assert all(k["largest"] < k["limit"] < k["detectable"] for k in kinds), kinds
