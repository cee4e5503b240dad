"""Sampling: the request parameters, the chain from logits to probabilities, categorical
draws and acceptance (docs/DESIGN.md section 5).

The chain (`CHAIN`, a tuple of `Step`s, in FP32, on the draft and on the verification logits
of every offset):
  processors (greedy and sampled requests alike; `seen`: the tokens these logits see)
  1. mask: banned token ids, and every id outside allowed_token_ids, become -inf (a row
     with every token masked is an error; -inf is a legal logit, NaN and +inf are not);
  2. bad_words, 3. min_tokens, 4. logit_bias, 5. penalties (oracle/processors.py, vLLM's
     definitions and order; min_tokens and logit_bias commute), 6. no_repeat_ngram (Hugging
     Face's no_repeat_ngram_size, on the prompt and the output);
  filters (sampled requests; greedy requests take the argmax of the processed logits;
  oracle/filters.py)
  7. temperature: x / T;
  8. min-p (vLLM's definition): drop tokens with softmax(x) < min_p * max softmax(x);
  9. top-k: keep x >= the k-th largest x;
  10. top-p: sort the probabilities descending; a token whose mass before it (in that order)
     exceeds p is dropped, the top token always stays;
  11. typical-p (Hugging Face's): with H the entropy, sort by |-log p - H| ascending and keep
     the tokens up to the first whose cumulative mass reaches typical_p (at least one); last,
     as in Hugging Face, where it sees what min-p, top-k and top-p left (its entropy is theirs);
     it commutes with none of them (both it and top-p cut by cumulative mass);
  12. softmax.
Each step carries all that varies by step (`Step`): its fields, checks, options, strategy,
device rows and margin; everything else reads CHAIN.
Ties: every token tied with the last survivor of top-k, top-p or typical-p survives too
(top-k keeps x >= the k-th value; top-p keeps p_t >= the probability of the last token kept
in sorted order, as FlashInfer does; typical-p keeps every score <= the last kept token's, as
Hugging Face does, and tokens of equal p have equal scores). Why: tied tokens are
indistinguishable to the model, so which of them survive must not depend on their ids; with
this rule the filtered distribution is the same under any relabelling of the vocabulary, and
it is the rule a sort-free threshold kernel implements. The price: the kept set may be larger
than k, or hold more mass than p needs. min-p commutes with top-k (both compare x with a
threshold below the maximum) but not with top-p; it runs before both, as in vLLM.
A categorical draw consumes one uniform: inverse CDF over token ids in FP64.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import filters, processors
from .errors import OracleError
from .filters import softmax
from .processors import EMPTY, Seen

F32 = np.float32


@dataclass(slots=True, frozen=True)
class SamplingParams:
    """A request's parameters. Each field but seed and the stop cut's (stop_token_ids,
    max_tokens) belongs to one step of CHAIN, which checks it, says when it is on, and writes
    it to JSON (`Step`)."""

    temperature: float = 0.0  # 0 means greedy
    top_k: int | None = None  # None: off
    top_p: float | None = None  # None or 1.0: off
    seed: int = 0
    stop_token_ids: tuple = ()  # emission stops after the first of these (kept)
    max_tokens: int | None = None  # tokens a request may generate in all (None: no limit)
    banned_token_ids: tuple = ()  # masked to -inf before temperature and the filters
    allowed_token_ids: tuple | None = None  # None: every token; else all others are masked
    min_p: float | None = None  # None or 0: off
    repetition_penalty: float = 1.0  # 1: off; > 0; on prompt and output tokens
    presence_penalty: float = 0.0  # in [-2, 2]; on output tokens
    frequency_penalty: float = 0.0  # in [-2, 2]; on output tokens
    logit_bias: tuple = ()  # ((token id, bias in [-100, 100]), ...), by token id; a dict is taken
    bad_words: tuple = ()  # token-id sequences; the last token of one is masked after the others
    min_tokens: int = 0  # stop tokens masked until this many tokens are generated
    no_repeat_ngram: int = 0  # Hugging Face's no_repeat_ngram_size: 0 off; n bans repeating an n-gram
    typical_p: float | None = None  # Hugging Face's typical_p: None or 1.0 off; in (0, 1]

    def __post_init__(self):
        stops = tuple(self.stop_token_ids)
        if any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 for t in stops):
            raise OracleError(f"stop_token_ids must be token ids >= 0, got {list(stops)!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in stops))
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise OracleError(f"seed must be an integer >= 0 (as --seed), got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))
        m = self.max_tokens
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise OracleError(f"max_tokens must be an integer >= 1 (or None), got {m!r}")
        for step in CHAIN.steps:  # each step's fields, checked and in normal form
            for name, value in step.check(self).items():
                object.__setattr__(self, name, value)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def needs_seen(self) -> bool:
        """Whether the processed logits depend on the tokens before them."""
        return any(s.seen and s.is_on(self) for s in CHAIN.steps)

    def to_json(self) -> dict:
        """temperature, top_k, top_p and seed always; the stop cut's fields and each step's
        fields when one of them is not its off value. SamplingParams(**json) reads it back."""
        out = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}
        if self.stop_token_ids or self.max_tokens is not None:
            out |= {"stop_token_ids": list(self.stop_token_ids), "max_tokens": self.max_tokens}
        for step in CHAIN.steps:
            if step.given(self):
                out |= {name: _json(getattr(self, name)) for name in step.off}
        return out

    def check_vocab(self, vocab: int, who="request") -> None:
        """Token ids named by the params must be in the vocabulary."""
        try:
            in_vocab("stop_token_ids", self.stop_token_ids, vocab)
            for step in CHAIN.steps:
                step.check(self, vocab)
        except OracleError as e:
            raise OracleError(f"{who}: {e}") from None


def _json(v):
    return [_json(x) for x in v] if isinstance(v, tuple) else v


def in_vocab(name: str, ids, vocab: int) -> None:
    bad = [t for t in ids if t >= vocab]
    if bad:
        raise OracleError(f"{name} holds {bad[0]}, outside the vocabulary [0, {vocab})")


def _is_id(t) -> bool:
    return not isinstance(t, bool) and isinstance(t, (int, np.integer)) and t >= 0


def _num(v) -> bool:
    return isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and math.isfinite(v)


# ---- each step's check: (params, vocab=None) -> {field: normal form}; a bad value is one
# OracleError line naming the field and the value; with vocab, its token ids are checked too ----


def _check_mask(p, vocab=None) -> dict:
    out = {}
    for name in ("banned_token_ids", "allowed_token_ids"):
        ids = getattr(p, name)
        if ids is None:
            continue
        ids = tuple(ids)
        if not all(_is_id(t) for t in ids):
            raise OracleError(f"{name} must be token ids >= 0, got {list(ids)!r}")
        out[name] = tuple(int(t) for t in ids)
        if vocab is not None:
            in_vocab(name, out[name], vocab)
    if p.allowed_token_ids is not None and not set(out["allowed_token_ids"]) - set(out["banned_token_ids"]):
        raise OracleError("allowed_token_ids minus banned_token_ids is empty: every token is masked")
    return out


def _check_bad_words(p, vocab=None) -> dict:
    words = []
    for w in p.bad_words:
        w = tuple(w) if isinstance(w, (list, tuple)) else None
        if not w or not all(_is_id(t) for t in w):
            raise OracleError(f"bad_words must be non-empty sequences of token ids >= 0, got {list(p.bad_words)!r}")
        words.append(tuple(int(t) for t in w))
    if vocab is not None:
        in_vocab("bad_words", [t for w in words for t in w], vocab)
    return {"bad_words": tuple(words)}


def _check_min_tokens(p, vocab=None) -> dict:
    m = p.min_tokens
    if isinstance(m, bool) or not isinstance(m, int) or m < 0:
        raise OracleError(f"min_tokens must be an integer >= 0, got {m!r}")
    if p.max_tokens is not None and m > p.max_tokens:
        raise OracleError(f"min_tokens {m} exceeds max_tokens {p.max_tokens}")
    return {}


def _check_logit_bias(p, vocab=None) -> dict:
    bias = p.logit_bias.items() if isinstance(p.logit_bias, dict) else p.logit_bias
    try:
        bias = [(t, b) for t, b in bias]
    except (TypeError, ValueError):
        raise OracleError(f"logit_bias must map token ids to biases, got {p.logit_bias!r}") from None
    for t, b in bias:
        if not _is_id(t):
            raise OracleError(f"logit_bias: {t!r} is not a token id >= 0")
        if not _num(b) or not -100 <= b <= 100:
            raise OracleError(f"logit_bias of token {t}: the bias must be a finite number in [-100, 100], got {b!r}")
    if len({t for t, _ in bias}) != len(bias):
        raise OracleError("logit_bias names a token twice")
    if vocab is not None:
        in_vocab("logit_bias", [t for t, _ in bias], vocab)
    return {"logit_bias": tuple(sorted((int(t), float(b)) for t, b in bias))}


def _check_penalties(p, vocab=None) -> dict:
    r = p.repetition_penalty
    if not _num(r) or r <= 0:
        raise OracleError(f"repetition_penalty must be a finite number > 0 (1 = off), got {r!r}")
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(p, name)
        if not _num(v) or not -2 <= v <= 2:
            raise OracleError(f"{name} must be in [-2, 2] (0 = off), got {v!r}")
    return {
        "repetition_penalty": float(r),
        "presence_penalty": float(p.presence_penalty),
        "frequency_penalty": float(p.frequency_penalty),
    }


def _check_no_repeat_ngram(p, vocab=None) -> dict:
    n = p.no_repeat_ngram
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise OracleError(f"no_repeat_ngram must be an integer >= 0 (0 = off), got {n!r}")
    return {"no_repeat_ngram": int(n)}


# A sampled request's temperature T: logits divided by it stay finite float32 (max 3.4e38) for logits
# up to 3e8 in size, and a logit of 1e-8 stays nonzero (smallest normal 1.2e-38). Beyond this range the
# scaled logits overflow (T = 1e-38: "zero total mass") or vanish; as --repetition-penalty's range.
TEMPERATURE_RANGE = (1e-30, 1e30)


def _check_temperature(p, vocab=None) -> dict:
    t = p.temperature
    if not isinstance(t, (int, float)) or math.isnan(t) or t < 0 or math.isinf(t):
        raise OracleError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
    lo, hi = TEMPERATURE_RANGE
    if t != 0 and not lo <= t <= hi:
        raise OracleError(
            f"temperature {t:g} is outside [{lo:g}, {hi:g}] (or 0 = greedy): the logits divided by it would "
            "overflow float32 (max 3.4e38) or vanish"
        )
    return {}


def _check_min_p(p, vocab=None) -> dict:
    mp = p.min_p
    if mp is not None and (isinstance(mp, bool) or not isinstance(mp, (int, float)) or not 0 <= mp <= 1):
        raise OracleError(f"min_p must be in [0, 1], got {mp!r}")
    return {}


def _check_top_k(p, vocab=None) -> dict:
    if p.top_k is not None and (isinstance(p.top_k, bool) or not isinstance(p.top_k, int) or p.top_k < 1):
        raise OracleError(f"top_k must be an integer >= 1, got {p.top_k!r}")
    return {}


def _check_top_p(p, vocab=None) -> dict:
    if p.top_p is not None and not (isinstance(p.top_p, (int, float)) and 0 < p.top_p <= 1):
        raise OracleError(f"top_p must be in (0, 1], got {p.top_p!r}")
    return {}


def _check_typical_p(p, vocab=None) -> dict:
    tp = p.typical_p
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, (int, float)) or not 0 < tp <= 1):
        raise OracleError(f"typical_p must be in (0, 1], got {tp!r}")
    return {}


def stop_cut(emitted, params: SamplingParams, generated: int) -> tuple[int, str | None]:
    """How many of a round's emitted tokens are kept, and why the request finishes:
    (kept, "stop" | "length" | None). The decisions (and RNG draws) are made first, as
    without stops; then emission is cut after the first stop token (which is kept) or when
    the request has generated max_tokens tokens. generated: tokens before this round."""
    for n, tok in enumerate(emitted):
        if params.max_tokens is not None and generated + n >= params.max_tokens:
            return n, "length"
        if tok in params.stop_token_ids:
            return n + 1, "stop"
    if params.max_tokens is not None and generated + len(emitted) >= params.max_tokens:
        return len(emitted), "length"
    return len(emitted), None


def check_logits(logits: np.ndarray, where: str = "logits") -> None:
    """NaN and +inf are refused; -inf is a masked token; a row of -inf only is an error.
    The maximum is finite exactly when none of these happened (a NaN propagates through it)."""
    logits = np.asarray(logits)
    if logits.size and np.isfinite(logits.max()):
        return
    bad = np.isnan(logits) | (logits == np.inf)
    if bad.any():
        n = int(np.flatnonzero(bad)[0])
        raise OracleError(f"{where}: non-finite value {logits.reshape(-1)[n]} at token {n}")
    raise OracleError(f"{where}: every token is masked (-inf)")


def check_token(x, vocab: int, what: str = "token") -> int:
    """A token id read from a trace or an engine: an int in [0, vocab), never wrapped
    (vLLM's -1 placeholder would read p[-1], the last vocabulary entry)."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < vocab:
        raise OracleError(f"{what} {x!r} is not a token id in [0, {vocab})")
    return int(x)


def mask(x: np.ndarray, params: SamplingParams, seen: Seen) -> np.ndarray:
    """Banned ids and ids outside allowed_token_ids set to -inf."""
    if params.allowed_token_ids is not None:
        keep = np.zeros(len(x), bool)
        keep[list(params.allowed_token_ids)] = True
        x[~keep] = -np.inf
    x[list(params.banned_token_ids)] = -np.inf
    return x


@dataclass(frozen=True)
class Step:
    """One step of the chain, everything about it that varies by step: its SamplingParams fields
    with their off values (the defaults), when it is on, the check of its values, what it does,
    its command-line options and property-test strategy, and for a filter its device rows and
    its margin. kind: "mask" and "processor" steps take (x, params, seen), "filter" steps
    (x, params); greedy requests stop after the processors. A step that is off is the identity.
    Read from here: SamplingParams' checks and JSON; the CLI's options (oracle/cli/step_options.py)
    and --case-json's refusals; the shrinker's moves (each field to its off value; a filter's
    fields off with temperature 0); the judge's margins; the property suite's drawing; the
    torch backend's rows (kernels/rows.py) and its step of the same name (kernels/sampler.py)."""

    name: str
    kind: str  # "mask" | "processor" | "filter"
    apply: Callable  # FP32 logits [V] -> FP32 logits [V]
    off: dict  # field -> its off value
    check: Callable  # (params, vocab=None) -> {field: normal form}; one-line OracleError
    on: Callable | None = None  # params -> bool; None: a field is not its off value
    seen: bool = False  # it reads the tokens before the logits (Seen)
    options: tuple = ()  # (dest, kind, metavar, help): oracle/cli/step_options.py ARG_TYPES
    strategy: str = ""  # property_tests/strategies.py: the function drawing its values
    rows: Callable | None = None  # (params, V) -> {row: numpy}; None: kernels/rows.py's
    margin: Callable | None = None  # filters: lowers a filters.Margins (oracle/filters.py)
    cuts: Callable | None = None  # filters: (params, vocab) -> bool, it can drop tokens; None: is_on

    def given(self, params) -> bool:
        """A field of the step is not its off value (what to_json writes)."""
        return any(getattr(params, f) != v for f, v in self.off.items())

    def is_on(self, params) -> bool:
        return self.on(params) if self.on is not None else self.given(params)

    def drops(self, params, vocab: int) -> bool:
        """A filter that can drop tokens of this request (the device's sorting sampler)."""
        return self.cuts(params, vocab) if self.cuts is not None else self.is_on(params)


def _mass_filter(name: str, apply: Callable, check: Callable, margin: Callable, help: str) -> Step:
    """A filter step of one mass field `name` in (0, 1], off where None or 1 (top_p, typical_p)."""
    return Step(
        name,
        "filter",
        apply,
        {name: None},
        check,
        on=lambda p: getattr(p, name) is not None and getattr(p, name) < 1,
        options=((name, "probability", name.upper(), help),),
        strategy=f"{name}_kwargs",
        rows=filters.off_at_one(name),
        margin=margin,
    )


def _count_processor(name: str, apply: Callable, check: Callable, help: str, on: Callable | None = None) -> Step:
    """A processor of one count field `name` (option N), off at 0, that reads the tokens (min_tokens,
    no_repeat_ngram)."""
    return Step(
        name,
        "processor",
        apply,
        {name: 0},
        check,
        on=on,
        seen=True,
        options=((name, "count", "N", help),),
        strategy=f"{name}_kwargs",
    )


STEPS = (
    Step("mask", "mask", mask, {"banned_token_ids": (), "allowed_token_ids": None}, _check_mask),
    Step(
        "bad_words",
        "processor",
        processors.bad_words,
        {"bad_words": ()},
        _check_bad_words,
        seen=True,
        options=(
            (
                "bad_words",
                "words",
                "IDS/IDS",
                "token-id words whose last token is masked after the others, e.g. 3,4/7 (default: none)",
            ),
        ),
        strategy="bad_words_kwargs",
    ),
    _count_processor(
        "min_tokens",
        processors.min_tokens,
        _check_min_tokens,
        "stop tokens are masked until this many tokens are generated (default: 0)",
        on=lambda p: bool(p.min_tokens and p.stop_token_ids),
    ),
    Step(
        "logit_bias",
        "processor",
        processors.logit_bias,
        {"logit_bias": ()},
        _check_logit_bias,
        options=(
            (
                "logit_bias",
                "biases",
                "ID:B,...",
                "added to the logits of these token ids, e.g. 5:2.0,9:-1.5 (default: none)",
            ),
        ),
        strategy="logit_bias_kwargs",
    ),
    Step(
        "penalties",
        "processor",
        processors.penalties,
        {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0},
        _check_penalties,
        seen=True,
        options=(
            (
                "repetition_penalty",
                "number",
                "R",
                "vLLM's repetition penalty on prompt and output tokens, > 0 (default: 1, off)",
            ),
            (
                "presence_penalty",
                "number",
                "P",
                "subtracted from the logits of tokens in the output, in [-2, 2] (default: 0)",
            ),
            ("frequency_penalty", "number", "F", "subtracted per occurrence in the output, in [-2, 2] (default: 0)"),
        ),
        strategy="penalties_kwargs",
    ),
    _count_processor(
        "no_repeat_ngram",
        processors.no_repeat_ngram,
        _check_no_repeat_ngram,
        "Hugging Face's no_repeat_ngram_size: a token that would repeat an N-gram of the prompt and "
        "output is masked (default: 0, off)",
    ),
    Step(
        "temperature",
        "filter",
        filters.temperature,
        {"temperature": 0.0},
        _check_temperature,
        rows=filters.temperature_rows,
        cuts=lambda p, vocab: False,
    ),
    Step(
        "min_p",
        "filter",
        filters.min_p,
        {"min_p": None},
        _check_min_p,
        on=lambda p: bool(p.min_p),
        options=(
            (
                "min_p",
                "probability",
                "MIN_P",
                "min-p filter, vLLM's p >= min_p * max p after temperature (default: off)",
            ),
        ),
        strategy="min_p_kwargs",
        rows=lambda p, V: {"min_p": F32(p.min_p or 0.0)},
        margin=filters.min_p_margin,
    ),
    Step(
        "top_k",
        "filter",
        filters.top_k,
        {"top_k": None},
        _check_top_k,
        options=(("top_k", "positive", "TOP_K", "keep the k most likely tokens (default: off)"),),
        strategy="top_k_kwargs",
        rows=lambda p, V: {"top_k": np.int64(min(p.top_k or V, V))},
        margin=filters.top_k_margin,
        cuts=lambda p, vocab: p.top_k is not None and p.top_k < vocab,
    ),
    _mass_filter("top_p", filters.top_p, _check_top_p, filters.top_p_margin, "nucleus mass in (0, 1] (default: off)"),
    _mass_filter(
        "typical_p",
        filters.typical_p,
        _check_typical_p,
        filters.typical_p_margin,
        "Hugging Face's typical-p mass in (0, 1] (default: off)",
    ),
)


@dataclass(frozen=True)
class Chain:
    """The chain's steps in order (the module docstring). `replace(top_k=f)` swaps one step's
    function (meta_tests' faulty samplers); kernels/sampler.py runs its own steps by name."""

    steps: tuple = STEPS

    @property
    def processors(self) -> tuple:
        """(name, function) of the mask and the processors, in order."""
        return tuple((s.name, s.apply) for s in self.steps if s.kind != "filter")

    @property
    def filters(self) -> tuple:
        return tuple((s.name, s.apply) for s in self.steps if s.kind == "filter")

    def named(self, kind: str) -> tuple:
        """The steps of one kind ("mask", "processor", "filter"), in order."""
        return tuple(s for s in self.steps if s.kind == kind)

    def off(self, kind: str = "processor") -> dict:
        """The SamplingParams fields of the steps of one kind at their off values
        (dataclasses.replace(params, **CHAIN.off()): the params without processors)."""
        return {f: v for s in self.named(kind) for f, v in s.off.items()}

    def inert(self, params, vocab: int) -> list:
        """The fields of the filters (with options) that are on but keep every token of a
        `vocab`-token vocabulary (top_k >= vocab): given, they would have no effect."""
        idle = [s for s in self.named("filter") if s.options and s.is_on(params) and not s.drops(params, vocab)]
        return [f for s in idle for f in s.off]

    def replace(self, **steps) -> "Chain":
        names = {s.name for s in self.steps}
        assert set(steps) <= names, f"no step {sorted(set(steps) - names)} in the chain"
        return Chain(tuple(dataclasses.replace(s, apply=steps.get(s.name, s.apply)) for s in self.steps))


CHAIN = Chain()


def seen_or_empty(params: SamplingParams, seen: Seen | None) -> Seen:
    if seen is None:
        if params.needs_seen:
            raise OracleError("these sampling parameters depend on the tokens before the logits: pass seen=")
        return EMPTY
    return seen


def processed_logits(
    logits: np.ndarray, params: SamplingParams, seen: Seen | None = None, chain: Chain = CHAIN
) -> np.ndarray:
    """logits [V] -> FP32 logits [V] after the mask and the processors (steps 1-6)."""
    check_logits(logits)
    seen = seen_or_empty(params, seen)
    x = np.array(logits, F32)
    for _, step in chain.processors:
        x = step(x, params, seen)
    check_logits(x, "masked logits")
    return x


def filtered_probs(
    logits: np.ndarray, params: SamplingParams, seen: Seen | None = None, chain: Chain = CHAIN
) -> np.ndarray:
    """logits: [V] -> probabilities [V] in FP32 after the whole chain (the module docstring:
    order and ties)."""
    assert not params.greedy, "greedy requests have no sampling distribution"
    x = processed_logits(logits, params, seen, chain)
    for _, step in chain.filters:
        x = step(x, params)
    return softmax(x)


def categorical(probs: np.ndarray, u: float) -> int:
    """Inverse CDF in FP64: the first token whose cumulative mass exceeds u * total.
    A token of zero probability is never chosen."""
    if not 0.0 <= u < 1.0:
        raise OracleError(f"uniform {u!r} is outside [0, 1)")
    cdf = np.cumsum(np.asarray(probs, np.float64))
    if not cdf[-1] > 0:
        raise OracleError("categorical draw from a distribution with zero total mass")
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1))


def greedy_token(
    logits: np.ndarray, params: SamplingParams | None = None, seen: Seen | None = None, chain: Chain = CHAIN
) -> int:
    """argmax of the processed logits (of the raw ones without params); ties: lowest id."""
    if params is None:
        check_logits(logits)
        return int(np.argmax(logits))
    return int(np.argmax(processed_logits(logits, params, seen, chain)))  # checks the logits


def accepts(u: float, p_x: float, q_x: float) -> bool:
    """Sampled acceptance of draft x: u * q(x) < p(x)."""
    if not q_x > 0:
        raise OracleError(f"draft token has q(x) = {q_x}: it could not have been drawn from q")
    return float(u) * float(q_x) < float(p_x)


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """normalize(max(0, p - q)) in FP32; an all-zero residual after a rejection is an error."""
    r = np.maximum(np.asarray(p, F32) - np.asarray(q, F32), F32(0))
    total = r.sum(dtype=np.float64)
    if not total > 0:
        raise OracleError("residual max(0, p - q) is all zero after a rejection (p == q)")
    return (r / F32(total)).astype(F32)


def output_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Exact FP64 distribution of the token emitted at one offset by the rejection sampler:
    draft x ~ q, accepted with probability P(u * q(x) < p(x)) = min(1, p(x)/q(x)) for
    u ~ U[0,1), otherwise one token from the residual."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    accept = np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)
    out = q * accept
    reject = 1.0 - out.sum()
    if reject > 1e-15:
        r = np.maximum(p - q, 0.0)
        out = out + reject * r / r.sum()
    return out
