"""Every input the property suite generates comes from this module.

Size caps (environment variables; the defaults depend on the Hypothesis profile so that the
`ci` profile stays fast on a 2-core machine and `nightly` covers the full ranges):

    variable              ci / dev   nightly   what it caps
    ORACLE_MAX_REQUESTS   6          16        requests per scenario
    ORACLE_MAX_TOKENS     9          9         token count T_i = K_i + 1 (K_i = 0..8)
    ORACLE_MAX_PROMPT     12         32        prompt length
    ORACLE_MAX_LAYERS     2          3         layers of the random model
    ORACLE_MAX_ROUNDS     4          8         rounds of a multi-round scenario
    ORACLE_MAX_DEPTH      6          6         target loops D (d is 1..D-1)

The caps are read when a test module builds its strategies (after pytest has loaded the
profile), so `HYPOTHESIS_PROFILE=nightly` and `--hypothesis-profile=nightly` both widen them.
Models are cached by (config, weight seed): `seeded_model(cfg, seed)`.

Requests: `sampling_params` (what the round properties draw) is `base_params` (greedy or
sampled, filters and masks) with the sequence-dependent processors in a third of the requests
(`with_processors`: penalties, logit bias, bad words from the prompt's tokens, and min_tokens
where there are stop tokens, as in `stop_params`); property_tests/test_processor_props.py
draws them on every request.
"""

from __future__ import annotations

import functools
import os

from hypothesis import settings
from hypothesis import strategies as st

from oracle.config import ModelConfig
from oracle.judge.scenario import Case
from oracle.model import LoopedModel, random_weights
from oracle.rng_events import POLICIES
from oracle.sampling_params import CHAIN, SamplingParams

MODES = ("block", "loop")

_CAPS = {  # name: (ci/dev default, nightly default)
    "ORACLE_MAX_REQUESTS": (6, 16),
    "ORACLE_MAX_TOKENS": (9, 9),
    "ORACLE_MAX_PROMPT": (12, 32),
    "ORACLE_MAX_LAYERS": (2, 3),
    "ORACLE_MAX_ROUNDS": (4, 8),
    "ORACLE_MAX_DEPTH": (6, 6),
}
_LIMITS = {
    "ORACLE_MAX_REQUESTS": 16,
    "ORACLE_MAX_TOKENS": 9,
    "ORACLE_MAX_PROMPT": 32,
    "ORACLE_MAX_LAYERS": 3,
    "ORACLE_MAX_ROUNDS": 64,
    "ORACLE_MAX_DEPTH": 6,
}


def profile_name() -> str:
    try:
        return settings.get_current_profile_name()
    except Exception:  # no profile loaded (scripts)
        return os.environ.get("HYPOTHESIS_PROFILE", "dev")


def cap(name: str) -> int:
    """The current value of one size cap (environment variable, else the profile default)."""
    value = os.environ.get(name)
    if value:
        n = int(value)
    else:
        ci, nightly = _CAPS[name]
        n = nightly if profile_name() == "nightly" else ci
    low = 2 if name == "ORACLE_MAX_DEPTH" else 1
    return max(low, min(n, _LIMITS[name]))


def caps() -> dict[str, int]:
    return {name: cap(name) for name in _CAPS}


# ---- models ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=128)
def seeded_model(cfg: ModelConfig, seed: int) -> LoopedModel:
    """The reference model of a config and weight seed (cached: examples share models)."""
    return LoopedModel(cfg, random_weights(cfg, seed))


@functools.cache
@st.composite
def model_configs(draw, max_layers: int | None = None, vocab=(16, 256)) -> ModelConfig:
    """Small random shapes: 1-3 layers, kv heads dividing heads, even head_dim, vocab 16-256."""
    kv_heads = draw(st.sampled_from([1, 2]))
    heads = kv_heads * draw(st.sampled_from([1, 2]))
    return ModelConfig(
        vocab_size=draw(st.integers(*vocab)),
        hidden_size=draw(st.sampled_from([16, 8, 32])),
        intermediate_size=draw(st.sampled_from([32, 16, 64])),
        num_layers=draw(st.integers(1, max_layers or cap("ORACLE_MAX_LAYERS"))),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=draw(st.sampled_from([8, 2, 4])),
        rope_theta=draw(st.sampled_from([1e6, 1e4, 10.0])),
    )


@functools.cache
def weight_seeds():
    return st.integers(0, 3)


BOOLEANS = st.booleans()
LEAVES = st.sampled_from([False, False, False, True])  # a request leaves after a round, 1 in 4


@functools.cache
def _members(candidates: tuple):
    """A round's members: distinct requests among the candidates, at least one."""
    return st.lists(st.sampled_from(candidates), min_size=1, unique=True)


@functools.cache
@st.composite
def depths(draw, max_D: int | None = None) -> tuple[int, int]:
    """(d, D): target loops D in 2..6, draft loops d in 1..D-1."""
    D = draw(st.integers(2, max_D or cap("ORACLE_MAX_DEPTH")))
    return draw(st.integers(1, D - 1)), D


@functools.cache
@st.composite
def request_depths(draw, max_D: int) -> tuple[int, int]:
    """One request's (d_i, D_i): D_i in 2..max_D, d_i in 1..D_i-1."""
    Di = draw(st.integers(2, max_D))
    return draw(st.integers(1, Di - 1)), Di


def token_counts(max_tokens: int | None = None):
    """A request's T_i = K_i + 1 in 1..9."""
    return _integers(1, max_tokens or cap("ORACLE_MAX_TOKENS"))


@functools.cache
def _integers(lo: int, hi: int):
    """st.integers(lo, hi), made once (a strategy is made once and drawn many times: Hypothesis
    works out a new strategy's properties on its first draw)."""
    return st.integers(lo, hi)


@functools.cache
def _sampled(values: tuple):
    """st.sampled_from(values), made once (as _integers)."""
    return st.sampled_from(values)


@functools.cache
def _unique_ids(vocab: int, min_size: int, max_size: int | None = None, without: int | None = None):
    """Distinct token ids in [0, vocab) (not `without`), made once (as _integers)."""
    ids = st.integers(0, vocab - 1) if without is None else st.integers(0, vocab - 1).filter(lambda t: t != without)
    return st.lists(ids, min_size=min_size, max_size=max_size, unique=True)


def ragged_counts(max_requests: int | None = None):
    """A round's token counts: 1-16 requests of 1-9 tokens each."""
    return st.lists(token_counts(), min_size=1, max_size=max_requests or cap("ORACLE_MAX_REQUESTS"))


def prompts(vocab: int, max_len: int | None = None):
    return _prompts(vocab, max_len or cap("ORACLE_MAX_PROMPT"))


@functools.cache
def _prompts(vocab: int, max_len: int):
    return st.lists(st.integers(0, vocab - 1), min_size=1, max_size=max_len).map(tuple)


@functools.cache
def seeds():
    return st.integers(0, 2**32 - 1)


@functools.cache
def temperatures():
    return st.floats(0.2, 2.0)


@functools.cache
def top_ks(vocab: int):
    """None (off), 1, anything in between, and values >= vocab (a no-op)."""
    return st.none() | st.sampled_from([1, vocab, vocab + 7]) | st.integers(1, vocab)


@functools.cache
def top_ps():
    """None/1.0 (off), a value that keeps only the top token, and anything in (0, 1)."""
    return st.none() | st.sampled_from([1.0, 1e-6]) | st.floats(0.05, 1.0)


@functools.cache
def min_ps():
    """None (off), 0 (off), anything in (0, 0.5], 1 (only the top token and its ties)."""
    return st.none() | st.sampled_from([0.0, 1.0]) | st.floats(0.001, 0.5)


@functools.cache
def _allowed(vocab: int):
    return st.none() | _unique_ids(vocab, 1, vocab)


@functools.cache
@st.composite
def masks(draw, vocab: int) -> dict:
    """banned_token_ids / allowed_token_ids (in a quarter of the cases; one token always stays)."""
    if draw(_integers(0, 3)):
        return {}
    allowed = draw(_allowed(vocab))
    keep = draw(_sampled(tuple(range(vocab)) if allowed is None else tuple(allowed)))  # never banned
    banned = draw(_unique_ids(vocab, 0, 3, keep))
    return {"banned_token_ids": tuple(banned), "allowed_token_ids": None if allowed is None else tuple(allowed)}


# Each filter step of oracle.sampling_params.CHAIN names its function here (Step.strategy):
# (draw, vocab) -> its SamplingParams fields, off in part of the draws.


def min_p_kwargs(draw, vocab: int) -> dict:
    return {"min_p": draw(min_ps())}


def top_k_kwargs(draw, vocab: int) -> dict:
    return {"top_k": draw(top_ks(vocab))}


def top_p_kwargs(draw, vocab: int) -> dict:
    return {"top_p": draw(top_ps())}


def typical_p_kwargs(draw, vocab: int) -> dict:
    """Off in half the draws (None, 1.0); a mass that keeps one token; anything in (0.1, 1)."""
    return {"typical_p": draw(st.sampled_from([None, None, 1.0, 1e-6]) | st.floats(0.1, 1.0))}


@functools.cache
@st.composite
def filter_kwargs(draw, vocab: int) -> dict:
    """The fields of every filter of CHAIN (temperature aside), each drawn by its strategy."""
    out = {}
    for step in CHAIN.named("filter"):
        if step.strategy:
            out |= globals()[step.strategy](draw, vocab)
    return out


@functools.cache
@st.composite
def sampled_params(draw, vocab: int):
    return SamplingParams(
        temperature=draw(temperatures()),
        seed=draw(seeds()),
        **draw(filter_kwargs(vocab)),
        **draw(masks(vocab)),
    )


@st.composite
def stop_params(draw, vocab: int, recent=()):
    """Greedy or sampled params with frequent stops: up to vocab/4 stop token ids and
    sometimes a small max_tokens (use with a small vocabulary); in half the cases the
    processors too, min_tokens among them (it masks the stop tokens while it has not been
    reached)."""
    from dataclasses import replace

    p = draw(base_params(vocab))
    stops = draw(st.lists(st.integers(0, vocab - 1), max_size=max(1, vocab // 4), unique=True))
    p = replace(p, stop_token_ids=tuple(stops), max_tokens=draw(st.none() | st.integers(1, 12)))
    if not processors_in_round_properties():
        return p
    return draw(with_processors(p, vocab, recent)) if draw(st.booleans()) else p


@functools.cache
@st.composite
def greedy_params(draw, vocab: int | None = None):
    return SamplingParams(seed=draw(seeds()), **(draw(masks(vocab)) if vocab else {}))


@functools.cache
def base_params(vocab: int):
    """Greedy or sampled (temperature, optional min-p, top-k, top-p, banned/allowed token
    masks, on greedy requests too), without the sequence-dependent processors."""
    return greedy_params(vocab) | sampled_params(vocab)


@functools.cache
@st.composite
def sampling_params(draw, vocab: int, recent=()):
    """base_params, and in a third of the requests the processors (`with_processors`;
    recent: tokens the request will see, its prompt, for bad words and bias that bite); a
    list of these is a mixed greedy/sampled batch."""
    p = draw(base_params(vocab))
    if not processors_in_round_properties():
        return p
    return draw(with_processors(p, vocab, recent)) if draw(st.integers(0, 2)) == 2 else p


# Backends whose round properties draw processor-free requests: their processors are judged by
# property_tests/test_processor_props.py (every request), tests/test_kernels_cpu.py and the check's
# processor case. torch-cpu-bf16 only: with processors drawn in its round properties, two examples
# sit just past the fixed bfloat16 row (a KV write 0.0602 > 0.06 at depth 1; verification logits
# 0.382 from the cache-free forward), the row whose false-alarm rate on tiny models was measured
# at 14 of 1000 runs (docs/results.md). torch-cpu and jax pass with processors drawn since the
# float32 row grows with depth (2026-12-01).
PROCESSOR_FREE_ROUND_BACKENDS = ("torch-cpu-bf16",)


def processors_in_round_properties() -> bool:
    return os.environ.get("ORACLE_BACKEND", "reference") not in PROCESSOR_FREE_ROUND_BACKENDS


# ---- sequence-dependent logits processors (oracle/processors.py) ----------------------------


def unmasked(p: SamplingParams, vocab: int) -> list[int]:
    """The tokens the banned/allowed mask of p leaves."""
    allowed = range(vocab) if p.allowed_token_ids is None else p.allowed_token_ids
    return sorted(set(allowed) - set(p.banned_token_ids))


# Each processor step of oracle.sampling_params.CHAIN names its function here (Step.strategy):
# (draw, c) -> its SamplingParams fields, drawn so that they bite on a small vocabulary.
# c: pool (token ids, often the recent ones), stops, max_tokens, keep (a token that no mask of
# the step may take: the row never empties).


PENALTIES = {
    "which": st.sampled_from(["repetition", "additive", "both"]),
    "repetition": st.sampled_from([2.0, 0.5, 1.3]) | st.floats(0.5, 2.0),
    "presence": st.sampled_from([2.0, -2.0, 0.5]) | st.floats(-2.0, 2.0),
    "frequency": st.sampled_from([0.0, 2.0, -2.0]) | st.floats(-2.0, 2.0),
}


def penalties_kwargs(draw, c) -> dict:
    """Repetition in [0.5, 2] (2 and 0.5 often), and/or presence and frequency in [-2, 2] (the
    ends often)."""
    which = draw(PENALTIES["which"])
    out = {}
    if which != "additive":
        out["repetition_penalty"] = draw(PENALTIES["repetition"])
    if which != "repetition":
        out["presence_penalty"] = draw(PENALTIES["presence"])
        out["frequency_penalty"] = draw(PENALTIES["frequency"])
    return out


BIASES = st.sampled_from([8.0, -8.0, 100.0, -100.0]) | st.floats(-10.0, 10.0)


def logit_bias_kwargs(draw, c) -> dict:
    """Up to 3 tokens, biases large enough to change decisions (+-8, +-100 or within +-10)."""
    return {
        "logit_bias": tuple(
            draw(st.lists(st.tuples(c["pool"], BIASES), min_size=1, max_size=3, unique_by=lambda tb: tb[0]))
        )
    }


def bad_words_kwargs(draw, c) -> dict:
    """1-3 words of 1-3 tokens, none ending in keep."""
    words = draw(st.lists(st.lists(c["pool"], min_size=1, max_size=3).map(tuple), min_size=1, max_size=3))
    return {"bad_words": tuple(w for w in words if w[-1] != c["keep"])}


def min_tokens_kwargs(draw, c) -> dict:
    """With stop tokens (keep not among them): min_tokens in 0..8, no more than max_tokens."""
    if not c["stops"] or c["keep"] in c["stops"]:
        return {}
    return {"min_tokens": draw(st.integers(0, min(8, c["max_tokens"] or 8)))}


def no_repeat_ngram_kwargs(draw, c) -> dict:
    """n in 2..4 where the mask leaves 16 tokens or more (3 or 4 from 12; none below). The
    n-gram ban grows with the sequence and masks every token after a prefix that recurred once
    per token left (n = 1 masks every token seen): a legal all-masked row, which the runs here
    must not reach."""
    if c["free"] < 12:
        return {}
    return {"no_repeat_ngram": draw(st.sampled_from([2, 3, 4] if c["free"] >= 16 else [3, 4]))}


@functools.cache
def _pool(vocab: int, recent: tuple):
    """Token ids, often the recent ones."""
    return st.sampled_from(recent) | st.integers(0, vocab - 1) if recent else st.integers(0, vocab - 1)


@functools.cache
def _flags(n: int):
    return st.lists(st.booleans(), min_size=n, max_size=n)


@st.composite
def processor_kwargs(
    draw, vocab: int, recent=(), stops=(), max_tokens=None, keep=None, free=None, only: str | None = None
) -> dict:
    """SamplingParams fields of the processor steps of oracle.sampling_params.CHAIN, each on in about
    half the draws (at least one on), drawn by the step's strategy (above). Tokens come from
    `recent` (the tokens the request will see, so repeats and bad-word prefixes occur) or
    anywhere. keep: a token no bad word and no stop token masked by min_tokens may end in;
    free: the tokens the mask leaves (default: the vocabulary); only: the one step drawn (by name)."""
    free = vocab if free is None else free
    pool = _pool(vocab, tuple(sorted({t for t in recent[-6:] if t < vocab})))
    steps = CHAIN.named("processor")
    on = list(draw(_flags(len(steps))))
    if not any(on):
        on[draw(_integers(0, len(steps) - 1))] = True
    if only is not None:
        on = [s.name == only for s in steps]
    c = {"pool": pool, "stops": stops, "max_tokens": max_tokens, "keep": keep, "free": free}
    out = {}
    for step, o in zip(steps, on):
        if o:
            out |= globals()[step.strategy](draw, c)
    return out


@st.composite
def with_processors(draw, p: SamplingParams, vocab: int, recent=(), only: str | None = None):
    """p with processor_kwargs: the row never empties (a token the mask leaves is kept out
    of every bad word and, under min_tokens, out of the stop tokens)."""
    from dataclasses import replace

    free = unmasked(p, vocab)
    keep = draw(st.sampled_from([t for t in free if t not in p.stop_token_ids] or free))
    return replace(p, **draw(processor_kwargs(vocab, recent, p.stop_token_ids, p.max_tokens, keep, len(free), only)))


def policies(supported=POLICIES):
    return st.sampled_from([p for p in POLICIES if p in supported])


# ---- scenarios: a whole multi-round run, identical for every mode and backend -------------


@st.composite
def scenarios(
    draw,
    rounds=(1, None),
    join_leave: bool = True,
    max_requests: int | None = None,
    params=None,
    cfg=None,
    weight_seed=None,
    depth=None,
    policy=None,
    fixed_requests=None,
    ragged_depths=None,
):
    """A run of 1..ORACLE_MAX_ROUNDS rounds over ragged batches (per-round K_i, batch order,
    joins and leaves drawn), on a random small model, mixed greedy/sampled requests; in about
    half the runs each request has its own depths (d_i, D_i) with D_i <= D (ragged_depths:
    True/False forces it).

    join_leave=False: every request is named in every round (no joins after round 0, no
    leaves). fixed_requests: a request id that must be in every round (for alone-vs-batch)."""
    cfg = cfg if cfg is not None else draw(model_configs())
    weight_seed = weight_seed if weight_seed is not None else draw(weight_seeds())
    d, D = depth if depth is not None else draw(depths())
    policy = policy or draw(policies())
    n = draw(_integers(1, max_requests or cap("ORACLE_MAX_REQUESTS")))
    ragged = draw(BOOLEANS) if ragged_depths is None else ragged_depths
    depth_list = tuple(draw(request_depths(D)) for _ in range(n)) if ragged else None
    prompt_list = tuple(draw(prompts(cfg.vocab_size)) for _ in range(n))
    param_list = tuple(
        draw(params if params is not None else sampling_params(cfg.vocab_size, prompt_list[i])) for i in range(n)
    )
    lo, hi = rounds
    n_rounds = draw(_integers(lo, hi or cap("ORACLE_MAX_ROUNDS")))
    ops, live, left = [], [], set()
    for _ in range(n_rounds):
        candidates = [i for i in range(n) if i not in left]
        if not candidates:
            break
        if join_leave:
            members = draw(_members(tuple(candidates)))
            if fixed_requests is not None and fixed_requests not in members:
                members = [fixed_requests] + members
        else:
            members = candidates
        for i in members:
            if i not in live:
                ops.append(("add", i))
                live.append(i)
        ops.append(("step", tuple((i, draw(token_counts())) for i in members)))
        if join_leave:
            for i in list(live):
                if i != fixed_requests and draw(LEAVES):
                    ops.append(("remove", i))
                    live.remove(i)
                    left.add(i)
    return Case.from_ops(cfg, weight_seed, d, D, policy, prompt_list, param_list, ops, depth_list)


def single_rounds(**kw):
    """One ragged round: every request joins and runs once (K_i = 0..8 each)."""
    return scenarios(rounds=(1, 1), join_leave=False, **kw)


# ---- distribution inputs ------------------------------------------------------------------


@st.composite
def logit_pairs(draw, max_vocab: int = 32):
    """(target logits, draft logits, params) for one offset: random small vocabularies, the
    draft sometimes close to the target, sometimes unrelated; in two thirds of the cases
    quantised logits (a few levels `step` apart: many exact ties, also at the top-k, top-p,
    min-p and typical-p thresholds)."""
    import numpy as np

    V = draw(st.integers(2, max_vocab))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    spread = draw(st.sampled_from([1.0, 3.0, 0.1, 8.0]))
    target = (rng.standard_normal(V) * spread).astype(np.float32)
    closeness = draw(st.sampled_from([0.0, 0.1, 1.0, 0.01]))
    draft = (
        (target + closeness * spread * rng.standard_normal(V)).astype(np.float32)
        if closeness
        else (rng.standard_normal(V) * spread).astype(np.float32)
    )
    step = draw(st.sampled_from([None, spread, 2 * spread]))
    if step:
        target = (np.round(target / step) * step).astype(np.float32)
        draft = (np.round(draft / step) * step).astype(np.float32)
    params = draw(sampled_params(V))
    return target, draft, params


# ---- fixed processor requests the kernel tests (tests/test_kernels_cpu.py, gpu_tests) share ----
# the parameters (`check --repetition-penalty 1.3 ... --min-tokens 4`), with stop tokens the
# tiny model emits, so that min_tokens bites and requests stop; greedy and sampled, with and without
# filters, beside requests without any
PROC = dict(
    repetition_penalty=1.3,
    presence_penalty=0.5,
    frequency_penalty=0.2,
    logit_bias={5: 2.0, 9: -1.5},
    bad_words=((3, 4), (7,)),
    min_tokens=4,
    stop_token_ids=(2, 6, 8),
)
PROC_PARAMS = [
    SamplingParams(**PROC),
    SamplingParams(1.0, seed=1, **PROC),
    SamplingParams(0.8, top_k=8, seed=2, **PROC),
    SamplingParams(),
    SamplingParams(1.0, seed=4),
    SamplingParams(
        0.9, seed=5, repetition_penalty=0.6, bad_words=((1, 2, 3), (9, 9)), logit_bias={9: 30.0}, no_repeat_ngram=2
    ),
    SamplingParams(frequency_penalty=-2.0, logit_bias={12: 40.0}, min_tokens=3, stop_token_ids=(12,)),
]
