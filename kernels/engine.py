"""The device side of a round: persistent per-slot buffers and the steps that run on them.

Round state stays on the device between calls and until collection: tokens of every
offset (drafts are drawn into it by the draft head), the branch hidden state of every
(slot, offset), draft probabilities q, target probabilities p, logits. The steps `call`,
`draft` and `verify` read one metadata vector and write only these buffers, so each can
be a CUDA graph. So are the round's two bookkeeping steps: `begin_step` (offset-0 tokens
and uniform windows in) and `accept_step` (acceptance and commit, its results packed into
one [R, F] int64 tensor so the host copies them back in one transfer: RESULT_SCALARS,
unpack_results). The steps: kernels/engine_heads.py (call, draft, verify) and
kernels/engine_accept.py (begin, accept).
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

from oracle.sampling_params import SamplingParams

from .engine_accept import AcceptSteps
from .engine_heads import HeadSteps
from .graphs import GraphRunner
from .kvplanes import KVPlanes
from .model import PackedModel
from .options import KernelOptions, chain_fault
from .rows import HISTORY, PROC_ROWS, SLOT_ROWS, TAIL, sampling_rows
from .round_buffer import RoundPlan, scratch_call_meta, scratch_head_meta, scratch_request_meta

I64 = torch.int64


class Engine(HeadSteps, AcceptSteps):
    """One session's device state (the module docstring) and its round: the steps are
    kernels/engine_heads.py's and kernels/engine_accept.py's."""

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

    def trace_arrays(self, slots: torch.Tensor, start: torch.Tensor, T: int) -> dict:
        """Logits of offsets 0..T-1 and the round's KV writes (positions start..start+T-1)."""
        V = self.p.shape[1]
        return {
            "dlog": self.dlog.view(-1, self.Tcap, V).index_select(0, slots)[:, :T],
            "vlog": self.vlog.view(-1, self.Tcap, V).index_select(0, slots)[:, :T],
            "k": self.kv.gather(self.kv.k, slots, start, T),
            "v": self.kv.gather(self.kv.v, slots, start, T),
        }
