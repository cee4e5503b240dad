"""The device side of a round: persistent per-slot buffers and the steps that run on them.

Round state stays on the device between calls and until collection: tokens of every
offset (drafts are drawn into it by the draft head), the branch hidden state of every
(slot, offset), draft probabilities q, target probabilities p, logits. The steps `call`,
`draft` and `verify` read one metadata vector and write only these buffers, so each can
be a CUDA graph. So are the round's two bookkeeping steps: `begin_step` (offset-0 tokens
and uniform windows in) and `accept_step` (acceptance and commit, its results packed into
one [R, F] int64 tensor so the host copies them back in one transfer: RESULT_SCALARS,
unpack_results).
Graph warm-ups run every step on the scratch slot, whose frontier never moves.
"""
from __future__ import annotations

import torch

from oracle.rng_trace import accept_index, draft_index, draws_used, final_index

from . import sampler
from .graphs import GraphRunner
from .kvplanes import KVPlanes
from .model import PackedModel
from .options import KernelOptions
from .round_buffer import RoundPlan, scratch_call_meta, scratch_head_meta, scratch_request_meta

I64 = torch.int64
# accept_step's packed result: one int64 row per request. Scalars first, then the K drafts
# (T-1 columns), then the draft / verification logits flags (T columns each).
RESULT_SCALARS = ("a", "final", "used", "start", "n", "why", "residual_err")


def unpack_results(packed, T: int) -> dict:
    """packed: [R, len(RESULT_SCALARS) + 3T - 1] (torch or numpy) -> named column views."""
    s = len(RESULT_SCALARS)
    assert packed.shape[1] == s + 3 * T - 1, (packed.shape, T)
    out = {k: packed[:, i] for i, k in enumerate(RESULT_SCALARS)}
    out["residual_err"] = out["residual_err"] != 0
    out["drafts"] = packed[:, s:s + T - 1]
    out["dbad"], out["vbad"] = packed[:, s + T - 1:s + 2 * T - 1] != 0, packed[:, s + 2 * T - 1:] != 0
    return out


class Engine:
    def __init__(self, weights, D: int, max_requests: int, max_len: int, Tcap: int, Wcap: int,
                 graphs: GraphRunner, options: KernelOptions | None = None):
        self.weights, self.D, self.Tcap, self.Wcap, self.graphs = weights, D, Tcap, Wcap, graphs
        self.device, self.options = weights.device, options
        self.kv = KVPlanes(weights.cfg, D, max_requests, max_len, self.device, weights.dtype)
        self.model = PackedModel(weights, self.kv, options)
        for name, t in self._buffers(self.kv.n_slots).items():
            setattr(self, name, t)

    def _buffers(self, S: int) -> dict:
        """Per-slot round state; every tensor's leading dimension is slot-major."""
        dev, T, V, H = self.device, self.Tcap, self.weights.cfg.vocab_size, self.weights.cfg.hidden_size
        z = lambda *shape, dtype=torch.float32: torch.zeros(shape, device=dev, dtype=dtype)
        return {
            "tok": z(S, T, dtype=I64),                      # offset o's token
            "hid": z(S * T, H, dtype=self.weights.dtype),   # branch state: latest depth's output
            "q": z(S * T, V), "p": z(S * T, V),             # draft / target probabilities
            "dlog": z(S * T, V), "vlog": z(S * T, V),       # draft / verification logits
            "gtok": z(S * T, dtype=I64),                    # argmax of the verification logits
            "dbad": z(S * T, dtype=torch.bool), "vbad": z(S * T, dtype=torch.bool),
            "start": z(S, dtype=I64), "last": z(S, dtype=I64),        # frontier, offset-0 token
            "cursor": z(S, dtype=I64), "ubase": z(S, dtype=I64),      # RNG stream cursor, window base
            "ubuf": z(S, self.Wcap, dtype=torch.float64),              # uniform windows
            "temp": torch.ones(S, device=dev), "top_k": torch.full((S,), V, device=dev, dtype=I64),
            "top_p": torch.full((S,), float("inf"), device=dev),
            "greedy": torch.ones(S, device=dev, dtype=torch.bool),
            "stop": z(S, V, dtype=torch.bool),                         # stop token ids as a mask
            "ban": z(S, V, dtype=torch.bool),                          # banned or not allowed: -inf
            "min_p": z(S),                                             # 0: off
            "left": torch.full((S,), 2**62, device=dev, dtype=I64),    # max_tokens not yet generated
        }

    def grow(self, max_requests: int, max_len: int) -> None:
        """Larger capacity, state kept (stream-ordered copies, so rounds may be in flight).
        Captured graphs point at the old buffers: they are dropped and re-captured on use."""
        old_S = self.kv.n_slots
        keep = old_S - 1                                                  # real slots; scratch is dropped
        for name, t in self._buffers(max_requests + 1).items():
            t.view(max_requests + 1, -1)[:keep].copy_(getattr(self, name).view(old_S, -1)[:keep])
            setattr(self, name, t)
        self.kv = self.kv.grown(max_requests, max_len)
        self.model = PackedModel(self.weights, self.kv, self.options)
        self.graphs.reset()

    # ---- per-request setup ----
    def set_params(self, slot: int, params, vocab: int) -> None:
        self.greedy[slot] = params.greedy
        self.temp[slot] = 1.0 if params.greedy else params.temperature
        self.top_k[slot] = min(params.top_k or vocab, vocab)
        self.top_p[slot] = params.top_p if params.top_p is not None and params.top_p < 1 else float("inf")
        self.min_p[slot] = params.min_p or 0.0
        self.ban[slot] = params.allowed_token_ids is not None
        if params.allowed_token_ids is not None:
            self.ban[slot, list(params.allowed_token_ids)] = False
        if params.banned_token_ids:
            self.ban[slot, list(params.banned_token_ids)] = True
        self.stop[slot] = False
        if params.stop_token_ids:
            self.stop[slot, list(params.stop_token_ids)] = True
        self.left[slot] = 2**62 if params.max_tokens is None else params.max_tokens

    def prefill(self, slot: int, prompt: torch.Tensor, D: int | None = None) -> None:
        """prompt: [n] token ids; KV of positions 0..n-2 at depths 0..D-1 (the request's D_i,
        default every plane), offset 0 = prompt[-1]."""
        P = prompt.shape[0] - 1
        if P:
            pos = torch.arange(P, device=self.device)
            h = self.model.embed(prompt[:P])
            for depth in range(self.D if D is None else D):
                plane = self.kv.plane(slot, depth)
                h = self.model.recurrent_call(h, pos, torch.full((P,), plane, device=self.device, dtype=I64),
                                              pos, torch.tensor([plane], device=self.device), P)
        self.start[slot], self.last[slot] = P, prompt[P]
        self.cursor[slot], self.ubase[slot] = 0, 0

    # ---- graph-capturable steps ----
    def call_step(self, meta: torch.Tensor, M: int, G: int, Qm: int, span: int | None = None) -> None:
        """span: every row's position < span (PackedModel.recurrent_call); None: the capacity."""
        flat, slot, off, plane, qidx = meta[:5 * M].view(5, M)
        gplane = meta[5 * M:]
        pos = self.start.index_select(0, slot) + off                             # [M]
        emb = self.model.embed(self.tok.view(-1).index_select(0, flat))          # depth-0 rows
        h = torch.where((plane < self.kv.n_slots)[:, None], emb, self.hid.index_select(0, flat))
        self.hid.index_copy_(0, flat, self.model.recurrent_call(h, pos, plane, qidx, gplane, Qm, span))

    def _probs(self, logits, slot, sampling: str):
        if sampling == "plain":
            return sampler.plain_probs(logits, self.temp.index_select(0, slot))
        return sampler.filtered_probs(logits, self.temp.index_select(0, slot), self.top_k.index_select(0, slot),
                                      self.top_p.index_select(0, slot), self.min_p.index_select(0, slot))

    def _uniform(self, slot, index):
        # uniform at stream index cursor + index of each slot, from its window
        idx = (self.cursor.index_select(0, slot) - self.ubase.index_select(0, slot) + index).clamp(0, self.Wcap - 1)
        return self.ubuf.view(-1).index_select(0, slot * self.Wcap + idx)

    def draft_step(self, meta: torch.Tensor, Mh: int, sampling: str) -> None:
        """sampling: round_buffer.SAMPLING; "greedy" leaves q unwritten (no request of the round reads it)."""
        flat, slot, off = meta.view(3, Mh)
        raw = self.model.head(self.hid.index_select(0, flat))                   # [Mh, V]
        self.dlog.index_copy_(0, flat, raw)                                      # traced unmasked
        logits = sampler.mask(raw, self.ban.index_select(0, slot))              # banned: -inf
        self.dbad.index_copy_(0, flat, sampler.nonfinite(raw, logits))
        if sampling == "greedy":
            self.tok.view(-1).index_copy_(0, flat + 1, sampler.greedy(logits))
            return
        q = self._probs(logits, slot, sampling)
        drawn = sampler.categorical(q, self._uniform(slot, draft_index(off)))   # draft uniform of offset o
        tok = torch.where(self.greedy.index_select(0, slot), sampler.greedy(logits), drawn)
        self.q.index_copy_(0, flat, q)
        self.tok.view(-1).index_copy_(0, flat + 1, tok)                          # offset o+1's token

    def verify_step(self, meta: torch.Tensor, N: int, sampling: str) -> None:
        flat, slot = meta.view(2, N)
        raw = self.model.head(self.hid.index_select(0, flat))                   # [N, V]
        self.vlog.index_copy_(0, flat, raw)                                      # traced unmasked
        logits = sampler.mask(raw, self.ban.index_select(0, slot))
        self.vbad.index_copy_(0, flat, sampler.nonfinite(raw, logits))
        self.gtok.index_copy_(0, flat, sampler.greedy(logits))
        if sampling != "greedy":                                                 # p: sampled rows only
            self.p.index_copy_(0, flat, self._probs(logits, slot, sampling))

    # ---- a whole round ----
    def run_round(self, plan: RoundPlan, buf: torch.Tensor, policy: str, span: int | None = None) -> torch.Tensor:
        """Enqueue every step of the round; returns the packed results (unpack_results), on the device.
        span: every position the round writes or reads is < span (part of the call graphs' key)."""
        sc, T = self.kv.scratch, self.Tcap
        a0, n, R = plan.requests
        u0, un, _, W = plan.uniforms
        assert u0 == a0 + n, "the uniform windows follow the request fields in the round buffer"
        self.graphs.run("begin", (R, W), R, buf[a0:u0 + un], lambda m: self.begin_step(m, R, W),
                        lambda: torch.from_numpy(scratch_request_meta(R, W, sc)))
        for cp in plan.calls:
            M, G, Qm = cp.key
            self.graphs.run("call", cp.key + (span,), M, buf[cp.meta[0]:cp.meta[0] + cp.meta[1]],
                            lambda m, M=M, G=G, Qm=Qm: self.call_step(m, M, G, Qm, span),
                            lambda key=cp.key: torch.from_numpy(scratch_call_meta(key, sc, T)))
            if cp.head is not None:
                s, ln, Mh = cp.head
                self.graphs.run("draft", (Mh, plan.sampling), Mh, buf[s:s + ln],
                                lambda m, Mh=Mh: self.draft_step(m, Mh, plan.sampling),
                                lambda Mh=Mh: torch.from_numpy(scratch_head_meta(Mh, 3, sc, T)))
        s, ln, N = plan.verify
        self.graphs.run("verify", (N, plan.sampling), N, buf[s:s + ln], lambda m: self.verify_step(m, N, plan.sampling),
                        lambda: torch.from_numpy(scratch_head_meta(N, 2, sc, T)))
        return self.graphs.run("accept", (R, policy), R, buf[a0:a0 + n], lambda m: self.accept_step(m, R, policy),
                               lambda: torch.from_numpy(scratch_request_meta(R, 0, sc)))

    def begin_step(self, meta: torch.Tensor, R: int, W: int) -> None:
        """meta: [slot(R) K(R) ubase(R)] then the [R, W] uniform windows (FP64 bits)."""
        slots, _, ubase = meta[:3 * R].view(3, R)
        win = meta[3 * R:].view(torch.float64).view(R, W)
        self.tok.view(-1).index_copy_(0, slots * self.Tcap, self.last.index_select(0, slots))
        self.ubuf.index_copy_(0, slots, torch.nn.functional.pad(win, (0, self.Wcap - W), value=float("nan")))
        self.ubase.index_copy_(0, slots, ubase)

    def accept_step(self, meta: torch.Tensor, R: int, policy: str) -> torch.Tensor:
        """meta: [slot(R) K(R) ubase(R)] -> the packed results [R, F] (RESULT_SCALARS, drafts, flags)."""
        slots, K, _ = meta.view(3, R)
        out = self.accept_commit(slots, K, policy)
        return torch.cat([torch.stack([out[k].long() for k in RESULT_SCALARS], 1), out["drafts"],
                          out["dbad"].long(), out["vbad"].long()], 1)

    def accept_commit(self, slots: torch.Tensor, K: torch.Tensor, policy: str) -> dict:
        """Acceptance for every request of the round, then the cut (after the first stop token,
        or at max_tokens) and the commit on the device: frontier start + n for n kept tokens,
        next offset-0 token, RNG cursor. slots, K: [R]. Stream indices: oracle.rng_trace."""
        T, V = self.Tcap, self.p.shape[1]
        o = torch.arange(T - 1, device=slots.device)
        greedy = self.greedy.index_select(0, slots)                              # [R]
        base = slots * T
        rows = base[:, None] + o[None, :]                                        # [R, T-1] flat of offset o
        drafts = self.tok.index_select(0, slots)[:, 1:]                          # draft of offset o+1
        pick = lambda t: t.view(-1).index_select(0, (rows * V + drafts).reshape(-1)).view(rows.shape)
        u_acc = self._uniform_grid(slots, accept_index(K[:, None], o[None, :]))
        ok = torch.where(greedy[:, None], drafts == self.gtok[rows],
                         sampler.accepts(u_acc, pick(self.p), pick(self.q)))
        ok = ok | (o[None, :] >= K[:, None])
        a = torch.minimum(ok.long().cumprod(-1).sum(-1), K)                      # accepted drafts
        rej = a < K
        fa = base + a                                                             # flat of offset a
        p_a = self.p.index_select(0, fa)
        res, res_ok = sampler.residual(p_a, self.q.index_select(0, fa))
        final_at = final_index(policy, K, a, torch.minimum)                      # stream index of the last uniform
        drawn = sampler.categorical(torch.where(rej[:, None], res, p_a), self._uniform_grid(slots, final_at[:, None])[:, 0])
        final = torch.where(greedy, self.gtok.index_select(0, fa), drawn)
        used = torch.where(greedy, 0, draws_used(policy, K, a, torch.minimum))
        start = self.start.index_select(0, slots)
        # emitted e[o] = draft o for o < a, the final token at o = a; cut after the first stop
        # token s (kept) or when max_tokens is reached: n = min(s + 1, a + 1, left)
        t = torch.arange(T, device=slots.device)
        e = torch.where(t[None, :] < a[:, None], torch.cat([drafts, final[:, None]], 1), final[:, None])   # [R, T]
        hit = self.stop.view(-1).index_select(0, (slots[:, None] * V + e).reshape(-1)).view(e.shape) & (t[None, :] <= a[:, None])
        s = torch.where(hit.any(-1), hit.long().argmax(-1), T)                        # T: no stop token
        left = self.left.index_select(0, slots)
        n = torch.minimum(torch.minimum(s + 1, a + 1), left)
        why = torch.where((s < T) & (s < left), 1, torch.where(n == left, 2, 0))      # 1 stop, 2 length
        out = {"a": a, "final": final, "drafts": drafts, "used": used, "start": start, "n": n, "why": why,
               "residual_err": ~greedy & rej & ~res_ok,
               "dbad": self.dbad.view(-1, T).index_select(0, slots), "vbad": self.vbad.view(-1, T).index_select(0, slots)}
        # the commit; the scratch slot (graph warm-ups) keeps its frontier, budget and cursor
        real = slots != self.kv.scratch
        n, used = n * real, used * real
        self.start.index_copy_(0, slots, start + n)
        # n = 0 only in a round submitted after one that finished the request (the host fails it)
        self.last.index_copy_(0, slots, e.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0])
        self.left.index_copy_(0, slots, left - n)
        self.cursor.index_copy_(0, slots, self.cursor.index_select(0, slots) + used)
        return out

    def _uniform_grid(self, slots, index):
        # index: [R, n] stream offsets from each slot's cursor -> uniforms [R, n]
        idx = (self.cursor.index_select(0, slots) - self.ubase.index_select(0, slots))[:, None] + index
        return self.ubuf.index_select(0, slots).gather(1, idx.clamp(0, self.Wcap - 1))

    def trace_arrays(self, slots: torch.Tensor, start: torch.Tensor, T: int) -> dict:
        """Logits of offsets 0..T-1 and the round's KV writes (positions start..start+T-1)."""
        V = self.p.shape[1]
        return {"dlog": self.dlog.view(-1, self.Tcap, V).index_select(0, slots)[:, :T],
                "vlog": self.vlog.view(-1, self.Tcap, V).index_select(0, slots)[:, :T],
                "k": self.kv.gather(self.kv.k, slots, start, T), "v": self.kv.gather(self.kv.v, slots, start, T)}
