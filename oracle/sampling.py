"""Sampling filters, categorical draws and acceptance (shared/DESIGN.md section 5).

Filters run in FP32: temperature, then top-k (ties at the threshold kept), then top-p
(sorted descending, a token is dropped once the mass before it exceeds p; the top token
always stays), then softmax. A categorical draw consumes one uniform: inverse CDF over
token ids in FP64.
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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_json(self) -> dict:
        out = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}
        if self.stop_token_ids or self.max_tokens is not None:
            out |= {"stop_token_ids": list(self.stop_token_ids), "max_tokens": self.max_tokens}
        return out


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
    if not np.all(np.isfinite(logits)):
        bad = int(np.flatnonzero(~np.isfinite(logits))[0])
        raise OracleError(f"{where}: non-finite value {logits.reshape(-1)[bad]} at token {bad}")


def filtered_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """logits: [V] -> probabilities [V] in FP32 after temperature, top-k, top-p."""
    check_logits(logits)
    assert not params.greedy, "greedy requests have no sampling distribution"
    x = np.asarray(logits, F32) / F32(params.temperature)
    if params.top_k is not None and params.top_k < len(x):
        kth = np.sort(x)[::-1][params.top_k - 1]
        x = np.where(x >= kth, x, F32(-np.inf))                  # ties at the threshold stay
    if params.top_p is not None and params.top_p < 1:
        p = softmax(x)
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]                  # mass before each token
        drop = order[before > F32(params.top_p)]                 # before[0] == 0: top token stays
        x = x.copy()
        x[drop] = -np.inf
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


def greedy_token(logits: np.ndarray) -> int:
    check_logits(logits)
    return int(np.argmax(logits))                                 # ties: lowest id


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
