"""Multi-round generation on the reference: requests join (prefill at every depth), run
rounds with per-round token counts, commit and roll back, and leave."""

from __future__ import annotations


from .errors import OracleError
from .kv import KVCache
from .loop_round import loop_round
from .phases import Request
from .reference_round import block_round
from .rng_trace import RequestRng, check_policy
from .sampling_params import SamplingParams

ROUNDS = {"block": block_round, "loop": loop_round}


def get_round(mode: str):
    if mode not in ROUNDS:
        raise OracleError(f"unknown round mode {mode!r} (known: {', '.join(ROUNDS)})")
    return ROUNDS[mode]


class Session:
    def __init__(self, model, d: int, D: int, mode: str, policy: str = "sequential"):
        self.round_fn = get_round(mode)
        self.model, self.d, self.D, self.mode, self.policy = model, d, D, mode, check_policy(policy)
        cfg = model.cfg
        self.kv = KVCache(cfg.num_layers, D, cfg.num_kv_heads, cfg.head_dim)
        self.requests: dict[int, Request] = {}
        self.round_idx = 0
        self.traces = []

    def add(self, rid, prompt, params: SamplingParams, replay=None, depths=None) -> None:
        """Join a request: prefill its prompt t[0..n-2] at every depth 0..D_i-1 (offset 0 of
        its first round is the prompt's last token). depths: (d_i, D_i) with d_i < D_i <= the
        session's D, used by every round of the request; default the session's (d, D)."""
        di, Di, prompt = admit(self.requests, rid, prompt, depths, self.d, self.D)
        self.model.embed(prompt)  # range check of token ids
        params.check_vocab(self.model.cfg.vocab_size, f"request {rid}")
        rng = RequestRng(rid, seed=params.seed) if replay is None else RequestRng(rid, replay=replay)
        req = Request(rid, prompt, params, rng, (di, Di))
        self.kv.set_depths(rid, Di)
        n = len(prompt) - 1
        if n:
            h = self.model.embed(prompt[:n])  # h: [n, H]
            for depth in range(Di):
                h = self.model.recurrent_call([(rid, p, depth) for p in range(n)], h, self.kv, -1 - depth)
        self.requests[rid] = req

    def remove(self, rid) -> list[int]:
        if rid not in self.requests:
            raise OracleError(f"request {rid} is not in the session")
        req = self.requests.pop(rid)
        self.kv.drop(rid)
        return req.tokens

    def step(self, counts: dict):
        """One round over the requests named in `counts` (rid -> T_i = K_i + 1)."""
        missing = [r for r in counts if r not in self.requests]
        if missing:
            raise OracleError(f"round names unknown request(s) {missing}")
        reqs = [self.requests[r] for r in counts]
        # a failed round leaves no trace: KV, tokens and RNG streams are restored
        snap, n_log = snapshot(reqs), len(self.kv.log)
        try:
            trace = self.round_fn(
                self.model,
                self.kv,
                reqs,
                list(counts.values()),
                [r.depths[0] for r in reqs],
                [r.depths[1] for r in reqs],
                self.round_idx,
                self.policy,
            )
        except BaseException:
            restore(reqs, snap)
            for r in reqs:
                self.kv.truncate(r.rid, len(r.tokens) - 1)  # a round only appends past the frontier
            del self.kv.log[n_log:]
            raise
        self.round_idx += 1
        self.traces.append(trace)
        return trace


def snapshot(reqs) -> list:
    """The host state a round changes in each request (stream, tokens, counts), for `restore`."""
    return [(r.rng.snapshot(), len(r.tokens), r.generated, r.finished) for r in reqs]


def restore(reqs, snap) -> None:
    """Undo a failed round's changes to the requests (every session; each restores its own KV)."""
    for r, (rng, n_tok, generated, finished) in zip(reqs, snap):
        r.rng.restore(rng)
        del r.tokens[n_tok:]
        r.generated, r.finished = generated, finished


def admit(requests, rid, prompt, depths, d: int, D: int) -> tuple[int, int, list[int]]:
    """The checks of a joining request, the same in every session (reference, JAX, torch):
    a new id, its (d_i, D_i), a non-empty prompt. Returns (d_i, D_i, prompt as ints)."""
    if rid in requests:
        raise OracleError(f"request {rid} is already in the session")
    di, Di = check_depths(rid, depths, d, D)
    prompt = [int(t) for t in prompt]
    if not prompt:
        raise OracleError(f"request {rid}: empty prompt")
    return di, Di, prompt


def check_depths(rid, depths, d: int, D: int) -> tuple[int, int]:
    """A request's (d_i, D_i): the session's (d, D) when None; D_i may not exceed the
    session's D (the KV cache's depth planes)."""
    if depths is None:
        return d, D
    if not isinstance(depths, (tuple, list)) or len(depths) != 2:
        raise OracleError(f"request {rid}: depths {depths!r} must be a pair (d_i, D_i)")
    di, Di = depths
    for x, name in ((di, "draft loops d_i"), (Di, "target loops D_i")):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise OracleError(f"request {rid}: {name}={x!r} must be an integer >= 1")
    if di >= Di:
        raise OracleError(f"request {rid}: draft loops d_i={di} must be < target loops D_i={Di}")
    if Di > D:
        raise OracleError(f"request {rid}: target loops D_i={Di} exceed the session's D={D} (its KV depth planes)")
    return di, Di


def generate(
    model, prompts, max_tokens: int, mode: str, K: int, d: int, D: int, params=None, policy: str = "sequential"
):
    """Generate max_tokens tokens per prompt; per round K_i = min(K, remaining - 1).
    Returns (new tokens per request, round traces)."""
    if K < 0:
        raise OracleError(f"K={K}: the number of drafts must be >= 0")
    if max_tokens < 1:
        raise OracleError(f"max_tokens={max_tokens} must be >= 1")
    params = params or [SamplingParams()] * len(prompts)
    s = Session(model, d, D, mode, policy)
    for rid, (prompt, p) in enumerate(zip(prompts, params)):
        s.add(rid, prompt, p)
    n0 = {rid: len(r.tokens) for rid, r in s.requests.items()}
    while True:
        left = {rid: max_tokens - (len(r.tokens) - n0[rid]) for rid, r in s.requests.items()}
        counts = {rid: min(K, n - 1) + 1 for rid, n in left.items() if n > 0}
        if not counts:
            break
        s.step(counts)
    return {rid: r.tokens[n0[rid] :] for rid, r in s.requests.items()}, s.traces
