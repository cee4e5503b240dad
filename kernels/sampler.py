"""Sampling on the device, row-vectorized with per-row parameters (same definitions as
oracle/sampling.py). Every function is free of host syncs, so it can sit in a CUDA graph.

Per-row parameters: temp [N] (1.0 for greedy rows, whose probabilities go unused),
top_k [N] (>= V means off), top_p [N] (+inf means off), min_p [N] (0 means off). Banned and
not-allowed tokens arrive already masked to -inf (mask)."""
from __future__ import annotations

import torch

NEG_INF = float("-inf")


def mask(logits: torch.Tensor, banned: torch.Tensor) -> torch.Tensor:
    """logits [N, V] with banned [N, V] (banned or not allowed) set to -inf."""
    return logits.masked_fill(banned, NEG_INF)


def filtered_probs(logits: torch.Tensor, temp: torch.Tensor, top_k: torch.Tensor,
                   top_p: torch.Tensor, min_p: torch.Tensor | None = None) -> torch.Tensor:
    """logits: [N, V] FP32 (masked) -> probabilities [N, V] FP32: temperature, min-p
    (softmax >= min_p * max), top-k (x >= the k-th value), top-p (p >= the probability of the
    last token whose mass before it is <= p; the top token always stays), softmax. Ties with
    the last survivor of top-k or top-p survive (oracle/sampling.py)."""
    V = logits.shape[-1]
    x = logits / temp[:, None]
    if min_p is not None:
        p = torch.softmax(x, dim=-1)
        x = x.masked_fill(p < min_p[:, None] * p.max(-1, keepdim=True).values, NEG_INF)
    srt = torch.sort(x, dim=-1, descending=True).values
    kth = srt.gather(1, (top_k - 1).clamp(0, V - 1)[:, None])               # [N, 1]
    x = x.masked_fill(x < kth, NEG_INF)
    p = torch.softmax(x, dim=-1)
    ps = torch.sort(p, dim=-1, descending=True).values
    kept = ((ps.cumsum(-1) - ps) <= top_p[:, None]).sum(-1)                   # mass before each token
    cut = ps.gather(1, (kept - 1).clamp(min=0)[:, None])                      # [N, 1]
    return torch.softmax(x.masked_fill(p < cut, NEG_INF), dim=-1)


def plain_probs(logits: torch.Tensor, temp: torch.Tensor) -> torch.Tensor:
    """filtered_probs for rows with neither top-k nor top-p (no sorts): the same softmax of
    the same tensor, so the same bits."""
    return torch.softmax(logits / temp[:, None], dim=-1)


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF in FP64: the first token whose cumulative mass exceeds u * total.
    probs: [N, V]; u: [N] FP64 -> [N] int64."""
    cdf = probs.double().cumsum(-1)                                          # [N, V]
    target = (u * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, target, right=True)[:, 0].clamp(max=probs.shape[-1] - 1)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)                                             # ties: lowest id


def accepts(u: torch.Tensor, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """Sampled acceptance u * q(x) < p(x), in FP64 like the reference's Python floats."""
    return u * q_x.double() < p_x.double()


def residual(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """normalize(max(0, p - q)) row-wise -> (probs [N, V] FP32, ok [N]: total mass > 0)."""
    r = (p - q).clamp(min=0)
    total = r.double().sum(-1)                                               # [N] FP64
    ok = total > 0
    return r / torch.where(ok, total, 1.0).float()[:, None], ok


def nonfinite(logits: torch.Tensor, masked: torch.Tensor | None = None) -> torch.Tensor:
    """[N] bool: a NaN or +inf logit, or (given the masked logits) every token masked."""
    bad = (torch.isnan(logits) | (logits == float("inf"))).any(-1)
    if masked is not None:
        bad = bad | (masked == NEG_INF).all(-1)
    return bad
