"""Sampling on the device, row-vectorized with per-row parameters (same definitions as
oracle/sampling_params.py and oracle/sampling.py). Every function is free of host syncs, so it
can sit in a CUDA graph.

Per-row parameters of the filters (`FILTERS`, one function per filter step of
oracle.sampling_params.CHAIN, on the rows its Step gives: kernels/rows.py). Banned and not-allowed
tokens arrive already masked to -inf (mask).

The processors (`processed`: mask, then the steps of oracle.sampling_params.CHAIN.processors in the
chain's order) take per-row inputs built by their caller (Engine._proc_rows from the device's
per-slot state and the round's drafts; host_sampling from a Seen). A step that is off for a
row is the identity on it (bit for bit), so rows with and without processors share a batch;
a step off for every row of a batch is skipped (`steps`: the names that run). The FP32
operations are oracle/processors.py's, in its order (x / r or x * r, then x - f*count, then
x - p*[count > 0]; the bias as x + b), so on the CPU the bits are the reference's."""

from __future__ import annotations

import torch

from oracle.sampling_params import CHAIN

from .rows import MAX_NGRAM

NEG_INF = float("-inf")


def mask(logits: torch.Tensor, banned: torch.Tensor) -> torch.Tensor:
    """logits [N, V] with banned [N, V] (banned or not allowed) set to -inf."""
    return logits.masked_fill(banned, NEG_INF)


def bad_words(x: torch.Tensor, r: dict) -> torch.Tensor:
    """A word masks its last token when the output ends with its prefix. r: ctx [N, L] (the
    row's last L output tokens, newest last; rows.TAIL), nvalid [N] (output tokens in all),
    bw_pre [N, W, L] (prefixes, right-aligned), bw_plen [N, W], bw_last [N, W] (-1: no word)."""
    N, V = x.shape
    L = r["ctx"].shape[1]
    k = torch.arange(L, device=x.device)
    plen = r["bw_plen"]
    need = k[None, None, :] >= (L - plen)[:, :, None]  # [N, W, L]
    match = ((r["ctx"][:, None, :] == r["bw_pre"]) | ~need).all(-1)
    match = match & (plen <= r["nvalid"][:, None]) & (r["bw_last"] >= 0)  # [N, W]
    idx = torch.where(match, r["bw_last"], V)  # V: a spare column
    hit = torch.zeros((N, V + 1), dtype=torch.bool, device=x.device).scatter_(1, idx, True)
    return x.masked_fill(hit[:, :V], NEG_INF)


def logit_bias(x: torch.Tensor, r: dict) -> torch.Tensor:
    """r: bias [N, V] FP32, -0.0 where a token has none (x + (-0.0) is x, bit for bit; a
    bias of +0.0 turns x = -0.0 into +0.0, as the reference's x[t] + 0.0 does)."""
    return x + r["bias"]


def min_tokens(x: torch.Tensor, r: dict) -> torch.Tensor:
    """Stop tokens masked while fewer than min_tokens are generated. r: stop [N, V] bool,
    nvalid [N] (tokens generated before these logits), min_tokens [N]."""
    return x.masked_fill(r["stop"] & (r["nvalid"] < r["min_tokens"])[:, None], NEG_INF)


def penalties(x: torch.Tensor, r: dict) -> torch.Tensor:
    """vLLM's order: repetition on prompt and output tokens (x > 0: x / rep, else x * rep),
    then x - freq * count, then x - pres * [count > 0]. r: counts [N, V] FP32 (output
    tokens), prompt [N, V] bool, rep, freq, pres [N] FP32 (1, 0, 0: the identity)."""
    counts, rep = r["counts"], r["rep"][:, None]
    seen = counts > 0
    x = torch.where(seen | r["prompt"], torch.where(x > 0, x / rep, x * rep), x)
    x = x - r["freq"][:, None] * counts
    return x - r["pres"][:, None] * seen.float()


def no_repeat_ngram(x: torch.Tensor, r: dict) -> torch.Tensor:
    """Hugging Face's no_repeat_ngram_size n: a token that would complete an n-gram already in
    the sequence is masked. r: seq [N, L] (prompt, output and the drafts before the row; values
    past seqlen are ignored), seqlen [N], no_repeat_ngram [N] (0: off; at most rows.MAX_NGRAM).
    Fixed shapes: every window of MAX_NGRAM tokens is compared with the row's last n-1."""
    N, V = x.shape
    seq, L, n = r["seq"], r["seqlen"], r["no_repeat_ngram"]
    M, Ls = MAX_NGRAM, seq.shape[1]
    win = torch.nn.functional.pad(seq, (0, M - 1), value=-1).unfold(1, M, 1)  # [N, Ls, M]: seq[j + k]
    k = torch.arange(M - 1, device=x.device)
    last = seq.gather(1, ((L - n + 1)[:, None] + k[None, :]).clamp(0, Ls - 1))  # [N, M-1]: the last n-1
    need = k[None, :] < (n - 1)[:, None]
    match = ((win[:, :, : M - 1] == last[:, None, :]) | ~need[:, None, :]).all(-1)  # [N, Ls]
    j = torch.arange(Ls, device=x.device)
    match = match & (j[None, :] + n[:, None] <= L[:, None]) & (n > 0)[:, None]  # n-gram j.. ends before L
    nxt = win.gather(2, (n - 1).clamp(min=0)[:, None, None].expand(N, Ls, 1))[:, :, 0]  # its last token
    idx = torch.where(match, nxt, V)  # V: a spare column
    hit = torch.zeros((N, V + 1), dtype=torch.bool, device=x.device).scatter_(1, idx, True)
    return x.masked_fill(hit[:, :V], NEG_INF)


# the device step of each processor of oracle.sampling_params.CHAIN, by name
STEPS = {
    "bad_words": bad_words,
    "logit_bias": logit_bias,
    "min_tokens": min_tokens,
    "penalties": penalties,
    "no_repeat_ngram": no_repeat_ngram,
}
ORDER = tuple(n for n, _ in CHAIN.processors)
assert ORDER[0] == "mask" and set(ORDER[1:]) == set(STEPS), f"the device has no step for {ORDER}"


def processed(logits: torch.Tensor, banned: torch.Tensor, r: dict | None = None, steps: tuple = ()) -> torch.Tensor:
    """logits [N, V] FP32 -> the chain's processors applied: the mask (banned [N, V]), then
    each step named in `steps`, in oracle.sampling_params.CHAIN's order. r: the steps' row inputs."""
    x = logits
    for name in ORDER:
        if name == "mask":
            x = mask(x, banned)
        elif name in steps:
            x = STEPS[name](x, r)
    return x


def temperature(x: torch.Tensor, r: dict) -> torch.Tensor:
    """r: temp [N] (1.0 for greedy rows, whose probabilities go unused)."""
    return x / r["temp"][:, None]


def min_p(x: torch.Tensor, r: dict) -> torch.Tensor:
    """softmax >= min_p * max. r: min_p [N] (0: off; absent: off)."""
    if "min_p" not in r:
        return x
    p = torch.softmax(x, dim=-1)
    return x.masked_fill(p < r["min_p"][:, None] * p.max(-1, keepdim=True).values, NEG_INF)


def top_k(x: torch.Tensor, r: dict) -> torch.Tensor:
    """x >= the k-th value (ties stay). r: top_k [N] (>= V: off)."""
    V = x.shape[-1]
    srt = torch.sort(x, dim=-1, descending=True).values
    kth = srt.gather(1, (r["top_k"] - 1).clamp(0, V - 1)[:, None])  # [N, 1]
    return x.masked_fill(x < kth, NEG_INF)


def top_p(x: torch.Tensor, r: dict) -> torch.Tensor:
    """p >= the probability of the last token whose mass before it is <= top_p (the top token
    always stays; ties with the last kept stay). r: top_p [N] (+inf: off)."""
    p = torch.softmax(x, dim=-1)
    ps = torch.sort(p, dim=-1, descending=True).values
    kept = ((ps.cumsum(-1) - ps) <= r["top_p"][:, None]).sum(-1)  # mass before each token
    cut = ps.gather(1, (kept - 1).clamp(min=0)[:, None])  # [N, 1]
    return x.masked_fill(p < cut, NEG_INF)


def typical_p(x: torch.Tensor, r: dict) -> torch.Tensor:
    """Hugging Face's typical-p: sorted by |-log p - H| ascending, the tokens up to the first
    whose cumulative mass reaches typical_p, and every token whose score ties the last kept one.
    r: typical_p [N] (+inf: off; absent: off)."""
    if "typical_p" not in r:
        return x
    V = x.shape[-1]
    lp = torch.log_softmax(x, dim=-1)
    p = lp.exp()
    ent = -torch.where(p > 0, p * lp, 0.0).sum(-1, keepdim=True)  # [N, 1]
    s = (-lp - ent).abs()  # [N, V]; inf where masked
    ss, idx = torch.sort(s, dim=-1, stable=True)
    last = (p.gather(1, idx).cumsum(-1) < r["typical_p"][:, None]).sum(-1).clamp(max=V - 1)
    return x.masked_fill(s > ss.gather(1, last[:, None]), NEG_INF)


# the device step of each filter of oracle.sampling_params.CHAIN, by name, on its rows (kernels/rows.py)
FILTERS = {"temperature": temperature, "min_p": min_p, "top_k": top_k, "top_p": top_p, "typical_p": typical_p}
FILTER_ORDER = tuple(n for n, _ in CHAIN.filters)
assert set(FILTER_ORDER) == set(FILTERS), f"the device has no filter for {FILTER_ORDER}"


def filtered_probs(logits: torch.Tensor, r: dict) -> torch.Tensor:
    """logits: [N, V] FP32 (masked) -> probabilities [N, V] FP32: each filter of
    oracle.sampling_params.CHAIN in its order (FILTERS), then softmax. r: the filters' rows
    (kernels/rows.py FILTER_ROWS), each [N]."""
    x = logits
    for name in FILTER_ORDER:
        x = FILTERS[name](x, r)
    return torch.softmax(x, dim=-1)


def plain_probs(logits: torch.Tensor, temp: torch.Tensor) -> torch.Tensor:
    """filtered_probs for rows with neither top-k nor top-p (no sorts): the same softmax of
    the same tensor, so the same bits."""
    return torch.softmax(logits / temp[:, None], dim=-1)


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF in FP64: the first token whose cumulative mass exceeds u * total.
    probs: [N, V]; u: [N] FP64 -> [N] int64."""
    cdf = probs.double().cumsum(-1)  # [N, V]
    target = (u * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, target, right=True)[:, 0].clamp(max=probs.shape[-1] - 1)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)  # ties: lowest id


def accepts(u: torch.Tensor, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """Sampled acceptance u * q(x) < p(x), in FP64 like the reference's Python floats."""
    return u * q_x.double() < p_x.double()


def residual(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """normalize(max(0, p - q)) row-wise -> (probs [N, V] FP32, ok [N]: total mass > 0)."""
    r = (p - q).clamp(min=0)
    total = r.double().sum(-1)  # [N] FP64
    ok = total > 0
    return r / torch.where(ok, total, 1.0).float()[:, None], ok


def nonfinite(logits: torch.Tensor, masked: torch.Tensor | None = None, processed: bool = False) -> torch.Tensor:
    """[N] bool: a NaN or +inf logit, or (given the masked logits) every token masked;
    processed: the masked logits went through processors, which can overflow (x / rep)."""
    bad = (torch.isnan(logits) | (logits == float("inf"))).any(-1)
    if masked is not None:
        bad = bad | (masked == NEG_INF).all(-1)
        if processed:
            bad = bad | (torch.isnan(masked) | (masked == float("inf"))).any(-1)
    return bad
