import numpy as np
import pytest

from oracle import sampling as S
from oracle.errors import OracleError
from oracle.sampling_params import CHAIN, SamplingParams

SP = SamplingParams


def processors_on(p) -> list:
    """The processor steps of the chain that are on for p."""
    return [s.name for s in CHAIN.named("processor") if s.is_on(p)]


def test_top_k_keeps_ties():
    p = S.filtered_probs(np.array([1, 3, 2, 3, 2, 0], np.float32), SP(1.0, top_k=3))
    assert (p > 0).tolist() == [False, True, True, True, True, False]  # ties at 2 kept


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


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"temperature": -1}, "temperature"),
        ({"temperature": 1, "top_k": 0}, "top_k"),
        ({"temperature": 1, "top_p": 0.0}, "top_p"),
        ({"temperature": 1, "top_p": 1.5}, "top_p"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": 1, "typical_p": 0.0}, "typical_p must be in \\(0, 1\\], got 0.0"),
        ({"temperature": 1, "typical_p": 1.5}, "typical_p must be in \\(0, 1\\], got 1.5"),
        ({"temperature": 1, "typical_p": True}, "typical_p must be in \\(0, 1\\], got True"),
        ({"temperature": 1, "typical_p": "0.5"}, "typical_p must be in \\(0, 1\\], got '0.5'"),
    ],
)
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


# ---- masks, min-p, ties, stops -----------------------------------------


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
    assert p.tolist() == [0.0, 0.5, 0.5]  # ties at the top-k threshold
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
    p = S.filtered_probs(logits, SP(1.0, min_p=0.25))  # keeps p >= 0.125
    assert (p > 0).tolist() == [True, True, True, False]
    p = S.filtered_probs(logits, SP(0.5, min_p=0.25))  # T = 0.5: p ~ [.68 .25 .06 .01]
    assert (p > 0).tolist() == [True, True, False, False]
    p = S.filtered_probs(logits, SP(1.0, min_p=1.0))
    assert p.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_top_p_keeps_every_token_tied_with_the_last_survivor():
    logits = np.array([2.0, 1.0, 1.0, 1.0, 0.0], np.float32)
    probs = S.softmax(logits)
    p = S.filtered_probs(logits, SP(1.0, top_p=float(probs[0]) + 1e-3))  # one 1.0-token would do
    assert (p > 0).tolist() == [True, True, True, True, False]
    p = S.filtered_probs(logits[::-1].copy(), SP(1.0, top_p=float(probs[0]) + 1e-3))
    assert (p > 0).tolist() == [False, True, True, True, True]  # not by token id


def hf_typical(logits: np.ndarray, mass: float) -> np.ndarray:
    """Hugging Face's TypicalLogitsWarper (min_tokens_to_keep=1), written out in torch FP64
    from its definition: the kept mask of one row."""
    import torch

    scores = torch.from_numpy(logits.astype(np.float64))[None]
    normalized = torch.log_softmax(scores, dim=-1)
    ent = -(normalized * normalized.exp()).nansum(-1, keepdim=True)
    shifted = (-normalized - ent).abs()
    sorted_scores, idx = torch.sort(shifted, descending=False)
    cum = scores.gather(-1, idx).softmax(dim=-1).cumsum(dim=-1)
    last = (cum < mass).sum(dim=1).clamp(max=shifted.shape[-1] - 1)
    remove = sorted_scores > sorted_scores.gather(1, last.view(-1, 1))
    remove[..., :1] = False
    return ~remove.scatter(1, idx, remove)[0].numpy()


def test_typical_p_is_hugging_faces():
    rng = np.random.default_rng(5)
    checked = 0
    for trial in range(400):
        V = int(rng.integers(2, 50))
        logits = (rng.standard_normal(V) * rng.choice([0.3, 1.0, 3.0])).astype(np.float32)
        if trial % 4 == 0:
            logits[rng.integers(0, V, 2)] = -np.inf  # masked tokens (one row stays finite)
            if not np.isfinite(logits).any():
                continue
        mass, T = float(rng.choice([0.05, 0.3, 0.7, 0.9, 0.99])), float(rng.choice([0.6, 1.0, 1.5]))
        want = hf_typical(logits / np.float32(T), mass)
        # a cumulative mass this near `mass` may fall on either side in FP32: not compared
        p = np.exp(np.float64(logits / np.float32(T)) - np.max(logits / np.float32(T)))
        p /= p.sum()
        lp = np.log(p, where=p > 0, out=np.full(V, -np.inf))
        s = np.abs(-lp + np.sum(p[p > 0] * lp[p > 0]))
        cum = np.cumsum(p[np.argsort(s)])
        if np.min(np.abs(cum - mass)) < 1e-5:
            continue
        got = S.filtered_probs(logits, SP(T, typical_p=mass)) > 0
        assert np.array_equal(got, want & np.isfinite(logits)), (logits.tolist(), mass, T)
        checked += 1
    assert checked > 300


def test_typical_p_keeps_tied_tokens_together_and_is_off_at_one():
    logits = np.array([3.0, 1.0, 1.0, 1.0, 0.0, 2.0], np.float32)
    # p ~ [.54 .07 .07 .07 .03 .20]: by score 5, 0, then 1-3 tied; 0.8 is reached inside the tie
    kept = S.filtered_probs(logits, SP(1.0, typical_p=0.8)) > 0
    assert kept.tolist() == [True, True, True, True, False, True]
    kept = S.filtered_probs(logits[::-1].copy(), SP(1.0, typical_p=0.8)) > 0
    assert kept.tolist() == [True, False, True, True, True, True]  # not by token id
    assert (S.filtered_probs(logits, SP(1.0, typical_p=0.1)) > 0).tolist() == [False] * 5 + [True]
    for off in (None, 1.0):  # off: the same bits as no filter
        assert np.array_equal(S.filtered_probs(logits, SP(0.7, typical_p=off)), S.filtered_probs(logits, SP(0.7)))
    assert SP(**SP(1.0, typical_p=0.4).to_json()) == SP(1.0, typical_p=0.4)


def test_stop_cut():
    P = SP(stop_token_ids=(7,), max_tokens=5)
    assert S.stop_cut([3, 7, 9], P, 0) == (2, "stop")  # the stop token is kept
    assert S.stop_cut([3, 4, 9], P, 3) == (2, "length")  # max_tokens mid-round
    assert S.stop_cut([3, 4, 7], P, 2) == (3, "stop")  # stop at the last token
    assert S.stop_cut([3, 4], P, 0) == (2, None)
    assert S.stop_cut([3, 4], SP(), 100) == (2, None)


# ---- sequence-dependent processors (oracle/processors.py, vLLM's definitions) ----------------

import json  # noqa: E402

from oracle.processors import Seen  # noqa: E402

NEG = -np.inf


def vllm_processed(logits, params, prompt=(), output=()):
    """An independent FP64 implementation of vLLM's definitions, in the chain's order: the
    banned/allowed mask; bad words (the output, not the prompt, must end with all but the
    word's last token; a one-token word always masks); logit bias; min_tokens (stop tokens
    masked while fewer than min_tokens tokens are generated); penalties (repetition on prompt
    and output tokens: x > 0 -> x / r, else x * r; then frequency * count and presence *
    [count > 0] subtracted, counts over the output only); then Hugging Face's
    no_repeat_ngram_size on prompt + output (hf_no_repeat_ngram_bans)."""
    x = [float(v) for v in logits]
    V = len(x)
    for t in range(V):
        if t in params.banned_token_ids or (params.allowed_token_ids is not None and t not in params.allowed_token_ids):
            x[t] = NEG
    out = list(output)
    for word in params.bad_words:
        *prefix, last = word
        if not prefix or (len(out) >= len(prefix) and out[len(out) - len(prefix) :] == prefix):
            x[last] = NEG
    for t, b in params.logit_bias:
        x[t] += b
    if len(out) < params.min_tokens:
        for t in params.stop_token_ids:
            x[t] = NEG
    counts = {t: out.count(t) for t in set(out)}
    for t in set(prompt) | set(out):
        if params.repetition_penalty != 1:
            x[t] = x[t] / params.repetition_penalty if x[t] > 0 else x[t] * params.repetition_penalty
    for t, c in counts.items():
        x[t] -= params.frequency_penalty * c
        x[t] -= params.presence_penalty
    for t in hf_no_repeat_ngram_bans(params.no_repeat_ngram, list(prompt) + out):
        x[t] = NEG
    return np.array(x, np.float64)


def hf_no_repeat_ngram_bans(n, seq) -> list:
    """Hugging Face's _get_ngrams / _get_generated_ngrams (NoRepeatNGramLogitsProcessor) over
    the whole sequence, prompt and output: the tokens that follow an earlier occurrence of the
    last n-1 tokens."""
    if not n or len(seq) + 1 < n:
        return []
    ngrams = {}
    for gram in zip(*[seq[i:] for i in range(n)]):
        ngrams.setdefault(tuple(gram[:-1]), []).append(gram[-1])
    return ngrams.get(tuple(seq[len(seq) + 1 - n :]), [])


def _random_case(rng):
    V = int(rng.integers(2, 12))
    logits = (rng.standard_normal(V) * rng.choice([0.5, 2.0, 8.0])).astype(np.float32)
    prompt = tuple(int(t) for t in rng.integers(0, V, int(rng.integers(1, 6))))
    output = tuple(int(t) for t in rng.integers(0, V, int(rng.integers(0, 8))))
    pick = lambda: int(rng.integers(0, V))
    kw = {}
    if rng.random() < 0.6:
        kw["repetition_penalty"] = float(rng.choice([0.5, 2.0, rng.uniform(0.1, 3.0)]))
    if rng.random() < 0.6:
        kw["presence_penalty"], kw["frequency_penalty"] = (float(v) for v in rng.uniform(-2, 2, 2))
    if rng.random() < 0.5:
        kw["logit_bias"] = {pick(): float(rng.uniform(-100, 100)) for _ in range(int(rng.integers(1, 4)))}
    if rng.random() < 0.5:
        # words from the output's tokens, so prefixes match
        src = list(output) or [pick()]
        kw["bad_words"] = [
            tuple(int(rng.choice(src)) for _ in range(int(rng.integers(0, 3)))) + (pick(),)
            for _ in range(int(rng.integers(1, 3)))
        ]
    if rng.random() < 0.5:
        kw["stop_token_ids"] = (pick(),)
        kw["min_tokens"] = int(rng.integers(0, 10))
    if rng.random() < 0.2:
        kw["banned_token_ids"] = (pick(),)
    if rng.random() < 0.3:
        kw["no_repeat_ngram"] = int(rng.choice([1, 2, 2, 3, 3, 4]))
    return logits, SP(**kw), prompt, output


def test_processors_match_an_independent_vllm_implementation():
    rng = np.random.default_rng(25)
    checked = masked_rows = 0
    for _ in range(1000):
        logits, params, prompt, output = _random_case(rng)
        want = vllm_processed(logits, params, prompt, output)
        seen = Seen(prompt, output, drafts=min(2, len(output)), round_drafts=3)  # drafts: part of the output
        if not np.isfinite(want).any():
            masked_rows += 1
            with pytest.raises(OracleError, match="every token is masked"):
                S.processed_logits(logits, params, seen)
            continue
        got = S.processed_logits(logits, params, seen)
        assert got.dtype == np.float32
        assert (np.isneginf(got) == np.isneginf(want)).all(), (params, prompt, output, got, want)
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=2e-6, atol=2e-5)  # FP32 rounding of each op
        top = np.sort(want[fin])[::-1]
        if len(top) == 1 or top[0] - top[1] > 1e-3:
            assert S.greedy_token(logits, params, seen) == int(np.argmax(want))
        checked += 1
    assert checked > 750 and masked_rows > 0


def test_repetition_penalty_on_prompt_and_output_tokens():
    logits = np.array([2.0, -2.0, 1.0, 0.5, -1.0], np.float32)
    got = S.processed_logits(logits, SP(repetition_penalty=2.0), Seen(prompt=(0,), output=(1, 1)))
    assert got.tolist() == [1.0, -4.0, 1.0, 0.5, -1.0]  # positive / r, else * r, once
    got = S.processed_logits(logits, SP(repetition_penalty=0.5), Seen(prompt=(3,), output=(4,)))
    assert got.tolist() == [2.0, -2.0, 1.0, 1.0, -0.5]  # r < 1 rewards repeats
    got = S.processed_logits(np.array([0.0, 1.0], np.float32), SP(repetition_penalty=2.0), Seen((0,), ()))
    assert got.tolist() == [0.0, 1.0]  # 0 is "else": 0 * r


def test_presence_and_frequency_on_output_tokens_only():
    logits = np.array([1.0, 1.0, 1.0, 1.0], np.float32)
    p = SP(presence_penalty=0.25, frequency_penalty=0.5)
    got = S.processed_logits(logits, p, Seen(prompt=(0, 1), output=(2, 2, 3, 1)))
    assert got.tolist() == [1.0, 0.25, -0.25, 0.25]  # 1 - 0.5*count - 0.25
    got = S.processed_logits(logits, SP(presence_penalty=-2.0, frequency_penalty=-1.0), Seen((), (3, 3)))
    assert got.tolist() == [1.0, 1.0, 1.0, 5.0]  # negative: repeats rewarded


def test_no_repeat_ngram_counts_the_prompt_and_the_output():
    logits = np.zeros(6, np.float32)
    masked = lambda n, seen: np.flatnonzero(
        np.isneginf(S.processed_logits(logits, SP(no_repeat_ngram=n), seen))
    ).tolist()
    assert masked(2, Seen((1, 2, 3), (1,))) == [2]  # 1 2 seen in the prompt
    assert masked(2, Seen((1,), (2, 3, 1))) == [2]  # in the output
    assert masked(2, Seen((1, 2), (1, 4, 1))) == [2, 4]  # every earlier follower
    assert masked(1, Seen((5,), (0, 0))) == [0, 5]  # n = 1: every token seen
    assert masked(3, Seen((1, 2, 3), (1,))) == []  # (3, 1) never seen before
    assert masked(3, Seen((1, 2), (0, 1, 2))) == [0]
    assert masked(4, Seen((1,), ())) == [] and masked(2, Seen()) == []  # shorter than n - 1
    assert not processors_on(SP(no_repeat_ngram=0)) and SP(no_repeat_ngram=3).needs_seen


def test_logit_bias_adds_and_takes_a_dict():
    logits = np.array([0.0, 1.0, 2.0], np.float32)
    assert S.processed_logits(logits, SP(logit_bias={0: 5.0, 2: -1.5})).tolist() == [5.0, 1.0, 0.5]
    assert S.greedy_token(logits, SP(logit_bias={0: 2.5})) == 0  # bias changes a decision
    assert S.processed_logits(logits, SP(logit_bias={1: -100.0}))[1] == np.float32(-99.0)  # finite: not a mask


def test_bad_words_match_the_output_not_the_prompt():
    logits = np.zeros(6, np.float32)
    P = SP(bad_words=[(5,), (1, 2), (3, 4, 0)])
    masked = lambda seen: np.flatnonzero(np.isneginf(S.processed_logits(logits, P, seen))).tolist()
    assert masked(Seen((), ())) == [5]  # one-token word: always
    assert masked(Seen((1,), ())) == [5]  # prefix in the prompt: no
    assert masked(Seen((), (1,))) == [2, 5]
    assert masked(Seen((), (1, 3))) == [5]  # the output must END with it
    assert masked(Seen((), (2, 3, 4))) == [0, 5]
    assert masked(Seen((3,), (4,))) == [5]  # prefix across prompt/output: no
    assert masked(Seen((), (4,))) == [5]  # shorter than the prefix


def test_min_tokens_masks_stop_tokens_until_reached():
    logits = np.array([3.0, 2.0, 1.0], np.float32)
    P = SP(stop_token_ids=(0, 2), min_tokens=2)
    assert S.greedy_token(logits, P, Seen((0, 0, 0), ())) == 1  # the prompt does not count
    assert S.greedy_token(logits, P, Seen((), (1,))) == 1
    assert S.greedy_token(logits, P, Seen((), (1, 1))) == 0  # 2 generated: unmasked
    assert S.processed_logits(logits, SP(min_tokens=5)).tolist() == logits.tolist()  # no stop tokens: a no-op
    assert not SP(min_tokens=5).needs_seen and SP(stop_token_ids=(1,), min_tokens=1).needs_seen


def test_chain_order():
    assert [n for n, _ in CHAIN.processors] == [
        "mask",
        "bad_words",
        "min_tokens",
        "logit_bias",
        "penalties",
        "no_repeat_ngram",
    ]
    assert [n for n, _ in CHAIN.filters] == ["temperature", "min_p", "top_k", "top_p", "typical_p"]
    one = np.array([1.0, 0.0], np.float32)
    # bias before penalties: (1 - 2) * 2 = -2, not 1 / 2 - 2 = -1.5
    assert S.processed_logits(one, SP(logit_bias={0: -2.0}, repetition_penalty=2.0), Seen((0,), ()))[0] == -2.0
    # bias before frequency: the same either way for an addition; presence after repetition: (1 / 2) - 1
    assert S.processed_logits(one, SP(repetition_penalty=2.0, presence_penalty=1.0), Seen((), (0,)))[0] == -0.5
    # repetition before frequency: (1 - 1) is not divided: 1 / 2 - 1 = -0.5, not (1 - 1) / 2 = 0
    assert S.processed_logits(one, SP(repetition_penalty=2.0, frequency_penalty=1.0), Seen((), (0,)))[0] == -0.5
    # the mask first: a banned token stays banned whatever its bias
    assert S.greedy_token(one, SP(banned_token_ids=(1,), logit_bias={1: 100.0})) == 0
    # processors before temperature and the filters
    logits = np.array([2.0, 1.5, 0.0], np.float32)
    P = SP(0.5, top_k=1, logit_bias={1: 1.0})
    assert S.filtered_probs(logits, P).tolist() == [0.0, 1.0, 0.0]
    P = SP(0.7, repetition_penalty=1.7, presence_penalty=0.3)
    seen = Seen((2,), (0, 1))
    assert np.array_equal(
        S.filtered_probs(logits, P, seen), S.softmax(S.processed_logits(logits, P, seen) / np.float32(0.7))
    )
    # min_tokens masks before the penalties: a stop token's -inf is not resurrected by a negative presence
    P = SP(stop_token_ids=(0,), min_tokens=3, presence_penalty=-2.0, frequency_penalty=-2.0)
    assert S.processed_logits(one, P, Seen((), (0,)))[0] == -np.inf


def test_penalties_keep_minus_inf():
    x = np.array([-np.inf, 1.0, -np.inf], np.float32)
    for r in (0.5, 2.0):
        got = S.processed_logits(
            x, SP(repetition_penalty=r, presence_penalty=-2.0, frequency_penalty=-2.0), Seen((0,), (0, 2, 2))
        )
        assert np.isneginf(got[[0, 2]]).all() and np.isfinite(got[1])
    assert np.isneginf(S.processed_logits(x, SP(logit_bias={0: 100.0}))[0])


def test_all_masked_rows_are_errors():
    logits = np.array([1.0, 2.0, 3.0], np.float32)
    with pytest.raises(OracleError, match="every token is masked"):
        S.greedy_token(logits, SP(bad_words=[(0,), (1,), (2,)]), Seen())
    with pytest.raises(OracleError, match="every token is masked"):
        S.filtered_probs(logits, SP(1.0, allowed_token_ids=(1, 2), bad_words=[(1,), (0, 2)]), Seen((), (0,)))
    with pytest.raises(OracleError, match="every token is masked"):
        S.greedy_token(logits, SP(stop_token_ids=(0, 1), banned_token_ids=(2,), min_tokens=1), Seen())
    assert S.greedy_token(logits, SP(stop_token_ids=(0, 1), banned_token_ids=(2,), min_tokens=1), Seen((), (1,))) == 1


def test_processors_need_seen_and_are_off_by_default():
    logits = np.array([0.3, -1.2, 2.5, 0.0], np.float32)
    for p in (
        SP(repetition_penalty=1.1),
        SP(presence_penalty=0.1),
        SP(frequency_penalty=-0.1),
        SP(bad_words=[(1,)]),
        SP(stop_token_ids=(1,), min_tokens=1),
    ):
        assert p.needs_seen and processors_on(p)
        with pytest.raises(OracleError, match="pass seen="):
            S.processed_logits(logits, p)
    assert processors_on(SP(logit_bias={1: 1.0})) == ["logit_bias"] and not SP(logit_bias={1: 1.0}).needs_seen
    off = SP(0.8, top_k=3, stop_token_ids=(1,))
    assert processors_on(off) == []
    seen = Seen((0, 1), (2, 2, 3), 2, 4)
    assert np.array_equal(S.filtered_probs(logits, off), S.filtered_probs(logits, off, seen))  # the same bits
    assert set(off.to_json()).isdisjoint({"repetition_penalty", "logit_bias", "bad_words", "min_tokens"})


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"repetition_penalty": 0.0}, "repetition_penalty must be a finite number > 0"),
        ({"repetition_penalty": -1.0}, "repetition_penalty"),
        ({"repetition_penalty": float("inf")}, "repetition_penalty"),
        ({"repetition_penalty": True}, "repetition_penalty"),
        ({"presence_penalty": 2.5}, r"presence_penalty must be in \[-2, 2\]"),
        ({"presence_penalty": float("nan")}, "presence_penalty"),
        ({"frequency_penalty": -2.01}, r"frequency_penalty must be in \[-2, 2\]"),
        ({"logit_bias": {-1: 1.0}}, "not a token id"),
        ({"logit_bias": {1: 100.5}}, r"\[-100, 100\]"),
        ({"logit_bias": {1: float("nan")}}, r"\[-100, 100\]"),
        ({"logit_bias": ((1, 1.0), (1, 2.0))}, "names a token twice"),
        ({"logit_bias": ((1,),)}, "must map token ids to biases"),
        ({"logit_bias": 3}, "must map token ids to biases"),
        ({"bad_words": ((),)}, "non-empty sequences"),
        ({"bad_words": (3,)}, "non-empty sequences"),
        ({"bad_words": ((1, -2),)}, "token ids >= 0"),
        ({"min_tokens": -1}, "min_tokens must be an integer >= 0"),
        ({"min_tokens": 1.0}, "min_tokens"),
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens 5 exceeds max_tokens 4"),
    ],
)
def test_bad_processor_params(kw, msg):
    with pytest.raises(OracleError, match=msg):
        SP(**kw)


def test_processor_params_edges_and_normal_forms():
    p = SP(
        repetition_penalty=1e-3,
        presence_penalty=-2,
        frequency_penalty=2,
        logit_bias={np.int64(9): -1.5, 5: 2},
        bad_words=[[3, 4], (np.int32(7),)],
        min_tokens=4,
        max_tokens=4,
    )
    assert p.logit_bias == ((5, 2.0), (9, -1.5)) and all(type(t) is int for t, _ in p.logit_bias)
    assert p.bad_words == ((3, 4), (7,)) and p.presence_penalty == -2.0 and type(p.presence_penalty) is float
    assert SP(logit_bias=[(1, 100), (0, -100)]).logit_bias == ((0, -100.0), (1, 100.0))
    p.check_vocab(10)
    with pytest.raises(OracleError, match=r"logit_bias holds 9, outside the vocabulary \[0, 8\)"):
        p.check_vocab(8)
    with pytest.raises(OracleError, match=r"bad_words holds 7, outside the vocabulary \[0, 6\)"):
        SP(bad_words=[(1, 7)]).check_vocab(6)


@pytest.mark.parametrize(
    "p",
    [
        SP(
            repetition_penalty=1.3,
            presence_penalty=0.5,
            frequency_penalty=0.2,
            logit_bias={5: 2.0, 9: -1.5},
            bad_words=[(3, 4), (7,)],
            min_tokens=4,
            stop_token_ids=(2,),
        ),
        SP(
            0.7,
            top_k=5,
            top_p=0.9,
            seed=11,
            min_p=0.05,
            logit_bias={0: -100},
            max_tokens=9,
            min_tokens=9,
            stop_token_ids=(1, 3),
            banned_token_ids=(4,),
        ),
        SP(presence_penalty=-2.0),
        SP(1.2, bad_words=[(1, 2, 3)]),
        SP(no_repeat_ngram=3, min_tokens=2),
        SP(),
    ],
)
def test_to_json_round_trip(p):
    j = p.to_json()
    assert SP(**j) == p
    assert SP(**json.loads(json.dumps(j))) == p  # lists, through a trace file


# ---- bad values of the steps' parameters (oracle.sampling_params.SamplingParams) ----
# (a new step adds its bad values here, beside its test against an independent implementation)
# Refused where a request is made (the CLI's flags, a trace's params, a plug-in's request), so
# each must be one OracleError line that names the field and the value.

BAD_PROCESSOR_PARAMS = [
    ("repetition penalty zero", {"repetition_penalty": 0}, "repetition_penalty", "0"),
    ("repetition penalty negative", {"repetition_penalty": -1.3}, "repetition_penalty", "-1.3"),
    ("repetition penalty nan", {"repetition_penalty": float("nan")}, "repetition_penalty", "nan"),
    ("repetition penalty inf", {"repetition_penalty": float("inf")}, "repetition_penalty", "inf"),
    ("repetition penalty a string", {"repetition_penalty": "1.3"}, "repetition_penalty", "'1.3'"),
    ("repetition penalty a bool", {"repetition_penalty": True}, "repetition_penalty", "True"),
    ("presence penalty above 2", {"presence_penalty": 2.5}, "presence_penalty", "2.5"),
    ("presence penalty below -2", {"presence_penalty": -3}, "presence_penalty", "-3"),
    ("presence penalty none", {"presence_penalty": None}, "presence_penalty", "None"),
    ("frequency penalty above 2", {"frequency_penalty": 2.01}, "frequency_penalty", "2.01"),
    ("frequency penalty nan", {"frequency_penalty": float("nan")}, "frequency_penalty", "nan"),
    ("logit bias negative token", {"logit_bias": {-1: 2.0}}, "logit_bias", "-1"),
    ("logit bias float token", {"logit_bias": {1.5: 2.0}}, "logit_bias", "1.5"),
    ("logit bias bool token", {"logit_bias": {True: 2.0}}, "logit_bias", "True"),
    ("logit bias above 100", {"logit_bias": {5: 101.0}}, "logit_bias of token 5", "101.0"),
    ("logit bias below -100", {"logit_bias": ((5, -150),)}, "logit_bias of token 5", "-150"),
    ("logit bias inf", {"logit_bias": {5: float("-inf")}}, "logit_bias of token 5", "-inf"),
    ("logit bias string", {"logit_bias": {5: "2"}}, "logit_bias of token 5", "'2'"),
    ("logit bias duplicate token", {"logit_bias": ((5, 2.0), (5, -1.0))}, "logit_bias", "twice"),
    ("logit bias not pairs", {"logit_bias": (5, 2.0)}, "logit_bias", "must map token ids to biases"),
    ("logit bias triples", {"logit_bias": ((5, 2.0, 1),)}, "logit_bias", "must map token ids to biases"),
    ("bad words empty word", {"bad_words": ((3, 4), ())}, "bad_words", "[(3, 4), ()]"),
    ("bad words not sequences", {"bad_words": (3, 4)}, "bad_words", "[3, 4]"),
    ("bad words a string", {"bad_words": ("ab",)}, "bad_words", "non-empty sequences of token ids"),
    ("bad words negative id", {"bad_words": ((3, -4),)}, "bad_words", "-4"),
    ("bad words float id", {"bad_words": ((3.0,),)}, "bad_words", "3.0"),
    ("min tokens negative", {"min_tokens": -1}, "min_tokens", "-1"),
    ("min tokens float", {"min_tokens": 2.0}, "min_tokens", "2.0"),
    ("min tokens none", {"min_tokens": None}, "min_tokens", "None"),
    ("min tokens above max tokens", {"min_tokens": 6, "max_tokens": 5}, "min_tokens 6 exceeds max_tokens 5", ""),
    ("no repeat ngram negative", {"no_repeat_ngram": -1}, "no_repeat_ngram", "-1"),
    ("no repeat ngram float", {"no_repeat_ngram": 2.0}, "no_repeat_ngram", "2.0"),
    ("no repeat ngram none", {"no_repeat_ngram": None}, "no_repeat_ngram", "None"),
]


@pytest.mark.parametrize("name,kw,field,value", BAD_PROCESSOR_PARAMS, ids=[n for n, *_ in BAD_PROCESSOR_PARAMS])
def test_bad_processor_params_are_refused_in_one_line(name, kw, field, value):
    from oracle.errors import OracleError
    from oracle.sampling_params import SamplingParams

    with pytest.raises(OracleError) as e:
        SamplingParams(**kw)
    msg = str(e.value)
    assert "\n" not in msg and field in msg and value in msg, msg


@pytest.mark.parametrize(
    "kw,field,token",
    [({"logit_bias": {3: 1.0, 64: -1.0}}, "logit_bias", 64), ({"bad_words": ((1, 2), (70,))}, "bad_words", 70)],
)
def test_processor_token_ids_outside_the_vocabulary_are_refused(kw, field, token):
    from oracle.errors import OracleError
    from oracle.sampling_params import SamplingParams

    p = SamplingParams(**kw)
    p.check_vocab(100)
    with pytest.raises(OracleError, match=rf"^request 3: {field} holds {token}, outside the vocabulary \[0, 64\)$"):
        p.check_vocab(64, "request 3")
