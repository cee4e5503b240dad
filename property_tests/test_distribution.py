"""The output distribution of speculative sampling (DESIGN.md section 5).

(a) exact, on random small p, q and filters (the backend's host sampling functions when it
    exposes `backend.sampling`, else oracle.sampling):
    * test_output_distribution_is_the_target: oracle.sampling.output_distribution(p, q)
      equals the filtered target p within 1e-12;
    * test_enumeration_through_the_sampler_converges: enumerating a midpoint grid of G
      uniforms through the actual functions (categorical for the draft, accepts, residual +
      categorical on rejection) gives the target within (V + 4) / G, for G = 512 and 4096;
    * test_filters_follow_the_spec: filtered_probs against an independent implementation
      of "mask, temperature, min-p, top-k, top-p on the mass before a token, typical-p on the
      mass of the lower scores, softmax" where tied logits share their fate (logit_pairs
      quantises logits in half the cases);
    * test_residual_is_a_distribution: the backend's residual sums to 1 and is
      normalize(max(0, p - q)).
(b) sampled, real rounds of the backend (vocab 24, d=1, D=2, K=1..2, N seeded requests with
    the same one-token prompt in one batch): the first emitted token of each request must
    follow the filtered target p of offset 0 (from the reference's verification logits), by a
    chi-square goodness-of-fit test at alpha = 1e-6 with fixed seeds.

Power: N is computed per configuration so that the same test rejects, with probability
>= 1 - 1e-4, a sampler whose first-token distribution is off by 2% total variation in the
direction `biased()` (2% of mass moved onto the least likely token of p >= 1%, taken from
all others in proportion): chi-square noncentrality lambda = N * sum((p' - p)^2 / p) over the
bins. meta_tests/test_power.py runs exactly this test against such a biased sampler
(meta_tests.faulty:make_biased_sampler) and asserts the rejection. A 2% TV bias in the least
detectable direction (half the mass scaled down, half up: sum((p'-p)^2/p) = 4 * 0.02^2) would
need ~N_WORST samples per configuration; that is nightly-sized and not run in ci.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from hypothesis import event, example, given, settings
from scipy import stats

from oracle import sampling as oracle_sampling
from oracle.config import ModelConfig
from oracle.sampling_params import SamplingParams

from . import harness
from .harness import examples
from .strategies import seeded_model, logit_pairs

# ---- (a) exact -----------------------------------------------------------------------------


def _normalized(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / x.sum()


@settings(max_examples=examples(100))
@given(case=logit_pairs())
def test_output_distribution_is_the_target(case):
    impl = harness.sampling_impl()
    lp, lq, params = case
    p = _normalized(impl.filtered_probs(lp, params))
    q = _normalized(impl.filtered_probs(lq, params))
    out = getattr(impl, "output_distribution", oracle_sampling.output_distribution)(p, q)
    assert np.all(out >= 0) and abs(out.sum() - 1) < 1e-12, f"output distribution {out} is not a distribution"
    err = np.max(np.abs(out - p))
    assert err <= 1e-12, f"output distribution differs from the target by {err:.3g}"
    event(f"support {int((p > 0).sum())} of {len(p)}" if (p > 0).sum() < 4 else "support >= 4")


def enumerate_output(impl, p, q, G: int) -> np.ndarray:
    """The emitted token's distribution when each uniform runs over the midpoint grid
    (k + 1/2) / G: draft x = categorical(q, u1); accepted iff accepts(u2, p[x], q[x]); else
    categorical(residual(p, q), u3). Independent uniforms, so the grid factorizes."""
    grid = (np.arange(G) + 0.5) / G
    V = len(p)
    drafted = np.bincount([impl.categorical(q, float(u)) for u in grid], minlength=V) / G
    out = np.zeros(V)
    reject = 0.0
    for x in np.flatnonzero(drafted):
        acc = sum(bool(impl.accepts(float(u), float(p[x]), float(q[x]))) for u in grid) / G
        out[x] += drafted[x] * acc
        reject += drafted[x] * (1 - acc)
    if reject > 0:
        res = impl.residual(p, q)
        out += reject * np.bincount([impl.categorical(res, float(u)) for u in grid], minlength=V) / G
    return out


@settings(max_examples=examples(30))
@given(case=logit_pairs(max_vocab=24))
def test_enumeration_through_the_sampler_converges(case):
    impl = harness.sampling_impl()
    lp, lq, params = case
    p, q = impl.filtered_probs(lp, params), impl.filtered_probs(lq, params)
    target = _normalized(p)
    V = len(p)
    for G in (512, 4096):
        err = float(np.max(np.abs(enumerate_output(impl, p, q, G) - target)))
        assert err <= (V + 4) / G + 1e-6, (
            f"grid of {G} uniforms: emitted distribution is {err:.3g} from the target (bound {(V + 4) / G:.3g})"
        )
    event("draft == target" if np.array_equal(p, q) else "draft != target")


AMBIGUOUS = 1e-5  # top-p/min-p: tokens this close to the threshold may go either way


def spec_filter(logits, params: SamplingParams):
    """Independent FP64 implementation of the filter chain (oracle/sampling_params.py docstring):
    mask, temperature, min-p, top-k, top-p, softmax, where a token's survival depends only on
    its value (tied tokens share their fate). Returns (probabilities, ambiguous token mask)."""
    V = len(logits)
    x = np.asarray(logits, np.float32).copy()
    if params.allowed_token_ids is not None:
        x[[t for t in range(V) if t not in set(params.allowed_token_ids)]] = -np.inf
    x[list(params.banned_token_ids)] = -np.inf
    x = x / np.float32(params.temperature)
    keep = x > -np.inf
    ambiguous = np.zeros(V, bool)

    def probs():
        e = np.where(keep, np.exp(x.astype(np.float64) - x[keep].max()), 0.0)
        return e / e.sum()

    if params.min_p:
        pr = probs()
        edge = params.min_p * pr.max()
        ambiguous |= keep & (np.abs(pr - edge) <= AMBIGUOUS * pr.max())
        keep &= pr >= edge
    if params.top_k is not None and params.top_k < V:
        kth = np.sort(np.where(keep, x, -np.inf))[-params.top_k]
        keep &= x >= kth  # every token tied at the k-th value stays
    if params.top_p is not None and params.top_p < 1:
        pr = probs()
        for t in np.flatnonzero(keep):
            above = pr[keep & (pr > pr[t])].sum()  # mass of the strictly more probable tokens
            if abs(above - params.top_p) <= AMBIGUOUS:
                ambiguous[t] = True
            elif above > params.top_p:
                keep[t] = False
    ambiguous[np.argmax(x)] = False  # the top token always stays (min-p, top-k, top-p)
    if params.typical_p is not None and params.typical_p < 1:
        keep, ambiguous = _spec_typical(x, keep, ambiguous, params.typical_p)
    return probs(), ambiguous


TYPICAL_SCORE_EPS = 1e-4  # typical-p: scores this close may order either way in FP32


def _spec_typical(x, keep, ambiguous, mass):
    """Hugging Face's typical-p restated: with H the entropy of the kept tokens, a token stays
    iff the mass of the tokens whose score |-log p - H| is strictly smaller than its own is
    below `mass` (so the lowest score stays, and equal scores share their fate)."""
    e = np.where(keep, np.exp(x.astype(np.float64) - x[keep].max()), 0.0)
    pr = e / e.sum()
    lp = np.log(pr, where=keep, out=np.full(len(x), -np.inf))
    score = np.where(keep, np.abs(-lp + np.sum(pr[keep] * lp[keep])), np.inf)
    out, amb = keep.copy(), ambiguous.copy()
    for t in np.flatnonzero(keep):
        below = pr[score < score[t]].sum()
        lo = pr[score < score[t] - TYPICAL_SCORE_EPS].sum()
        hi = pr[(score < score[t] + TYPICAL_SCORE_EPS) & (x != x[t])].sum()
        if min(lo, hi) - AMBIGUOUS < mass <= max(lo, hi) + AMBIGUOUS or abs(below - mass) <= AMBIGUOUS:
            amb[t] = True
        out[t] = below < mass
    return out, amb


# A tie straddling the top-k threshold, whatever examples this Hypothesis version draws: the
# spec keeps both tied tokens (3 survive top-k=2).
TIE_AT_TOP_K = (
    np.array([2.0, 1.0, 1.0, 0.0], np.float32),
    np.array([2.0, 1.0, 1.0, 0.0], np.float32),
    SamplingParams(1.0, top_k=2, seed=0),
)


@settings(max_examples=examples(100))
@given(case=logit_pairs())
@example(case=TIE_AT_TOP_K)
def test_filters_follow_the_spec(case):
    impl = harness.sampling_impl()
    logits, _, params = case
    got = np.asarray(impl.filtered_probs(logits, params), np.float64)
    want, ambiguous = spec_filter(logits, params)
    assert np.all(np.isfinite(got)) and np.all(got >= 0) and abs(got.sum() - 1) < 1e-5, (
        f"filtered probabilities {got} are not a distribution (params {params})"
    )
    underflow = (want > 0) & (want < 1e-30)  # FP32 may round these to 0
    bad = np.flatnonzero(((got > 0) != (want > 0)) & ~ambiguous & ~underflow)
    assert not bad.size, (
        f"token {bad[0]}: filtered probability {got[bad[0]]:.4g}, the spec gives {want[bad[0]]:.4g} "
        f"(params {params}, logits {logits.tolist()})"
    )
    kept = got > 0
    masked = np.where(want > 0, logits, -np.inf) if (want > 0).any() else logits
    top = int(np.argmax(masked))
    assert got[top] > 0 or ambiguous[top], "the spec's top token was filtered out"
    live = np.ones(len(logits), bool)  # not masked by banned/allowed ids
    if params.allowed_token_ids is not None:
        live[:] = False
        live[list(params.allowed_token_ids)] = True
    live[list(params.banned_token_ids)] = False
    same = (np.asarray(logits)[:, None] == np.asarray(logits)[None, :]) & live[:, None] & live[None, :]
    assert not np.any(same & (kept[:, None] != kept[None, :]) & ~ambiguous[:, None] & ~ambiguous[None, :]), (
        f"tied logits {logits.tolist()} were split by the filters (kept {kept.tolist()}, params {params})"
    )
    renorm = np.where(kept, want, 0.0)
    renorm /= renorm.sum()
    err = np.max(np.abs(got - renorm))
    assert err < 1e-5, f"filtered probabilities differ from the spec's by {err:.3g} (params {params})"
    ties = int(same.sum()) > int(live.sum())
    event(
        ("tied logits, " if ties else "")
        + (f"kept {int(kept.sum())} token(s)" if kept.sum() <= 2 else "kept > 2 tokens")
    )


@settings(max_examples=examples(100))
@given(case=logit_pairs())
def test_residual_is_a_distribution(case):
    """The backend's residual normalize(max(0, p - q)) sums to 1 (not only after the draw's
    rescaling by the cdf's last entry) and is proportional to max(0, p - q)."""
    impl = harness.sampling_impl()
    lp, lq, params = case
    p = np.asarray(impl.filtered_probs(lp, params), np.float32)
    q = np.asarray(impl.filtered_probs(lq, params), np.float32)
    diff = np.maximum(p.astype(np.float64) - q, 0.0)
    if not diff.sum() > 1e-6:
        event("p == q: no residual")
        return
    r = np.asarray(impl.residual(p, q), np.float64)
    assert np.all(r >= 0) and abs(r.sum() - 1) <= 1e-5, f"residual sums to {r.sum():.7g}, not 1 (min {r.min():.3g})"
    err = np.max(np.abs(r - diff / diff.sum()))
    assert err <= 1e-5, f"residual differs from normalize(max(0, p - q)) by {err:.3g}"
    event("residual checked")


# ---- (b) sampled: chi-square on real rounds -------------------------------------------------

ALPHA = 1e-6
BETA = 1e-4  # 1 - power against the 2% TV bias
DELTA = 0.02  # total variation of the bias the test must detect
MIN_BIAS_P = 0.01  # the bias lands on a token of p >= 1% (stays a bin of its own)
MIN_EXPECTED = 5  # chi-square bins: tokens with N p < 5 are pooled

DIST_CFG = ModelConfig(
    vocab_size=24, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8
)
DIST_PROMPT = [8]  # chosen for a long tail: fewer trials for the same power
DIST_DEPTHS = (1, 2)

# (id, params without seed, K)
CONFIGS = [
    ("t1.0-K1", dict(temperature=1.0), 1),
    ("t0.7-topk6-K2", dict(temperature=0.7, top_k=6), 2),
    ("t1.3-topp0.85-K1", dict(temperature=1.3, top_p=0.85), 1),
    ("t1.0-topk10-topp0.9-K1", dict(temperature=1.0, top_k=10, top_p=0.9), 1),
    ("t2.0-topk>=vocab-K2", dict(temperature=2.0, top_k=40), 2),
    ("t0.5-topp1e-6-K1 (one token)", dict(temperature=0.5, top_p=1e-6), 1),
    ("t1.5-typical0.9-K1", dict(temperature=1.5, typical_p=0.9), 1),
]


def biased(p: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """p with `delta` total variation moved onto its least likely token of p >= MIN_BIAS_P,
    taken from all other tokens in proportion (support unchanged). Returned unchanged when
    no token qualifies (e.g. a point mass: nothing to bias within the support)."""
    p = np.asarray(p, np.float64)
    cands = np.flatnonzero((p >= MIN_BIAS_P) & (p <= 1 - delta))
    if not cands.size:
        return p.copy()
    j = cands[np.argmin(p[cands])]
    eps = delta / (1 - p[j])
    out = (1 - eps) * p
    out[j] += eps
    return out


def bins(p: np.ndarray, n: int) -> list[np.ndarray]:
    """Token groups for the chi-square test: each token with n p >= 5 alone, the others of
    the support pooled (into the smallest bin if the pool itself is too small)."""
    support = np.flatnonzero(p > 0)
    big = [np.array([t]) for t in support if n * p[t] >= MIN_EXPECTED]
    small = np.array([t for t in support if n * p[t] < MIN_EXPECTED], int)
    if small.size:
        if n * p[small].sum() >= MIN_EXPECTED or not big:
            big.append(small)
        else:
            k = min(range(len(big)), key=lambda b: p[big[b]].sum())
            big[k] = np.concatenate([big[k], small])
    return big


def chi_square(counts: np.ndarray, p: np.ndarray) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value) of counts against p."""
    n = int(counts.sum())
    groups = bins(p, n)
    obs = np.array([counts[g].sum() for g in groups], np.float64)
    exp = np.array([n * p[g].sum() for g in groups])
    if len(groups) < 2:
        return 0.0, 0, 1.0
    stat = float(((obs - exp) ** 2 / exp).sum())
    return stat, len(groups) - 1, float(stats.chi2.sf(stat, len(groups) - 1))


def power(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """P(reject at ALPHA) when the samples follow q instead of p (noncentral chi-square)."""
    groups = bins(p, n)
    if len(groups) < 2:
        return 1.0
    pb = np.array([p[g].sum() for g in groups])
    qb = np.array([q[g].sum() for g in groups])
    lam = n * float(((qb - pb) ** 2 / pb).sum())
    df = len(groups) - 1
    return float(stats.ncx2.sf(stats.chi2.isf(ALPHA, df), df, lam))


def samples_needed(p: np.ndarray, q: np.ndarray, beta: float = BETA, lo: int = 200, hi: int = 10**7) -> int:
    """The least N (to 2%) with power >= 1 - beta against q."""
    if power(p, q, hi) < 1 - beta:
        raise ValueError("bias undetectable with 10^7 samples")
    while hi > lo * 1.02:
        mid = int((lo * hi) ** 0.5)
        lo, hi = (lo, mid) if power(p, q, mid) >= 1 - beta else (mid, hi)
    return hi


def worst_case_samples(df: int = 10) -> int:
    """N for a 2% TV bias in the least detectable direction (sum((p'-p)^2/p) = 4 delta^2)."""
    lam_lo, lam_hi = 1.0, 1e4
    crit = stats.chi2.isf(ALPHA, df)
    while lam_hi > lam_lo * 1.01:
        mid = (lam_lo * lam_hi) ** 0.5
        lam_lo, lam_hi = (lam_lo, mid) if stats.ncx2.sf(crit, df, mid) >= 1 - BETA else (mid, lam_hi)
    return int(lam_hi / (4 * DELTA**2))


N_WORST = worst_case_samples()


@functools.cache
def target_distribution(config_id: str) -> np.ndarray:
    """The filtered target p of offset 0 from the reference's verification logits."""
    params, _ = _config(config_id)
    s = harness.REFERENCE.session(seeded_model(DIST_CFG, 0), *DIST_DEPTHS, "block", "sequential")
    s.add(0, DIST_PROMPT, params)
    tr = s.step({0: 1})
    return _normalized(oracle_sampling.filtered_probs(tr.verify_logits[(0, 0)], params))  # FP32 sums to 1 +- 1e-7


def _config(config_id: str) -> tuple[SamplingParams, int]:
    kw, K = next((kw, K) for cid, kw, K in CONFIGS if cid == config_id)
    return SamplingParams(**kw), K


def trials(config_id: str) -> int:
    p = target_distribution(config_id)
    return samples_needed(p, biased(p)) if (p > 0).sum() > 1 else 500


def first_tokens(bk, config_id: str, n: int) -> np.ndarray:
    """Counts of the first emitted token of n seeded requests (one batch, one round; block
    and loop rounds alternate between configurations)."""
    params, K = _config(config_id)
    mode = ("block", "loop")[[c[0] for c in CONFIGS].index(config_id) % 2]
    s = bk.session(seeded_model(DIST_CFG, 0), *DIST_DEPTHS, mode, bk.policies[0])
    base = 1_000_003 * (1 + [c[0] for c in CONFIGS].index(config_id))
    for i in range(n):
        s.add(i, DIST_PROMPT, dataclasses.replace(params, seed=base + i))
    tr = s.step({i: K + 1 for i in range(n)})
    return np.bincount([tr.emitted[i][0] for i in range(n)], minlength=DIST_CFG.vocab_size)


def check_emitted_distribution(config_id: str, bk=None) -> tuple[float, int]:
    """The chi-square property for one configuration; returns (p-value, N)."""
    bk = bk or harness.backend()
    p = target_distribution(config_id)
    n = trials(config_id)
    counts = first_tokens(bk, config_id, n)
    outside = np.flatnonzero((counts > 0) & (p == 0))
    assert not outside.size, (
        f"{bk.name} [{config_id}]: token {outside[0]} emitted {counts[outside[0]]} times, "
        f"but the filtered target gives it probability 0"
    )
    stat, df, pval = chi_square(counts, p)
    assert pval > ALPHA, (
        f"{bk.name} [{config_id}]: first emitted tokens of {n} seeded requests do not follow the "
        f"filtered target: chi-square {stat:.1f} with {df} df, p-value {pval:.2g} <= {ALPHA:g}"
    )
    return pval, n


@pytest.mark.parametrize("config_id", [c[0] for c in CONFIGS])
def test_emitted_tokens_follow_the_target(config_id):
    check_emitted_distribution(config_id)


@pytest.mark.parametrize("config_id", [c[0] for c in CONFIGS])
def test_trial_count_has_the_power(config_id):
    """The N used above detects the 2% TV bias with power >= 1 - 1e-4 (and is not absurd)."""
    p = target_distribution(config_id)
    n = trials(config_id)
    if (p > 0).sum() > 1:
        assert power(p, biased(p), n) >= 1 - BETA
        assert abs(0.5 * np.abs(biased(p) - p).sum() - DELTA) < 1e-9
    assert n <= 50_000
