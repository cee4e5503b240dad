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


# ---- masks, min-p, ties, stops (issue 13 parts 2-3) -----------------------------------------

def test_masked_tokens_are_never_sampled_nor_argmax():
    logits = np.array([4.0, 3.0, 2.0, 1.0], np.float32)
    p = S.filtered_probs(logits, SP(1.0, banned_token_ids=(0, 2)))
    assert (p > 0).tolist() == [False, True, False, True]
    assert S.greedy_token(logits, SP(banned_token_ids=(0,))) == 1
    assert S.greedy_token(logits, SP(allowed_token_ids=(2, 3))) == 2
    p = S.filtered_probs(logits, SP(1.0, allowed_token_ids=(1, 3), banned_token_ids=(3,)))
    assert p.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_minus_inf_is_legal_nan_and_all_masked_are_not():
    assert S.greedy_token(np.array([-np.inf, 0.5, -np.inf], np.float32)) == 1
    p = S.filtered_probs(np.array([-np.inf, 0.0, 0.0], np.float32), SP(1.0, top_k=1))
    assert p.tolist() == [0.0, 0.5, 0.5]                                   # ties at the top-k threshold
    with pytest.raises(OracleError, match="every token is masked"):
        S.filtered_probs(np.full(3, -np.inf, np.float32), SP(1.0))
    with pytest.raises(OracleError, match="every token is masked"):
        S.greedy_token(np.array([1.0, 2.0], np.float32), SP(banned_token_ids=(0, 1)))
    with pytest.raises(OracleError, match="non-finite value nan"):
        S.filtered_probs(np.array([-np.inf, np.nan], np.float32), SP(1.0))
    with pytest.raises(OracleError, match="allowed_token_ids minus banned"):
        SP(allowed_token_ids=(1,), banned_token_ids=(1,))


def test_min_p_is_vllms_after_temperature():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], np.float32))
    p = S.filtered_probs(logits, SP(1.0, min_p=0.25))                      # keeps p >= 0.125
    assert (p > 0).tolist() == [True, True, True, False]
    p = S.filtered_probs(logits, SP(0.5, min_p=0.25))                      # T = 0.5: p ~ [.68 .25 .06 .01]
    assert (p > 0).tolist() == [True, True, False, False]
    p = S.filtered_probs(logits, SP(1.0, min_p=1.0))
    assert p.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_top_p_keeps_every_token_tied_with_the_last_survivor():
    logits = np.array([2.0, 1.0, 1.0, 1.0, 0.0], np.float32)
    probs = S.softmax(logits)
    p = S.filtered_probs(logits, SP(1.0, top_p=float(probs[0]) + 1e-3))   # one 1.0-token would do
    assert (p > 0).tolist() == [True, True, True, True, False]
    p = S.filtered_probs(logits[::-1].copy(), SP(1.0, top_p=float(probs[0]) + 1e-3))
    assert (p > 0).tolist() == [False, True, True, True, True]             # not by token id


def test_stop_cut():
    P = SP(stop_token_ids=(7,), max_tokens=5)
    assert S.stop_cut([3, 7, 9], P, 0) == (2, "stop")                     # the stop token is kept
    assert S.stop_cut([3, 4, 9], P, 3) == (2, "length")                   # max_tokens mid-round
    assert S.stop_cut([3, 4, 7], P, 2) == (3, "stop")                     # stop at the last token
    assert S.stop_cut([3, 4], P, 0) == (2, None)
    assert S.stop_cut([3, 4], SP(), 100) == (2, None)


def test_check_token_refuses_wrapped_ids():
    assert S.check_token(3, 4) == 3
    for bad in (-1, 4, 1.0, True):
        with pytest.raises(OracleError, match="not a token id"):
            S.check_token(bad, 4, "draft token")
