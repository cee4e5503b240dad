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

Processors (oracle/processors.py; kernels/sampler.py `processed`): allocated on the first
request that has one (`_proc_buffers`): per slot its prompt tokens as a [V] mask, its output
token counts [V], its logit-bias row [V], the penalty scalars, min_tokens, its generated count,
its bad words (rows.py) and its last rows.TAIL output tokens. A row (slot, o) of a round sees
those plus the round's drafts 1..o (oracle.phases.seen): the counts get the drafts' histogram
(a masked scatter_add over the slot's [T-1] drafts), the generated count gets o, and the
bad-word match reads the committed tail followed by the drafts. A round with no_repeat_ngram
also keeps each slot's history (prompt and output, up to rows.HISTORY tokens) and reads it
followed by the drafts 1..o. accept_commit adds the n kept tokens to the counts, the generated
count, the tail and (with no_repeat_ngram) the history. A round's `steps` (the processor
steps on for any of its requests; RoundPlan.processors) are part of the head and accept
steps' graph keys; with none the steps are the ones without processors.
"""

from __future__ import annotations

import torch

from oracle.rng_trace import accept_index, draft_index, draws_used, final_index
from oracle.sampling import SamplingParams

from . import sampler
from .graphs import GraphRunner
from .kvplanes import KVPlanes
from .model import PackedModel
from .options import PENALTY_ROWS, KernelOptions, chain_fault
from .rows import FILTER_ROWS, HISTORY, PROC_ROWS, SLOT_ROWS, STEP_ROWS, TAIL, sampling_rows
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
    out["drafts"] = packed[:, s : s + T - 1]
    out["dbad"], out["vbad"] = packed[:, s + T - 1 : s + 2 * T - 1] != 0, packed[:, s + 2 * T - 1 :] != 0
    return out


class Engine:
    def __init__(
        self,
        weights,
        D: int,
        max_requests: int,
        max_len: int,
        Tcap: int,
        Wcap: int,
        graphs: GraphRunner,
        options: KernelOptions | None = None,
    ):
        self.weights, self.D, self.Tcap, self.Wcap, self.graphs = weights, D, Tcap, Wcap, graphs
        self.device, self.options = weights.device, options
        self.kv = KVPlanes(weights.cfg, D, max_requests, max_len, self.device, weights.dtype)
        self.model = PackedModel(weights, self.kv, options)
        self.procs = False  # processor buffers allocated (_proc_buffers)
        self.tap = None  # the armed row of a capture (kernels/tap.py; TorchSession.capture)
        self.skip = chain_fault(options.fault) if options is not None else None  # a deliberate fault, or None
        for name, t in self._buffers(self.kv.n_slots).items():
            setattr(self, name, t)

    @torch.inference_mode(False)  # session state: never an inference tensor (kernels/session.py)
    def _buffers(self, S: int) -> dict:
        """Per-slot round state; every tensor's leading dimension is slot-major."""
        dev, T, V, H = self.device, self.Tcap, self.weights.cfg.vocab_size, self.weights.cfg.hidden_size
        z = lambda *shape, dtype=torch.float32: torch.zeros(shape, device=dev, dtype=dtype)
        return (
            {
                "tok": z(S, T, dtype=I64),  # offset o's token
                "hid": z(S * T, H, dtype=self.weights.dtype),  # branch state: latest depth's output
                "q": z(S * T, V),
                "p": z(S * T, V),  # draft / target probabilities
                "dlog": z(S * T, V),
                "vlog": z(S * T, V),  # draft / verification logits
                "gtok": z(S * T, dtype=I64),  # argmax of the verification logits
                "dbad": z(S * T, dtype=torch.bool),
                "vbad": z(S * T, dtype=torch.bool),
                "start": z(S, dtype=I64),
                "last": z(S, dtype=I64),  # frontier, offset-0 token
                "cursor": z(S, dtype=I64),
                "ubase": z(S, dtype=I64),  # RNG stream cursor, window base
                "ubuf": z(S, self.Wcap, dtype=torch.float64),  # uniform windows
            }
            | self._row_buffers(S, SLOT_ROWS)
            | (self._proc_buffers(S) if self.procs else {})
        )

    def _row_buffers(self, S: int, names) -> dict:
        """[S, ...] buffers of the sampling rows `names` (kernels/rows.py), every slot holding
        the rows of default params: each step off (its identity)."""
        off = sampling_rows(SamplingParams(), self.weights.cfg.vocab_size)
        return {n: torch.as_tensor(off[n]).to(self.device).expand(S, *off[n].shape).clone() for n in names}

    @torch.inference_mode(False)  # session state: never an inference tensor (kernels/session.py)
    def _proc_buffers(self, S: int) -> dict:
        """The processors' per-slot state (module docstring), allocated with the first request
        that has a processor; a slot without processors holds the identity (1, 0, 0, no words)."""
        dev, V = self.device, self.weights.cfg.vocab_size
        z = lambda *shape, dtype=torch.float32: torch.zeros(shape, device=dev, dtype=dtype)
        return {
            "gen": z(S, dtype=I64),  # tokens generated
            "prompt": z(S, V, dtype=torch.bool),
            "counts": z(S, V),  # prompt tokens, output counts
            "tail": z(S, TAIL, dtype=I64),  # last TAIL output tokens
            "hist": z(S, HISTORY, dtype=I64),
            "plen": z(S, dtype=I64),  # prompt and output, prompt length
        } | self._row_buffers(S, PROC_ROWS)

    def grow(self, max_requests: int, max_len: int) -> None:
        """Larger capacity, state kept (stream-ordered copies, so rounds may be in flight).
        Captured graphs point at the old buffers: they are dropped and re-captured on use."""
        old_S = self.kv.n_slots
        keep = old_S - 1  # real slots; scratch is dropped
        for name, t in self._buffers(max_requests + 1).items():
            t.view(max_requests + 1, -1)[:keep].copy_(getattr(self, name).view(old_S, -1)[:keep])
            setattr(self, name, t)
        self.kv = self.kv.grown(max_requests, max_len)
        self.model = PackedModel(self.weights, self.kv, self.options)
        self.model.tap = self.tap
        self.graphs.reset()

    # ---- per-request setup ----
    def set_params(self, slot: int, params, vocab: int) -> None:
        """The slot's sampling rows (kernels/rows.py); raises OracleError for bad words the
        device tables cannot hold."""
        rows = sampling_rows(params, vocab)
        if rows["steps"] and not self.procs:
            self.procs = True
            for name, t in self._proc_buffers(self.kv.n_slots).items():
                setattr(self, name, t)
        names = SLOT_ROWS + (PROC_ROWS if self.procs else ())
        for name in names:
            getattr(self, name)[slot] = torch.as_tensor(rows[name])

    def prefill(self, slot: int, prompt: torch.Tensor, D: int | None = None) -> None:
        """prompt: [n] token ids; KV of positions 0..n-2 at depths 0..D-1 (the request's D_i,
        default every plane), offset 0 = prompt[-1]."""
        P = prompt.shape[0] - 1
        if P:
            pos = torch.arange(P, device=self.device)
            h = self.model.embed(prompt[:P])
            for depth in range(self.D if D is None else D):
                plane = self.kv.plane(slot, depth)
                h = self.model.recurrent_call(
                    h,
                    pos,
                    torch.full((P,), plane, device=self.device, dtype=I64),
                    pos,
                    torch.tensor([plane], device=self.device),
                    P,
                )
        self.start[slot], self.last[slot] = P, prompt[P]
        self.cursor[slot], self.ubase[slot] = 0, 0
        if self.procs:  # the request's seen tokens: its prompt, no output yet
            self.prompt[slot] = False
            self.prompt[slot].index_fill_(0, prompt, True)
            self.counts[slot], self.gen[slot], self.tail[slot] = 0, 0, 0
            m = min(prompt.shape[0], HISTORY)  # no_repeat_ngram refuses longer ones (rows.LIMITS)
            self.hist[slot], self.plen[slot] = 0, prompt.shape[0]
            self.hist[slot, :m] = prompt[:m]

    # ---- graph-capturable steps ----
    def call_step(self, meta: torch.Tensor, M: int, G: int, Qm: int, span: int | None = None) -> None:
        """span: every row's position < span (PackedModel.recurrent_call); None: the capacity."""
        flat, slot, off, plane, qidx = meta[: 5 * M].view(5, M)
        gplane = meta[5 * M :]
        pos = self.start.index_select(0, slot) + off  # [M]
        emb = self.model.embed(self.tok.view(-1).index_select(0, flat))  # depth-0 rows
        h = torch.where((plane < self.kv.n_slots)[:, None], emb, self.hid.index_select(0, flat))
        self.hid.index_copy_(0, flat, self.model.recurrent_call(h, pos, plane, qidx, gplane, Qm, span))
        if self.tap is not None:
            self.tap.follow(flat, plane, pos, self.kv.n_slots)

    def _probs(self, logits, slot, sampling: str):
        if sampling == "plain":
            return sampler.plain_probs(logits, self.temp.index_select(0, slot))
        return sampler.filtered_probs(logits, {k: getattr(self, k).index_select(0, slot) for k in FILTER_ROWS})

    def _uniform(self, slot, index):
        # uniform at stream index cursor + index of each slot, from its window
        idx = (self.cursor.index_select(0, slot) - self.ubase.index_select(0, slot) + index).clamp(0, self.Wcap - 1)
        return self.ubuf.view(-1).index_select(0, slot * self.Wcap + idx)

    def _proc_rows(self, slot, off, steps) -> dict:
        """The processors' inputs of rows (slot, offset o): the slot's state plus the round's
        drafts 1..o (tok[slot, 1..o]; the module docstring)."""
        r, T = {}, self.Tcap
        if "bad_words" in steps or "min_tokens" in steps:
            r["nvalid"] = self.gen.index_select(0, slot) + off  # tokens generated before o
        drafts = self.tok.index_select(0, slot)[:, 1:]  # [N, T-1]; 1..o drawn
        for name in steps:  # the steps' own rows
            for k in STEP_ROWS[name]:
                r[k] = getattr(self, k).index_select(0, slot)
        if "bad_words" in steps:
            L = self.tail.shape[1]
            seq = torch.cat([self.tail.index_select(0, slot), drafts], 1)  # tail ++ drafts
            r["ctx"] = seq.gather(1, off[:, None] + torch.arange(L, device=off.device)[None, :])
        if "no_repeat_ngram" in steps:  # history ++ drafts 1..o
            H, hl = self.hist.shape[1], self.plen.index_select(0, slot) + self.gen.index_select(0, slot)
            j = torch.arange(H + T - 1, device=off.device)[None, :]
            idx = torch.where(j < hl[:, None], j, H + (j - hl[:, None]).clamp(0, T - 2))
            r["seq"] = torch.cat([self.hist.index_select(0, slot), drafts], 1).gather(1, idx)
            r["seqlen"] = hl + off
        if "penalties" in steps:
            before = (torch.arange(T - 1, device=off.device)[None, :] < off[:, None]).float()  # drafts 1..o
            r["counts"] = self.counts.index_select(0, slot).scatter_add_(1, drafts, before)
            r["prompt"] = self.prompt.index_select(0, slot)
        return r

    def _processed(self, raw, slot, off, steps, rows: str = "verify"):
        """(processed logits, bad rows) of raw logits [N, V] at rows (slot, off); rows: "draft" | "verify"."""
        ban = self.ban.index_select(0, slot)
        skip = self.skip[1] if self.skip is not None and self.skip[0] == rows else None
        if skip is not None:  # a deliberate fault (KernelOptions.fault "skip_ROWS.STEP")
            ban = torch.zeros_like(ban) if skip == "mask" else ban
            steps = tuple(n for n in steps if n != skip)
        if not steps:
            logits = sampler.mask(raw, ban)  # banned: -inf
            return logits, sampler.nonfinite(raw, logits)
        r = self._proc_rows(slot, off, steps)
        if skip in PENALTY_ROWS and "penalties" in steps:
            name, identity = PENALTY_ROWS[skip]
            r[name] = torch.full_like(r[name], identity)
        logits = sampler.processed(raw, ban, r, steps)
        return logits, sampler.nonfinite(raw, logits, processed=True)

    def draft_step(self, meta: torch.Tensor, Mh: int, sampling: str, steps: tuple = ()) -> None:
        """sampling: round_buffer.SAMPLING; "greedy" leaves q unwritten (no request of the round reads it).
        steps: the processor steps of the round (RoundPlan.processors)."""
        flat, slot, off = meta.view(3, Mh)
        raw = self.model.head(self.hid.index_select(0, flat))  # [Mh, V]
        if self.tap is not None:
            self.tap.head(flat, raw)
        self.dlog.index_copy_(0, flat, raw)  # traced unmasked
        logits, bad = self._processed(raw, slot, off, steps, "draft")
        self.dbad.index_copy_(0, flat, bad)
        if sampling == "greedy":
            self.tok.view(-1).index_copy_(0, flat + 1, sampler.greedy(logits))
            return
        q = self._probs(logits, slot, sampling)
        drawn = sampler.categorical(q, self._uniform(slot, draft_index(off)))  # draft uniform of offset o
        tok = torch.where(self.greedy.index_select(0, slot), sampler.greedy(logits), drawn)
        self.q.index_copy_(0, flat, q)
        self.tok.view(-1).index_copy_(0, flat + 1, tok)  # offset o+1's token

    def verify_step(self, meta: torch.Tensor, N: int, sampling: str, steps: tuple = ()) -> None:
        flat, slot = meta.view(2, N)
        raw = self.model.head(self.hid.index_select(0, flat))  # [N, V]
        if self.tap is not None:
            self.tap.head(flat, raw)
        self.vlog.index_copy_(0, flat, raw)  # traced unmasked
        logits, bad = self._processed(raw, slot, flat - slot * self.Tcap, steps)  # offset o = flat - slot*T
        self.vbad.index_copy_(0, flat, bad)
        self.gtok.index_copy_(0, flat, sampler.greedy(logits))
        if sampling != "greedy":  # p: sampled rows only
            self.p.index_copy_(0, flat, self._probs(logits, slot, sampling))

    # ---- a whole round ----
    def run_round(self, plan: RoundPlan, buf: torch.Tensor, policy: str, span: int | None = None) -> torch.Tensor:
        """Enqueue every step of the round; returns the packed results (unpack_results), on the device.
        span: every position the round writes or reads is < span (part of the call graphs' key)."""
        sc, T = self.kv.scratch, self.Tcap
        steps = plan.processors
        pk = (steps,) if steps else ()  # graph keys differ only with processors on
        a0, n, R = plan.requests
        u0, un, _, W = plan.uniforms
        assert u0 == a0 + n, "the uniform windows follow the request fields in the round buffer"
        self.graphs.run(
            "begin",
            (R, W),
            R,
            buf[a0 : u0 + un],
            lambda m: self.begin_step(m, R, W),
            lambda: torch.from_numpy(scratch_request_meta(R, W, sc)),
        )
        for cp in plan.calls:
            M, G, Qm = cp.key
            self.graphs.run(
                "call",
                cp.key + (span,),
                M,
                buf[cp.meta[0] : cp.meta[0] + cp.meta[1]],
                lambda m, M=M, G=G, Qm=Qm: self.call_step(m, M, G, Qm, span),
                lambda key=cp.key: torch.from_numpy(scratch_call_meta(key, sc, T)),
            )
            if cp.head is not None:
                s, ln, Mh = cp.head
                self.graphs.run(
                    "draft",
                    (Mh, plan.sampling) + pk,
                    Mh,
                    buf[s : s + ln],
                    lambda m, Mh=Mh: self.draft_step(m, Mh, plan.sampling, steps),
                    lambda Mh=Mh: torch.from_numpy(scratch_head_meta(Mh, 3, sc, T)),
                )
        s, ln, N = plan.verify
        self.graphs.run(
            "verify",
            (N, plan.sampling) + pk,
            N,
            buf[s : s + ln],
            lambda m: self.verify_step(m, N, plan.sampling, steps),
            lambda: torch.from_numpy(scratch_head_meta(N, 2, sc, T)),
        )
        return self.graphs.run(
            "accept",
            (R, policy) + pk,
            R,
            buf[a0 : a0 + n],
            lambda m: self.accept_step(m, R, policy, steps),
            lambda: torch.from_numpy(scratch_request_meta(R, 0, sc)),
        )

    def begin_step(self, meta: torch.Tensor, R: int, W: int) -> None:
        """meta: [slot(R) K(R) ubase(R)] then the [R, W] uniform windows (FP64 bits)."""
        slots, _, ubase = meta[: 3 * R].view(3, R)
        win = meta[3 * R :].view(torch.float64).view(R, W)
        self.tok.view(-1).index_copy_(0, slots * self.Tcap, self.last.index_select(0, slots))
        self.ubuf.index_copy_(0, slots, torch.nn.functional.pad(win, (0, self.Wcap - W), value=float("nan")))
        self.ubase.index_copy_(0, slots, ubase)

    def accept_step(self, meta: torch.Tensor, R: int, policy: str, steps: tuple = ()) -> torch.Tensor:
        """meta: [slot(R) K(R) ubase(R)] -> the packed results [R, F] (RESULT_SCALARS, drafts, flags)."""
        slots, K, _ = meta.view(3, R)
        out = self.accept_commit(slots, K, policy, steps)
        return torch.cat(
            [
                torch.stack([out[k].long() for k in RESULT_SCALARS], 1),
                out["drafts"],
                out["dbad"].long(),
                out["vbad"].long(),
            ],
            1,
        )

    def accept_commit(self, slots: torch.Tensor, K: torch.Tensor, policy: str, steps: tuple = ()) -> dict:
        """Acceptance for every request of the round, then the cut (after the first stop token,
        or at max_tokens) and the commit on the device: frontier start + n for n kept tokens,
        next offset-0 token, RNG cursor; with processor steps also their output counts,
        generated count and tail (and with no_repeat_ngram the history). slots, K: [R].
        Stream indices: oracle.rng_trace."""
        T, V = self.Tcap, self.p.shape[1]
        o = torch.arange(T - 1, device=slots.device)
        greedy = self.greedy.index_select(0, slots)  # [R]
        base = slots * T
        rows = base[:, None] + o[None, :]  # [R, T-1] flat of offset o
        drafts = self.tok.index_select(0, slots)[:, 1:]  # draft of offset o+1
        pick = lambda t: t.view(-1).index_select(0, (rows * V + drafts).reshape(-1)).view(rows.shape)
        u_acc = self._uniform_grid(slots, accept_index(K[:, None], o[None, :]))
        ok = torch.where(greedy[:, None], drafts == self.gtok[rows], sampler.accepts(u_acc, pick(self.p), pick(self.q)))
        ok = ok | (o[None, :] >= K[:, None])
        a = torch.minimum(ok.long().cumprod(-1).sum(-1), K)  # accepted drafts
        rej = a < K
        fa = base + a  # flat of offset a
        p_a = self.p.index_select(0, fa)
        res, res_ok = sampler.residual(p_a, self.q.index_select(0, fa))
        final_at = final_index(policy, K, a, torch.minimum)  # stream index of the last uniform
        drawn = sampler.categorical(
            torch.where(rej[:, None], res, p_a), self._uniform_grid(slots, final_at[:, None])[:, 0]
        )
        final = torch.where(greedy, self.gtok.index_select(0, fa), drawn)
        used = torch.where(greedy, 0, draws_used(policy, K, a, torch.minimum))
        start = self.start.index_select(0, slots)
        # emitted e[o] = draft o for o < a, the final token at o = a; cut after the first stop
        # token s (kept) or when max_tokens is reached: n = min(s + 1, a + 1, left)
        t = torch.arange(T, device=slots.device)
        e = torch.where(t[None, :] < a[:, None], torch.cat([drafts, final[:, None]], 1), final[:, None])  # [R, T]
        hit = self.stop.view(-1).index_select(0, (slots[:, None] * V + e).reshape(-1)).view(e.shape) & (
            t[None, :] <= a[:, None]
        )
        s = torch.where(hit.any(-1), hit.long().argmax(-1), T)  # T: no stop token
        left = self.left.index_select(0, slots)
        n = torch.minimum(torch.minimum(s + 1, a + 1), left)
        why = torch.where((s < T) & (s < left), 1, torch.where(n == left, 2, 0))  # 1 stop, 2 length
        out = {
            "a": a,
            "final": final,
            "drafts": drafts,
            "used": used,
            "start": start,
            "n": n,
            "why": why,
            "residual_err": ~greedy & rej & ~res_ok,
            "dbad": self.dbad.view(-1, T).index_select(0, slots),
            "vbad": self.vbad.view(-1, T).index_select(0, slots),
        }
        # the commit; the scratch slot (graph warm-ups) keeps its frontier, budget and cursor
        real = slots != self.kv.scratch
        n, used = n * real, used * real
        self.start.index_copy_(0, slots, start + n)
        # n = 0 only in a round submitted after one that finished the request (the host fails it)
        self.last.index_copy_(0, slots, e.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0])
        self.left.index_copy_(0, slots, left - n)
        self.cursor.index_copy_(0, slots, self.cursor.index_select(0, slots) + used)
        if steps:  # the kept tokens e[:n] join the output
            kept = (t[None, :] < n[:, None]).float()  # [R, T]
            self.counts.view(-1).index_add_(0, (slots[:, None] * V + e).reshape(-1), kept.reshape(-1))
            gen = self.gen.index_select(0, slots)
            if "no_repeat_ngram" in steps:  # history ++ e[:n]
                H, hl = self.hist.shape[1], self.plen.index_select(0, slots) + gen
                j = torch.arange(H, device=n.device)[None, :]
                idx = torch.where(j < hl[:, None], j, H + (j - hl[:, None]).clamp(0, T - 1))
                seq = torch.cat([self.hist.index_select(0, slots), e], 1).gather(1, idx)
                self.hist.index_copy_(0, slots, torch.where(j < (hl + n)[:, None], seq, 0))
            self.gen.index_copy_(0, slots, gen + n)
            L = self.tail.shape[1]
            seq = torch.cat([self.tail.index_select(0, slots), e], 1)  # tail ++ e
            self.tail.index_copy_(0, slots, seq.gather(1, n[:, None] + torch.arange(L, device=n.device)[None, :]))
        return out

    def _uniform_grid(self, slots, index):
        # index: [R, n] stream offsets from each slot's cursor -> uniforms [R, n]
        idx = (self.cursor.index_select(0, slots) - self.ubase.index_select(0, slots))[:, None] + index
        return self.ubuf.index_select(0, slots).gather(1, idx.clamp(0, self.Wcap - 1))

    def trace_arrays(self, slots: torch.Tensor, start: torch.Tensor, T: int) -> dict:
        """Logits of offsets 0..T-1 and the round's KV writes (positions start..start+T-1)."""
        V = self.p.shape[1]
        return {
            "dlog": self.dlog.view(-1, self.Tcap, V).index_select(0, slots)[:, :T],
            "vlog": self.vlog.view(-1, self.Tcap, V).index_select(0, slots)[:, :T],
            "k": self.kv.gather(self.kv.k, slots, start, T),
            "v": self.kv.gather(self.kv.v, slots, start, T),
        }
