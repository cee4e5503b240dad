"""The noise twin (oracle/judge/probe/noise.py): its bounds pass the reference's own traces rounded to
bfloat16, pass one value off by a third of its bound and fail one off by twice it, and cover
every KV write, noisier with depth."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from oracle.judge.probe import forwards, noise
from oracle.judge.scenario import make_case
from oracle.judge.runner import REFERENCE, run_scenario
from oracle.judge.comparison.compare import compare_runs
from oracle.judge.probe.drift_model import round_to
from oracle.checkpoint import build_model
from oracle.sampling_params import SamplingParams as SP
from oracle.judge.probe.calibration import SAMPLES, SEED
from oracle.judge.probe import calibration


@pytest.fixture(scope="module")
def traces():
    model = build_model("tiny", 0)
    case = make_case(
        "noise", [{0: 5, 1: 3, 2: 4}] * 2, 2, 4, [SP(), SP(1.0, seed=1), SP(0.8, top_k=10, seed=2)], seed=4
    )
    ref = run_scenario(REFERENCE, model, case, "block").traces
    return model, ref, noise.twin_bounds(model, ref, "bfloat16")


def rounded(ref):
    """The reference's traces with every stored value rounded to bfloat16 (a correct-looking engine)."""
    got = copy.deepcopy(ref)
    for tr in got:
        tr.kv_writes = {
            k: (c, round_to(a, "bfloat16"), round_to(b, "bfloat16")) for k, (c, a, b) in tr.kv_writes.items()
        }
        tr.draft_logits = {k: round_to(v, "bfloat16") for k, v in tr.draft_logits.items()}
        tr.verify_logits = {k: round_to(v, "bfloat16") for k, v in tr.verify_logits.items()}
    return got


def test_rounded_reference_passes(traces):
    model, ref, bounds = traces
    rep = compare_runs(ref, rounded(ref), "bfloat16", bounds=bounds)
    assert rep.ok, rep.first_failure()


@pytest.mark.parametrize("what", ["kv", "logits"])
@pytest.mark.parametrize("times,ok", [(0.3, True), (2.0, False)])
def test_one_value_off_by_its_bound(traces, what, times, ok):
    """One KV write (depth 0) or verification logits vector scaled by 1 + times * its own twin
    bound: inside the bound it passes, at twice the bound it fails, named."""
    model, ref, bounds = traces
    got = rounded(ref)
    tr, a = got[1], ref[1]
    from oracle.judge.comparison.compare import _norm, typical_norms

    norms = typical_norms(a)
    if what == "kv":
        key = next(k for k in tr.kv_writes if k[2] == 0)
        c, k, v = tr.kv_writes[key]
        _, ka, va = a.kv_writes[key]
        f = 1 + times * bounds.kv_allowed(1, key, max(_norm(ka, va), norms[("kv", 0, key[3])]))
        tr.kv_writes[key] = (c, ka * np.float32(f), va * np.float32(f))
    else:
        key = next(iter(tr.verify_logits))
        f = 1 + times * bounds.logits_allowed(
            1, "verify_logits", *key, max(_norm(a.verify_logits[key]), norms[("verify_logits",)])
        )
        tr.verify_logits[key] = a.verify_logits[key] * np.float32(f)
    rep = compare_runs(ref, got, "bfloat16", bounds=bounds)
    assert rep.ok == ok, rep.first_failure()
    if not ok:
        assert rep.first_failure().name == ("kv_writes" if what == "kv" else "verify_logits")


def test_bounds_are_the_twins_spread(traces):
    model, ref, bounds = traces
    # a noise scale per written value, deeper loops noisier on average (errors compound)
    s = {j: np.mean([v for (r, q, p, jj, l), v in bounds.kv.items() if jj == j]) for j in range(4)}
    assert all(v > 0 for v in s.values())
    assert s[3] > s[0]
    assert set(bounds.kv) == {(tr.round,) + k for tr in ref for k in tr.kv_writes}


def test_batched_twin_is_the_twin_per_context(traces, monkeypatch):
    """Contexts batched into one forward (ragged, one noise stream each) give the bounds of one
    forward per context, to FP32 rounding (forwards.TWIN_PRECISION; a bound is a difference of
    twin and center of ~1e-3 relative, so FP32 rounding moves it by up to ~1e-4 of itself)."""
    model, ref, bounds = traces
    monkeypatch.setattr(calibration, "TWIN_ROWS_T", 0)  # one context per forward
    alone = noise.twin_bounds(model, ref, "bfloat16", fwd=forwards.Forwards(model))
    monkeypatch.setattr(calibration, "TWIN_ROWS_T", 10**9)  # every context in one forward
    batched = noise.twin_bounds(model, ref, "bfloat16", fwd=forwards.Forwards(model))
    assert alone.kv.keys() == batched.kv.keys() == bounds.kv.keys()
    for k, v in alone.kv.items():
        assert batched.kv[k] == pytest.approx(v, rel=1e-3)
    for k, (s, t) in alone.logits.items():
        assert batched.logits[k][0] == pytest.approx(s, rel=1e-3)
        assert np.max(np.abs(batched.logits[k][1] - t)) <= 1e-5 * np.max(np.abs(t))


def test_forwards_are_kept_for_the_run_that_holds_them(traces, monkeypatch):
    """A Forwards keeps the twin's forwards it made: twin_bounds again on it makes none and gives the
    same bounds; it serves only the model it was made for; without one a call makes its own."""
    model, ref, bounds = traces
    fwd = forwards.Forwards(model)
    first = noise.twin_bounds(model, ref, "bfloat16", fwd=fwd)
    kept = dict(fwd.twin)
    assert kept and all(k[2:] == ("bfloat16", SAMPLES, SEED) for k in kept)
    made = []
    real = forwards.drift_model.forward
    monkeypatch.setattr(forwards.drift_model, "forward", lambda *a, **k: made.append(1) or real(*a, **k))
    again = noise.twin_bounds(model, ref, "bfloat16", fwd=fwd)
    assert not made and fwd.twin.keys() == kept.keys()
    assert again.kv == first.kv == bounds.kv
    assert all(again.logits[k][0] == s for k, (s, _) in first.logits.items())
    with pytest.raises(ValueError):
        noise.twin_bounds(build_model("tiny", 1), ref, "bfloat16", fwd=fwd)
    noise.twin_bounds(model, ref, "bfloat16")  # a fresh Forwards of its own
    assert made


def test_jax_judge_twin_gives_the_numpy_twins_margin_scales(traces):
    """Where the judge's side is the JAX model, the token rule's margin scales come from the judge's
    own twin (judge_jax/twin.py make_twin_logits_fn, made on demand for a divergent request): the same
    noise model with other draws, so each final decision's noise scale agrees with the NumPy twin's
    within the spread of 8 samples, and the excuse answers alike far from and near the bound."""
    pytest.importorskip("jax")
    from judge_jax.twin import make_twin_logits_fn
    from oracle.judge.comparison.decisions import first_divergence

    model, ref, ours = traces
    theirs = noise.judge_bounds(make_twin_logits_fn(model, "bfloat16"))
    ratios = []
    for a in ref:
        for rid in a.requests:
            T = a.token_counts[a.requests.index(rid)]
            lg = a.verify_logits[(rid, a.accepted[rid])]
            b = copy.deepcopy(a)  # the final token flipped to the reference's runner-up
            b.emitted[rid] = b.emitted[rid][:-1] + [int(np.argsort(lg)[-2])]
            div = first_divergence(a, b, rid, T)
            assert div is not None and div.kind == "final"
            z_np, z_jax = ours.margin_z(a, b, rid, T, div), theirs.margin_z(a, b, rid, T, div)
            assert z_jax is not None and np.all(np.isfinite(z_jax[:1]))
            ratios.append(float(z_np[0] / z_jax[0]))  # = the JAX scale / the NumPy scale
    ratios = np.asarray(ratios)
    assert len(ratios) >= 6 and np.all((ratios > 0.4) & (ratios < 2.5)), ratios
    assert 0.7 < np.median(ratios) < 1.4, ratios
    # without twin logits the judge's Bounds has no token rule (the fixed margin decides)
    assert noise.judge_bounds(None).margin_z(a, b, rid, T, div) is None
