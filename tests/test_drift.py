"""The drift verdict's parts (oracle/judge/probe/: drift_model.py, drift.py, drift_stats.py): the knob
forward is the reference's math, the t distribution is Student's, unobservable and aliased directions
are found, and a drift injected into the values is estimated and named."""

from __future__ import annotations

import numpy as np
import pytest

from oracle.judge.probe import drift, drift_model, drift_stats, forwards, knobs
from oracle.checkpoint import build_model
from oracle.judge.probe import calibration


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", 0)


def test_knob_forward_is_the_reference_at_scales_one(tiny):
    toks = list(np.random.default_rng(0).integers(0, 64, 20))
    ref, kv = tiny.forward_full(toks, 3, keep=True)
    P = len(knobs.params(tiny.cfg.num_layers))
    out = drift_model.forward(tiny, toks, 3, np.ones((2, P)))
    for j in range(3):
        assert np.allclose(out["logits"][j][1], ref[j], rtol=1e-5, atol=1e-5)
        for l in range(tiny.cfg.num_layers):
            assert np.allclose(out["k"][j][l][0], kv[j][l][0], rtol=1e-5, atol=1e-5)
            assert np.allclose(out["v"][j][l][0], kv[j][l][1], rtol=1e-5, atol=1e-5)


def test_t_distribution_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for t, dof in ((2.0, 5), (7.0, 23), (0.3, 100), (12.0, 47)):
        assert drift_stats.t_two_sided(t, dof) == pytest.approx(2 * stats.t.sf(t, dof), rel=1e-9)
    for alpha, dof in ((1e-4 / 50, 23), (0.05, 10)):
        assert drift_stats.t_critical(alpha, dof) == pytest.approx(stats.t.isf(alpha / 2, dof), rel=1e-9)


def test_interval_test_is_zero_inside_the_interval():
    x = np.array([0.0015, 0.0016, 0.0014, 0.0015])
    assert drift_stats.beyond_interval(x, -0.002, 0.002)[2] == 0.0
    assert drift_stats.beyond_interval(x + 0.01, -0.002, 0.002)[2] > 50
    assert drift_stats.beyond_interval(-x - 0.01, -0.002, 0.002)[2] < -50


def synthetic_stats(model, scale_of, n=8, noise=2e-4, seed=0):
    """Per-request stats where the 'backend' is the knob forward with one parameter scaled (plus
    white noise): what request_stats sees of a backend with exactly that drift."""
    names = knobs.params(model.cfg.num_layers)
    rng = np.random.default_rng(seed)
    out = []
    for r in range(n):
        toks = list(rng.integers(0, 64, 30))
        s = np.ones((1, len(names)))
        for key, f in scale_of.items():
            s[0, names.index(key)] = f
        fw = drift_model.forward(model, toks, 4, s)
        obs = {}
        for pos in range(20, 29):
            for j in range(4):
                for l in range(model.cfg.num_layers):
                    for kind in ("k", "v"):
                        v = fw[kind][j][l][0, pos]
                        obs[(kind, pos, j, l)] = v * (1 + noise * rng.standard_normal(v.shape))
            obs[("draft", pos, 1)] = fw["logits"][1][0, pos]
            obs[("verify", pos, 3)] = fw["logits"][3][0, pos]
        out.append(drift.request_stats(model, toks, 4, obs, "float32"))
    return out


def test_no_drift_passes_and_invisible_directions_are_named(tiny):
    rep = drift.verdict(synthetic_stats(tiny, {}), knobs.directions(tiny.cfg.num_layers))
    assert rep.ok, rep.failure
    for l in range(tiny.cfg.num_layers):
        for p in ("o_proj", "up_proj", "down_proj"):
            assert f"layer {l} {knobs.LABEL[p]}" in rep.invisible
        assert any(
            e.label == f"layer {l} gate_proj output scale = layer {l} post_attention_layernorm weight scale"
            for e in rep.estimates
        )


@pytest.mark.parametrize(
    "param,name",
    [
        (("input_layernorm_2", 1), "layer 1 input_layernorm_2 weight scale"),
        (("rope_theta", None), "RoPE base"),
        (("k_proj", 0), "layer 0 k_proj output scale"),
    ],
)
def test_an_injected_drift_is_estimated_and_named(tiny, param, name):
    rep = drift.verdict(synthetic_stats(tiny, {param: 1.01}), knobs.directions(tiny.cfg.num_layers))
    assert not rep.ok
    assert rep.failure.startswith(name), rep.failure
    est = next(e for e in rep.estimates if e.label.startswith(name))
    assert est.drift == pytest.approx(0.01, abs=0.001)


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize("noisy", [False, True])
def test_batched_forward_is_the_per_request_forward(tiny, noisy):
    """One forward over ragged per-row tokens (right-padded; noise: one stream per block of rows)
    gives, at each row's own positions, what forward over that request alone gives (FP64)."""
    P = len(knobs.params(tiny.cfg.num_layers))
    rng = np.random.default_rng(3)
    seqs = [list(map(int, rng.integers(0, 64, n))) for n in (7, 19, 1, 12)]
    rows = 3  # settings per request
    scales = 1 + 1e-3 * rng.standard_normal((len(seqs) * rows, P))
    sigma = 2.0**-8
    stream = lambda i: np.random.default_rng([5, i])
    batch = drift_model.forward(
        tiny,
        [t for t in seqs for _ in range(rows)],
        3,
        scales,
        noise=([stream(i) for i in range(len(seqs))], sigma) if noisy else None,
    )
    for i, t in enumerate(seqs):
        r = slice(i * rows, (i + 1) * rows)
        alone = drift_model.forward(tiny, t, 3, scales[r], noise=(stream(i), sigma) if noisy else None)
        for j in range(3):
            assert _rel(batch["logits"][j][r, : len(t)], alone["logits"][j]) < 1e-12
            for l in range(tiny.cfg.num_layers):
                for kind in ("k", "v"):
                    assert _rel(batch[kind][j][l][r, : len(t)], alone[kind][j][l]) < 1e-12


def test_batched_finite_differences_are_the_per_request_ones(tiny, monkeypatch):
    """request_stats from forwards batched over requests (ragged) equals request_stats from one
    forward per request, to FP64 rounding through the finite-difference step."""
    rng = np.random.default_rng(4)
    sets = []
    for n in (9, 23, 15):
        toks = list(map(int, rng.integers(0, 64, n)))
        fw = drift_model.forward(tiny, toks, 3, np.ones((1, len(knobs.params(2)))))
        obs = {
            (kind, p, j, l): fw[kind][j][l][0, p] * 1.001
            for kind in ("k", "v")
            for p in range(n - 1)
            for j in range(3)
            for l in range(2)
        }
        obs.update({("verify", p, 2): fw["logits"][2][0, p] for p in range(n // 2, n - 1)})
        sets.append((toks, obs))
    monkeypatch.setattr(calibration, "BATCH_ROWS_T", 0)  # one request per forward
    fwd = forwards.Forwards(tiny)
    alone = [drift.request_stats(tiny, t, 3, obs, "bfloat16", fwd) for t, obs in sets]
    monkeypatch.setattr(calibration, "BATCH_ROWS_T", 10**9)  # every request in one forward
    fwd = forwards.Forwards(tiny)
    fwd.batch_forwards([forwards.span(t, 3, obs) for t, obs in sets], "bfloat16")
    assert len(fwd.fd) == len(sets)
    batched = [drift.request_stats(tiny, t, 3, obs, "bfloat16", fwd) for t, obs in sets]
    for a, b in zip(alone, batched):
        assert a[2] == b[2]
        for x, y in ((a[0], b[0]), (a[1], b[1]), (a[3], b[3])):
            assert np.max(np.abs(x - y)) <= 1e-8 * np.max(np.abs(x)), np.max(np.abs(x - y)) / np.max(np.abs(x))
