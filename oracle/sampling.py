"""Sampling filters, categorical draws and acceptance (docs/DESIGN.md section 5).

The chain, in FP32, on the draft and on the verification logits alike:
  1. mask: banned token ids, and every id outside allowed_token_ids, become -inf (a row
     with every token masked is an error; -inf is a legal logit, NaN and +inf are not);
  2. temperature: x / T (greedy requests take the argmax of the masked logits instead);
  3. min-p (vLLM's definition): drop tokens with softmax(x) < min_p * max softmax(x);
  4. top-k: keep x >= the k-th largest x;
  5. top-p: sort the probabilities descending; a token whose mass before it (in that order)
     exceeds p is dropped, the top token always stays;
  6. softmax.
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
from dataclasses import dataclass

import numpy as np

from .errors import OracleError

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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_json(self) -> dict:
        out = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}
        if self.stop_token_ids or self.max_tokens is not None:
            out |= {"stop_token_ids": list(self.stop_token_ids), "max_tokens": self.max_tokens}
        if self.banned_token_ids or self.allowed_token_ids is not None:
            out |= {"banned_token_ids": list(self.banned_token_ids),
                    "allowed_token_ids": None if self.allowed_token_ids is None else list(self.allowed_token_ids)}
        if self.min_p:
            out["min_p"] = self.min_p
        return out

    def check_vocab(self, vocab: int, who="request") -> None:
        """Token ids named by the params must be in the vocabulary."""
        for name in ("stop_token_ids", "banned_token_ids", "allowed_token_ids"):
            bad = [t for t in getattr(self, name) or () if t >= vocab]
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
    """NaN and +inf are refused; -inf is a masked token; a row of -inf only is an error."""
    logits = np.asarray(logits)
    bad = np.isnan(logits) | (logits == np.inf)
    if bad.any():
        n = int(np.flatnonzero(bad)[0])
        raise OracleError(f"{where}: non-finite value {logits.reshape(-1)[n]} at token {n}")
    if not (logits > -np.inf).any():
        raise OracleError(f"{where}: every token is masked (-inf)")


def check_token(x, vocab: int, what: str = "token") -> int:
    """A token id read from a trace or an engine: an int in [0, vocab), never wrapped
    (vLLM's -1 placeholder would read p[-1], the last vocabulary entry)."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < vocab:
        raise OracleError(f"{what} {x!r} is not a token id in [0, {vocab})")
    return int(x)


def mask_logits(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """logits [V] with banned ids and ids outside allowed_token_ids set to -inf (FP32)."""
    x = np.array(logits, F32)
    if params.allowed_token_ids is not None:
        keep = np.zeros(len(x), bool)
        keep[list(params.allowed_token_ids)] = True
        x[~keep] = -np.inf
    x[list(params.banned_token_ids)] = -np.inf
    check_logits(x, "masked logits")
    return x


def filtered_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """logits: [V] -> probabilities [V] in FP32 after the mask, temperature, min-p, top-k,
    top-p (the module docstring: order and ties)."""
    check_logits(logits)
    assert not params.greedy, "greedy requests have no sampling distribution"
    x = mask_logits(logits, params) / F32(params.temperature)
    if params.min_p:
        p = softmax(x)
        x = np.where(p >= F32(params.min_p) * p.max(), x, F32(-np.inf))    # the top token stays
    if params.top_k is not None and params.top_k < len(x):
        kth = np.sort(x)[::-1][params.top_k - 1]
        x = np.where(x >= kth, x, F32(-np.inf))                  # ties at the threshold stay
    if params.top_p is not None and params.top_p < 1:
        p = softmax(x)
        ps = p[np.argsort(-p, kind="stable")]
        before = np.cumsum(ps) - ps                              # mass before each sorted token
        cut = ps[np.count_nonzero(before <= F32(params.top_p)) - 1]   # before[0] == 0: top stays
        x = np.where(p >= cut, x, F32(-np.inf))                  # ties with the last kept stay
    return softmax(x)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return (e / e.sum()).astype(F32)


def categorical(probs: np.ndarray, u: float) -> int:
    """Inverse CDF in FP64: the first token whose cumulative mass exceeds u * total.
    A token of zero probability is never chosen."""
    if not 0.0 <= u < 1.0:
        raise OracleError(f"uniform {u!r} is outside [0, 1)")
    cdf = np.cumsum(np.asarray(probs, np.float64))
    if not cdf[-1] > 0:
        raise OracleError("categorical draw from a distribution with zero total mass")
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1))


def greedy_token(logits: np.ndarray, params: SamplingParams | None = None) -> int:
    """argmax of the (masked, when params are given) logits; ties: lowest id."""
    check_logits(logits)
    return int(np.argmax(logits if params is None else mask_logits(logits, params)))


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
