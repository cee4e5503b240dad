"""The torch sampler (kernels/sampler.py) through the sampler contract (oracle/sampler/contract.py):
`python -m oracle sampler --backend torch` (kernels.sampler_plugin:make_torch_sampler).

One batch runs as the engine's acceptance does (Engine.accept_commit, sequential policy), on
[R, T, V] tensors (T = the batch's largest K + 1; shorter requests padded): the mask and the
filters on every offset's target logits (sampler.mask, sampler.filtered_probs with the rows of
kernels/rows.py), q from the draft probabilities, the draft logits through the same chain, or
one-hot (n-gram); then sampler.accepts, sampler.residual and sampler.categorical, and
sampler.greedy for greedy requests. Uniforms: the request's, or K + 1 hashed from its seed
(oracle.sampler.contract.seeded_uniforms)."""

from __future__ import annotations

import os

import numpy as np
import torch

from oracle.errors import OracleError
from oracle.rng_trace import final_index
from oracle.sampler.contract import seeded_uniforms

from . import sampler
from .rows import FILTER_ROWS, sampling_rows


def _rows(batch, V: int, T: int) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """(ban [R*T, V], filter rows {name: [R*T]}, greedy [R]) from each request's params, every
    offset of a request sharing its row."""
    cache = {}
    for req in batch:
        if req.params not in cache:
            cache[req.params] = sampling_rows(req.params, V)
    rows = [cache[req.params] for req in batch]
    ban = torch.as_tensor(np.stack([r["ban"] for r in rows])).repeat_interleave(T, 0)
    filt = {k: torch.as_tensor(np.array([r[k] for r in rows])).repeat_interleave(T, 0) for k in FILTER_ROWS}
    return ban, filt, torch.as_tensor(np.array([bool(r["greedy"]) for r in rows]))


def _padded(arrays, R: int, T: int, V: int, fill: float = 0.0) -> torch.Tensor:
    """[R, T, V] float32 from per-request arrays [n_i, V], n_i <= T (the rest `fill`)."""
    out = np.full((R, T, V), fill, np.float32)
    for i, a in enumerate(arrays):
        if a is not None and len(a):
            out[i, : len(a)] = a
    return torch.as_tensor(out)


def _uniforms(batch, T: int) -> torch.Tensor:
    """[R, T] float64: each request's uniforms [K + 1] (given; else hashed from its seed), padded."""
    u = seeded_uniforms([req.seed for req in batch], T)
    for i, req in enumerate(batch):
        if req.uniforms is not None:
            u[i, : req.K + 1] = req.uniforms
    return torch.as_tensor(u)


def _dists(uniq, V: int, T: int) -> tuple:
    """(greedy [U], gtok [U, T], p [U, T, V], q [U, T, V], drafts [U, T], K [U]) of distinct requests."""
    U = len(uniq)
    ban, filt, greedy = _rows(uniq, V, T)
    x = sampler.mask(_padded([req.target_logits for req in uniq], U, T, V).view(U * T, V), ban)  # [U*T, V]
    gtok = sampler.greedy(x).view(U, T)
    p = sampler.filtered_probs(x, filt).view(U, T, V)
    dl = _padded([req.draft_logits for req in uniq], U, T, V)
    q = sampler.filtered_probs(sampler.mask(dl.view(U * T, V), ban), filt).view(U, T, V)
    drafts = torch.zeros((U, T), dtype=torch.long)  # [U, T]: draft of offset o (the last column unused)
    for i, req in enumerate(uniq):
        drafts[i, : req.K] = torch.as_tensor(req.draft_tokens, dtype=torch.long)
        if req.draft_probs is not None:
            q[i, : req.K] = torch.as_tensor(req.draft_probs)
        elif req.draft_logits is None:  # n-gram: one-hot at the draft token
            q[i, : req.K] = 0
            q[i, torch.arange(req.K), drafts[i, : req.K]] = 1
    return greedy, gtok, p, q, drafts, torch.tensor([req.K for req in uniq])


def sample_batch(batch) -> list[list[int]]:
    """One batch of one vocabulary size (the module docstring). The distributions are computed
    once per distinct request (copies of a request share their arrays and params)."""
    R, V = len(batch), batch[0].V
    T = max(req.K for req in batch) + 1
    keys: dict = {}
    key = lambda r: (id(r.target_logits), id(r.draft_logits), id(r.draft_probs), r.draft_tokens, r.params)  # noqa: E731
    w = [keys.setdefault(key(r), len(keys)) for r in batch]  # each request's distinct request
    first: dict = {}
    for n, k in enumerate(w):
        first.setdefault(k, n)
    greedy, gtok, p, q, drafts, K = _dists([batch[n] for n in first.values()], V, T)
    w = torch.tensor(w)
    p_x, q_x = (t.gather(2, drafts[:, :, None])[:, :, 0][w] for t in (p, q))  # [R, T]: at the draft
    greedy, K, drafts = greedy[w], K[w], drafts[w]
    u = _uniforms(batch, T)
    o = torch.arange(T)
    ok = torch.where(greedy[:, None], drafts == gtok[w], sampler.accepts(u, p_x, q_x))
    ok = ok | (o[None, :] >= K[:, None])
    a = torch.minimum(ok.long().cumprod(-1).sum(-1), K)  # accepted drafts
    rej = a < K
    p_a, q_a = p[w, a], q[w, a]  # [R, V]
    res, res_ok = sampler.residual(p_a, q_a)
    if bool((~greedy & rej & ~res_ok).any()):
        raise OracleError("residual max(0, p - q) is all zero after a rejection (p == q)")
    at = final_index("sequential", K, a, torch.minimum) - K  # the final uniform's index
    drawn = sampler.categorical(torch.where(rej[:, None], res, p_a), u.gather(1, at[:, None])[:, 0])
    final = torch.where(greedy, gtok[w, a], drawn)
    a, final, drafts = a.tolist(), final.tolist(), drafts.tolist()
    return [drafts[i][: a[i]] + [final[i]] for i in range(R)]


class TorchSampler:
    name = "torch"
    takes_uniforms = True
    max_batch = 8192

    def sample(self, batch) -> list[list[int]]:
        by_vocab: dict = {}
        for n, req in enumerate(batch):
            by_vocab.setdefault(req.V, []).append(n)
        out: list = [None] * len(batch)
        for idx in by_vocab.values():
            for n, toks in zip(idx, sample_batch([batch[n] for n in idx])):
                out[n] = toks
        return out


def make_torch_sampler() -> TorchSampler:
    """One intra-op thread unless OMP_NUM_THREADS says otherwise: a batch's tensors are a few MB,
    and two threads only contended (8 cases on the loaded 2-core machine, 2026-12-05: the
    judge's 15.1 s with two, 4.6 s with one)."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    return TorchSampler()
