"""Sampling on the chain's output (docs/DESIGN.md section 5): a request's processed logits and
probabilities (`processed_logits`, `filtered_probs`, `greedy_token`), categorical draws,
acceptance, the residual, the exact output distribution, the stop cut, and the checks of logits
and token ids. The parameters and the chain: oracle/sampling_params.py. This module is the
sampling interface a round's phases call (oracle/phases.py `Phases.sampling`).

A categorical draw consumes one uniform: inverse CDF over token ids in FP64.
"""

from __future__ import annotations

import numpy as np

from .errors import OracleError
from .filters import softmax
from .processors import EMPTY, Seen
from .sampling_params import CHAIN, SamplingParams
from .step import Chain

F32 = np.float32


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
    """logits: [V] -> probabilities [V] in FP32 after the whole chain (oracle/sampling_params.py:
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
