import numpy as np
import pytest

from oracle import sampling as S
from oracle.errors import OracleError

SP = S.SamplingParams


def test_top_k_keeps_ties():
    p = S.filtered_probs(np.array([1, 3, 2, 3, 2, 0], np.float32), SP(1.0, top_k=3))
    assert (p > 0).tolist() == [False, True, True, True, True, False]     # ties at 2 kept


def test_top_p_shift_keeps_top_token():
    logits = np.array([5.0, 1.0, 0.0, -1.0], np.float32)
    p = S.filtered_probs(logits, SP(1.0, top_p=0.01))
    assert p.tolist() == [1.0, 0.0, 0.0, 0.0]
    # the token that crosses p stays (mass *before* it is <= p)
    probs = S.softmax(logits)
    p = S.filtered_probs(logits, SP(1.0, top_p=float(probs[0]) + 1e-3))
    assert (p > 0).tolist() == [True, True, False, False]


def test_temperature_then_filters():
    logits = np.array([2.0, 1.0, 0.0], np.float32)
    p = S.filtered_probs(logits, SP(0.5))
    assert np.allclose(p, S.softmax(logits / 0.5), atol=1e-7)


def test_categorical_inverse_cdf():
    probs = np.array([0.0, 0.25, 0.0, 0.75], np.float32)
    assert S.categorical(probs, 0.0) == 1
    assert S.categorical(probs, 0.2499) == 1
    assert S.categorical(probs, 0.25) == 3
    assert S.categorical(probs, 0.999999) == 3
    for u in np.linspace(0, 1, 1001, endpoint=False):
        assert probs[S.categorical(probs, u)] > 0
    with pytest.raises(OracleError, match="outside"):
        S.categorical(probs, 1.0)


def test_degenerate_cases_raise():
    with pytest.raises(OracleError, match="non-finite value nan at token 1"):
        S.filtered_probs(np.array([0.0, np.nan]), SP(1.0))
    with pytest.raises(OracleError, match="non-finite"):
        S.greedy_token(np.array([0.0, np.inf]))
    with pytest.raises(OracleError, match="q\\(x\\) = 0"):
        S.accepts(0.5, 0.2, 0.0)
    with pytest.raises(OracleError, match="all zero"):
        S.residual(np.array([0.5, 0.5]), np.array([0.5, 0.5]))


@pytest.mark.parametrize("kw,msg", [({"temperature": -1}, "temperature"), ({"temperature": 1, "top_k": 0}, "top_k"),
                                    ({"temperature": 1, "top_p": 0.0}, "top_p"), ({"temperature": 1, "top_p": 1.5}, "top_p"),
                                    ({"temperature": float("nan")}, "temperature")])
def test_bad_params(kw, msg):
    with pytest.raises(OracleError, match=msg):
        SP(**kw)


def test_output_distribution_equals_target_exactly():
    rng = np.random.default_rng(0)
    for _ in range(200):
        V = int(rng.integers(2, 12))
        p = rng.dirichlet(np.ones(V) * 0.5)
        q = rng.dirichlet(np.ones(V) * 0.5)
        q[rng.random(V) < 0.2] = 0
        if q.sum() == 0:
            continue
        q /= q.sum()
        assert np.abs(S.output_distribution(p, q) - p).max() < 1e-12


def test_enumerated_sampler_matches_output_distribution():
    """Run accepts/residual/categorical over a fine grid of (u_draft, u_accept, u_resid)."""
    p = np.array([0.5, 0.3, 0.2, 0.0], np.float32)
    q = np.array([0.1, 0.6, 0.1, 0.2], np.float32)
    grid = (np.arange(200) + 0.5) / 200
    out = np.zeros(4)
    res = S.residual(p, q)
    for ud in grid:
        x = S.categorical(q, ud)
        for ua in grid:
            if S.accepts(ua, p[x], q[x]):
                out[x] += 1
            else:
                for ur in grid[::10]:
                    out[S.categorical(res, ur)] += 1 / 20
    out /= out.sum()
    assert np.abs(out - p).max() < 5e-3
