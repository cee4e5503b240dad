"""Sampling on the device, row-vectorized with per-row parameters (same definitions as
oracle/sampling.py). Every function is free of host syncs, so it can sit in a CUDA graph.

Per-row parameters: temp [N] (1.0 for greedy rows, whose probabilities go unused),
top_k [N] (>= V means off), top_p [N] (+inf means off)."""
from __future__ import annotations

import torch

NEG_INF = float("-inf")


def filtered_probs(logits: torch.Tensor, temp: torch.Tensor, top_k: torch.Tensor,
                   top_p: torch.Tensor) -> torch.Tensor:
    """logits: [N, V] FP32 -> probabilities [N, V] FP32: temperature, top-k (ties at the
    threshold kept), top-p (a token is dropped once the mass before it exceeds p, so the
    top token always stays), softmax."""
    V = logits.shape[-1]
    x = logits / temp[:, None]
    srt = torch.sort(x, dim=-1, descending=True).values
    kth = srt.gather(1, (top_k - 1).clamp(0, V - 1)[:, None])               # [N, 1]
    x = x.masked_fill(x < kth, NEG_INF)
    p = torch.softmax(x, dim=-1)
    ps, order = torch.sort(p, dim=-1, descending=True, stable=True)         # ties: lower id first
    drop_sorted = (ps.cumsum(-1) - ps) > top_p[:, None]                      # mass before each token
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return torch.softmax(x.masked_fill(drop, NEG_INF), dim=-1)


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


def nonfinite(logits: torch.Tensor) -> torch.Tensor:
    return ~torch.isfinite(logits).all(-1)                                   # [N] bool
