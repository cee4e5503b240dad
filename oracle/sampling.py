"""Sampling: the request parameters, the chain from logits to probabilities, categorical
draws and acceptance (docs/DESIGN.md section 5).

The chain (`CHAIN`, in FP32, on the draft and on the verification logits of every offset):
  processors (greedy and sampled requests alike; `seen`: the tokens these logits see)
  1. mask: banned token ids, and every id outside allowed_token_ids, become -inf (a row
     with every token masked is an error; -inf is a legal logit, NaN and +inf are not);
  2. bad_words, 3. min_tokens, 4. logit_bias, 5. penalties (oracle/processors.py, vLLM's
     definitions and order; min_tokens and logit_bias commute);
  filters (sampled requests; greedy requests take the argmax of the processed logits)
  6. temperature: x / T;
  7. min-p (vLLM's definition): drop tokens with softmax(x) < min_p * max softmax(x);
  8. top-k: keep x >= the k-th largest x;
  9. top-p: sort the probabilities descending; a token whose mass before it (in that order)
     exceeds p is dropped, the top token always stays;
  10. softmax.
Ties: every token tied with the last survivor of top-k or top-p survives too (top-k keeps
x >= the k-th value; top-p keeps p_t >= the probability of the last token kept in sorted
order), as FlashInfer does. Why: tied tokens are indistinguishable to the model, so which of
them survive must not depend on their ids; with this rule the filtered distribution is the
same under any relabelling of the vocabulary, and it is the rule a sort-free threshold
kernel implements. The price: the kept set may be larger than k, or hold more mass than p
needs. min-p commutes with top-k (both compare x with a threshold below the maximum) but
not with top-p; it runs before both, as in vLLM.
A categorical draw consumes one uniform: inverse CDF over token ids in FP64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import processors
from .errors import OracleError
from .processors import EMPTY, Seen

F32 = np.float32


@dataclass(slots=True, frozen=True)
class SamplingParams:
    temperature: float = 0.0          # 0 means greedy
    top_k: int | None = None          # None: off
    top_p: float | None = None        # None or 1.0: off
    seed: int = 0
    stop_token_ids: tuple = ()        # emission stops after the first of these (kept)
    max_tokens: int | None = None     # tokens a request may generate in all (None: no limit)
    banned_token_ids: tuple = ()      # masked to -inf before temperature and the filters
    allowed_token_ids: tuple | None = None   # None: every token; else all others are masked
    min_p: float | None = None        # None or 0: off
    repetition_penalty: float = 1.0   # 1: off; > 0; on prompt and output tokens
    presence_penalty: float = 0.0     # in [-2, 2]; on output tokens
    frequency_penalty: float = 0.0    # in [-2, 2]; on output tokens
    logit_bias: tuple = ()            # ((token id, bias in [-100, 100]), ...), by token id; a dict is taken
    bad_words: tuple = ()             # token-id sequences; the last token of one is masked after the others
    min_tokens: int = 0               # stop tokens masked until this many tokens are generated

    def __post_init__(self):
        t = self.temperature
        if not isinstance(t, (int, float)) or math.isnan(t) or t < 0 or math.isinf(t):
            raise OracleError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise OracleError(f"top_k must be an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None and not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise OracleError(f"top_p must be in (0, 1], got {self.top_p!r}")
        stops = tuple(self.stop_token_ids)
        if any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 for t in stops):
            raise OracleError(f"stop_token_ids must be token ids >= 0, got {list(stops)!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in stops))
        m = self.max_tokens
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise OracleError(f"max_tokens must be an integer >= 1 (or None), got {m!r}")
        for name in ("banned_token_ids", "allowed_token_ids"):
            ids = getattr(self, name)
            if ids is None:
                continue
            ids = tuple(ids)
            if any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 for t in ids):
                raise OracleError(f"{name} must be token ids >= 0, got {list(ids)!r}")
            object.__setattr__(self, name, tuple(int(t) for t in ids))
        if self.allowed_token_ids is not None and not set(self.allowed_token_ids) - set(self.banned_token_ids):
            raise OracleError("allowed_token_ids minus banned_token_ids is empty: every token is masked")
        mp = self.min_p
        if mp is not None and (isinstance(mp, bool) or not isinstance(mp, (int, float)) or not 0 <= mp <= 1):
            raise OracleError(f"min_p must be in [0, 1], got {mp!r}")
        self._check_processors()

    def _check_processors(self):
        num = lambda v: isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
        r = self.repetition_penalty
        if not num(r) or r <= 0:
            raise OracleError(f"repetition_penalty must be a finite number > 0 (1 = off), got {r!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not num(v) or not -2 <= v <= 2:
                raise OracleError(f"{name} must be in [-2, 2] (0 = off), got {v!r}")
        bias = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias
        try:
            bias = [(t, b) for t, b in bias]
        except (TypeError, ValueError):
            raise OracleError(f"logit_bias must map token ids to biases, got {self.logit_bias!r}") from None
        for t, b in bias:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
                raise OracleError(f"logit_bias: {t!r} is not a token id >= 0")
            if not num(b) or not -100 <= b <= 100:
                raise OracleError(f"logit_bias of token {t}: the bias must be a finite number in [-100, 100], got {b!r}")
        if len({t for t, _ in bias}) != len(bias):
            raise OracleError("logit_bias names a token twice")
        words = []
        for w in self.bad_words:
            w = tuple(w) if isinstance(w, (list, tuple)) else None
            if not w or any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 for t in w):
                raise OracleError(f"bad_words must be non-empty sequences of token ids >= 0, got {list(self.bad_words)!r}")
            words.append(tuple(int(t) for t in w))
        m = self.min_tokens
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise OracleError(f"min_tokens must be an integer >= 0, got {m!r}")
        if self.max_tokens is not None and m > self.max_tokens:
            raise OracleError(f"min_tokens {m} exceeds max_tokens {self.max_tokens}")
        object.__setattr__(self, "repetition_penalty", float(r))
        object.__setattr__(self, "presence_penalty", float(self.presence_penalty))
        object.__setattr__(self, "frequency_penalty", float(self.frequency_penalty))
        object.__setattr__(self, "logit_bias", tuple(sorted((int(t), float(b)) for t, b in bias)))
        object.__setattr__(self, "bad_words", tuple(words))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def needs_seen(self) -> bool:
        """Whether the processed logits depend on the tokens before them."""
        return bool(self.repetition_penalty != 1 or self.presence_penalty or self.frequency_penalty or
                    self.bad_words or (self.min_tokens and self.stop_token_ids))

    @property
    def has_processors(self) -> bool:
        """Any of the processors of oracle/processors.py is on."""
        return self.needs_seen or bool(self.logit_bias)

    def to_json(self) -> dict:
        out = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}
        if self.stop_token_ids or self.max_tokens is not None:
            out |= {"stop_token_ids": list(self.stop_token_ids), "max_tokens": self.max_tokens}
        if self.banned_token_ids or self.allowed_token_ids is not None:
            out |= {"banned_token_ids": list(self.banned_token_ids),
                    "allowed_token_ids": None if self.allowed_token_ids is None else list(self.allowed_token_ids)}
        if self.min_p:
            out["min_p"] = self.min_p
        if self.has_processors:
            out |= {"repetition_penalty": self.repetition_penalty, "presence_penalty": self.presence_penalty,
                    "frequency_penalty": self.frequency_penalty, "logit_bias": [list(tb) for tb in self.logit_bias],
                    "bad_words": [list(w) for w in self.bad_words], "min_tokens": self.min_tokens}
        return out

    def check_vocab(self, vocab: int, who="request") -> None:
        """Token ids named by the params must be in the vocabulary."""
        named = {"stop_token_ids": self.stop_token_ids, "banned_token_ids": self.banned_token_ids,
                 "allowed_token_ids": self.allowed_token_ids or (), "logit_bias": [t for t, _ in self.logit_bias],
                 "bad_words": [t for w in self.bad_words for t in w]}
        for name, ids in named.items():
            bad = [t for t in ids if t >= vocab]
            if bad:
                raise OracleError(f"{who}: {name} holds {bad[0]}, outside the vocabulary [0, {vocab})")


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


def temperature(x: np.ndarray, params: SamplingParams) -> np.ndarray:
    return x / F32(params.temperature)


def min_p(x: np.ndarray, params: SamplingParams) -> np.ndarray:
    if not params.min_p:
        return x
    p = softmax(x)
    return np.where(p >= F32(params.min_p) * p.max(), x, F32(-np.inf))          # the top token stays


def top_k(x: np.ndarray, params: SamplingParams) -> np.ndarray:
    if params.top_k is None or params.top_k >= len(x):
        return x
    kth = np.sort(x)[::-1][params.top_k - 1]
    return np.where(x >= kth, x, F32(-np.inf))                                  # ties at the threshold stay


def top_p(x: np.ndarray, params: SamplingParams) -> np.ndarray:
    if params.top_p is None or params.top_p >= 1:
        return x
    p = softmax(x)
    ps = p[np.argsort(-p, kind="stable")]
    before = np.cumsum(ps) - ps                                                 # mass before each sorted token
    cut = ps[np.count_nonzero(before <= F32(params.top_p)) - 1]                 # before[0] == 0: top stays
    return np.where(p >= cut, x, F32(-np.inf))                                  # ties with the last kept stay


@dataclass(frozen=True)
class Chain:
    """The chain's steps by name, in order (the module docstring). Processors take
    (x, params, seen), filters (x, params). `replace(top_k=f)` swaps one step (meta_tests'
    faulty samplers); kernels/sampler.py runs its own steps in the order of these names."""
    processors: tuple = (("mask", mask), ("bad_words", processors.bad_words), ("min_tokens", processors.min_tokens),
                         ("logit_bias", processors.logit_bias), ("penalties", processors.penalties))
    filters: tuple = (("temperature", temperature), ("min_p", min_p), ("top_k", top_k), ("top_p", top_p))

    def replace(self, **steps) -> "Chain":
        names = {n for n, _ in self.processors + self.filters}
        assert set(steps) <= names, f"no step {sorted(set(steps) - names)} in the chain"
        swap = lambda part: tuple((n, steps.get(n, f)) for n, f in part)
        return Chain(swap(self.processors), swap(self.filters))


CHAIN = Chain()


def seen_or_empty(params: SamplingParams, seen: Seen | None) -> Seen:
    if seen is None:
        if params.needs_seen:
            raise OracleError("these sampling parameters depend on the tokens before the logits: pass seen=")
        return EMPTY
    return seen


def processed_logits(logits: np.ndarray, params: SamplingParams, seen: Seen | None = None,
                     chain: Chain = CHAIN) -> np.ndarray:
    """logits [V] -> FP32 logits [V] after the mask and the processors (steps 1-5)."""
    check_logits(logits)
    seen = seen_or_empty(params, seen)
    x = np.array(logits, F32)
    for _, step in chain.processors:
        x = step(x, params, seen)
    check_logits(x, "masked logits")
    return x


def filtered_probs(logits: np.ndarray, params: SamplingParams, seen: Seen | None = None,
                   chain: Chain = CHAIN) -> np.ndarray:
    """logits: [V] -> probabilities [V] in FP32 after the whole chain (the module docstring:
    order and ties)."""
    assert not params.greedy, "greedy requests have no sampling distribution"
    x = processed_logits(logits, params, seen, chain)
    for _, step in chain.filters:
        x = step(x, params)
    return softmax(x)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return (e / e.sum()).astype(F32, copy=False)


def categorical(probs: np.ndarray, u: float) -> int:
    """Inverse CDF in FP64: the first token whose cumulative mass exceeds u * total.
    A token of zero probability is never chosen."""
    if not 0.0 <= u < 1.0:
        raise OracleError(f"uniform {u!r} is outside [0, 1)")
    cdf = np.cumsum(np.asarray(probs, np.float64))
    if not cdf[-1] > 0:
        raise OracleError("categorical draw from a distribution with zero total mass")
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1))


def greedy_token(logits: np.ndarray, params: SamplingParams | None = None, seen: Seen | None = None,
                 chain: Chain = CHAIN) -> int:
    """argmax of the processed logits (of the raw ones without params); ties: lowest id."""
    if params is None:
        check_logits(logits)
        return int(np.argmax(logits))
    return int(np.argmax(processed_logits(logits, params, seen, chain)))       # checks the logits


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
