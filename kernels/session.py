"""TorchSession: the backend session (oracle/runtime/backends.py interface) over the device engine.

submit(counts) plans the round on the host, uploads its metadata once and enqueues every
device step; results are copied back asynchronously and turned into a trace by
collect(handle). Rounds finish in submission order, so several may be in flight, also for
the same request (the device keeps its frontier, offset-0 token and RNG cursor).
A failed round cleans up: a request whose device state can no longer be trusted is dropped
(its KV slot freed), later rounds that include it fail too, and the first error is raised.
"""

from __future__ import annotations

import functools
import time

import numpy as np
import torch

from oracle.errors import OracleError
from oracle.rng_trace import check_policy, max_draws
from oracle.schedule import plan as plan_schedule, shared, validate
from oracle.session import admit

from .collect import Handle, HostRequest, build_trace, check_results
from .engine import Engine
from .engine_accept import unpack_results
from .graphs import GraphRunner
from .options import KernelOptions
from .rows import check_limits, processor_steps
from .round_buffer import PlanCache, build_plan, plan_indices, processors_variant, sampling_variant
from .streams import UniformStream
from .tap import Tap
from .triton_attention import span_bucket


def _no_autograd(method):
    """A session call under torch.inference_mode on the CPU: no autograd bookkeeping per op (a
    tiny model's round is mostly per-op overhead there; docs/results.md, "Time the verdict
    adds"). The engine's state (KV planes, per-slot buffers) is made outside inference mode even
    within such a call, so code that drives the engine directly may change it in place. CUDA runs
    as before (not yet measured with it)."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        device = self.device if hasattr(self, "device") else args[0].device  # __init__: weights
        with torch.inference_mode(device.type == "cpu"):
            return method(self, *args, **kwargs)

    return call


class TorchSession:
    @_no_autograd
    def __init__(
        self,
        weights,
        d,
        D,
        mode,
        policy="sequential",
        *,
        name="torch",
        dtype_name="float32",
        max_requests=8,
        max_len=256,
        max_tokens_per_round=16,
        grow=True,
        graphs="off",
        max_batch_size=512,
        max_graphs=512,
        trace=True,
        debug_poison=False,
        kernel_options: KernelOptions | None = None,
    ):
        """kernel_options: the device fast paths (kernels/options.py; default KernelOptions()).
        trace=False (benchmarks): a round's trace holds its tokens, acceptance, RNG events and
        stats, not its logits, KV writes, params, prefixes or calls."""
        validate([1], d, D)
        plan_schedule(mode, [1], d, D)  # checks the mode
        self.d, self.D, self.mode, self.policy = d, D, mode, check_policy(policy)
        self.cfg, self.name, self.dtype_name = weights.cfg, name, dtype_name
        self.Tcap, self.trace, self.debug_poison = max_tokens_per_round, trace, debug_poison
        self.grow = grow  # capacity (requests, max_len) doubles on demand; else errors
        per_round = max_draws(max_tokens_per_round - 1)  # uniforms of one round, at most
        self.graphs = GraphRunner(graphs, max_batch_size, max_graphs)
        self.graph_mode = graphs  # restored when a capture is disarmed
        self.records: list = []  # what captures recorded, until captured() (kernels/tap.py)
        self.engine = Engine(
            weights, D, max_requests, max_len, max_tokens_per_round, 2 * per_round, self.graphs, kernel_options
        )
        self.requests: dict = {}
        self.plans = PlanCache()  # rounds that repeat a shape reuse its schedule and indices
        self.pending: list[Handle] = []
        self.round_idx = 0
        self.device = weights.device
        # a round's attention span (keys 0..span-1) from the host's bound on its positions: the
        # frontier it knows, plus the tokens of its rounds in flight, plus this round's
        self.span_bucket = span_bucket

    # ---- requests ----
    @_no_autograd
    def add(self, rid, prompt, params, replay=None, depths=None) -> None:
        """depths: (d_i, D_i) for every round of the request (default the session's)."""
        di, Di, prompt = admit(self.requests, rid, prompt, depths, self.d, self.D)
        depths = (di, Di)
        bad = [t for t in prompt if not 0 <= t < self.cfg.vocab_size]
        if bad:
            raise OracleError(f"token id {bad[0]} is outside the vocabulary [0, {self.cfg.vocab_size})")
        params.check_vocab(self.cfg.vocab_size, f"request {rid}")
        try:
            check_limits(params, len(prompt) + (params.max_tokens or 0))  # the device's fixed-size tables
        except OracleError as e:
            raise OracleError(f"request {rid}: {e}") from None
        self._fit(len(prompt), f"request {rid}: prompt of {len(prompt)} tokens")
        if not self.engine.kv.free and self.grow:
            self.engine.grow(2 * (self.engine.kv.n_slots - 1), self.max_len)
        stream = UniformStream(rid, seed=params.seed) if replay is None else UniformStream(rid, replay=replay)
        slot = self.engine.kv.alloc(rid)
        if self.engine.tap is not None and self.engine.tap.rid == rid:
            self.engine.tap.slot = slot
        try:
            self.engine.set_params(slot, params, self.cfg.vocab_size)
            if self.debug_poison:
                self._poison(
                    torch.tensor([slot], device=self.device), torch.zeros(1, dtype=torch.int64, device=self.device)
                )
            self.engine.prefill(slot, torch.tensor(prompt, dtype=torch.int64, device=self.device), depths[1])
        except BaseException:
            self.engine.kv.release(slot)  # no leaked slot
            raise
        self.requests[rid] = HostRequest(rid, slot, params, prompt, stream, depths, steps=processor_steps(params))

    @_no_autograd
    def remove(self, rid) -> list[int]:
        req = self._get(rid)
        self._drain(req)
        self.requests.pop(rid)
        self.engine.kv.release(req.slot)
        if self.engine.tap is not None and self.engine.tap.rid == rid:
            self.engine.tap.slot = self.engine.tap.flat = None
        return req.tokens

    # ---- the localizer's capture (oracle/runtime/contract.py OPTIONAL_SESSION) ----
    def capture(self, rid, position, depth) -> None:
        """Arm the capture of row (rid, position, depth) in every later call that computes it (prefill
        included, so it may be armed before add) and of a head run on it; (None, None, None) disarms.
        depth: the KV plane's depth 0..D-1. While armed, rounds run without graphs (kernels/tap.py)."""
        self._drain_all()
        tap = None if rid is None else Tap.arm(rid, position, depth, self.D, self.cfg.num_layers, self.records)
        if tap is not None and rid in self.requests:
            tap.slot = self.requests[rid].slot
        self.graphs.mode = self.graph_mode if tap is None else "off"  # a graph's replay runs no Python
        self.engine.tap = self.engine.model.tap = tap

    def captured(self) -> list:
        """What captures recorded (oracle.capture.Captured) in execution order since the last call; cleared."""
        self._drain_all()
        out = list(self.records)
        self.records.clear()
        return out

    def _drain_all(self) -> None:
        while self.pending:
            self._finish(self.pending[0])

    @_no_autograd
    def tokens(self, rid) -> list[int]:
        req = self._get(rid)
        self._drain(req)
        return list(req.tokens)

    @_no_autograd
    def kv_frontiers(self, rid) -> set[int]:
        """The device KV frontier of rid (one per request: every plane shares it)."""
        req = self._get(rid)
        self._drain(req)
        return {int(self.engine.start[req.slot])}

    def _get(self, rid) -> HostRequest:
        if rid not in self.requests:
            raise OracleError(f"request {rid} is not in the session")
        return self.requests[rid]

    # ---- rounds ----
    @_no_autograd
    def step(self, counts: dict):
        return self.collect(self.submit(counts))

    @_no_autograd
    def submit(self, counts: dict) -> Handle:
        t0 = time.perf_counter()
        missing = [r for r in counts if r not in self.requests]
        if missing:
            raise OracleError(f"round names unknown request(s) {missing}")
        T = list(validate(list(counts.values()), self.d, self.D))
        reqs = [self.requests[r] for r in counts]
        if len(set(counts)) != len(reqs):
            raise OracleError("a round names the same request twice")
        for req in reqs:
            if req.finished:
                raise OracleError(
                    f"request {req.rid} finished ({req.finished}) in an earlier round; it cannot run again"
                )
        need = 1  # positions 0..need-1 cover the round
        for req, t in zip(reqs, T):
            if t > self.Tcap:
                raise OracleError(f"request {req.rid}: token count {t} exceeds max_tokens_per_round {self.Tcap}")
            ahead = sum(x.counts[x.reqs.index(req)] for x in req.in_flight)  # positions in flight
            reach = len(req.tokens) - 1 + ahead + t  # positions 0..reach-1
            need = max(need, reach)
            self._fit(reach, f"request {req.rid}: a round reaching position {reach - 1}")
            try:
                check_limits(req.params, reach + 1)  # the tokens committed after it, at most
            except OracleError as e:
                raise OracleError(f"request {req.rid}: {e}") from None
            while req.in_flight and self._need(req, t) > self.engine.Wcap:
                self._finish(self.pending[0])  # window too small: finish the oldest
        dep = [r.depths for r in reqs]  # (d_i, D_i) per request
        h = Handle(self.round_idx, self.mode, self.policy, *shared(dep), reqs, T, depths=dep)
        h.span = self.span_bucket(need, self.max_len)
        slots, n_slots = [r.slot for r in reqs], self.engine.kv.n_slots

        def make():
            sched = plan_schedule(self.mode, T, [a for a, _ in dep], [b for _, b in dep])
            return sched, plan_indices(sched, slots, self.Tcap, n_slots)

        sched, indices = self.plans.get((tuple(T), tuple(dep), tuple(slots), n_slots), make)
        W = max(1, max(self._need(r, t) for r, t in zip(reqs, T)))
        windows = np.stack([r.stream.window(W) if not r.params.greedy else np.zeros(W) for r in reqs])
        h.plan = build_plan(
            sched,
            slots,
            self.Tcap,
            n_slots,
            [r.stream.consumed for r in reqs],
            windows,
            sampling_variant([r.params for r in reqs], self.cfg.vocab_size),
            indices,
            processors_variant([r.steps for r in reqs]),
        )
        before = dict(self.graphs.stats)
        t1 = time.perf_counter()
        try:
            h.out, h.keep = self._enqueue(h)
        except BaseException as e:
            # before the device commit nothing changed but scratch state (KV past the
            # frontier, round buffers); after it, the requests' device state is unknown
            if h.committed:
                for r in reqs:
                    self._drain(r)  # earlier rounds are fine
                self._fail(h, e)
            raise
        h.stats = {
            "recurrent_calls": len(sched.calls),
            "rows_per_call": sched.row_counts(),
            "head_calls": sum(1 for c in sched.calls if c.draft_head) + 1,
            "head_rows": sum(sched.draft_head_counts()) + len(sched.verify_head),
            "draft_head_calls": sum(1 for c in sched.calls if c.draft_head),
            "draft_head_rows": sum(sched.draft_head_counts()),
            "drafted": sum(t - 1 for t in T),
        }
        h.stats |= {k: self.graphs.stats[k] - before[k] for k in before}
        h.host_ms = {"plan": (t1 - t0) * 1e3, "enqueue": (time.perf_counter() - t1) * 1e3}
        self.round_idx += 1
        for r in reqs:
            r.in_flight.append(h)
        self.pending.append(h)
        return h

    @property
    def max_len(self) -> int:
        return self.engine.kv.max_len

    def _fit(self, n: int, what: str) -> None:
        """Make room for positions 0..n-1 (grow) or raise."""
        if n <= self.max_len:
            return
        if not self.grow:
            raise OracleError(f"{what} needs {n} KV positions, past max_len {self.max_len}")
        self.engine.grow(self.engine.kv.n_slots - 1, max(2 * self.max_len, n))

    def _need(self, req, t) -> int:
        """Stream uniforms a new round of t tokens may read past the host's cursor."""
        if req.params.greedy:
            return 0
        return sum(max_draws(x.counts[x.reqs.index(req)] - 1) for x in req.in_flight) + max_draws(t - 1)

    def _enqueue(self, h: Handle):
        host = torch.from_numpy(h.plan.buf)
        if self.device.type == "cuda":
            h.started = torch.cuda.Event(enable_timing=True)
            h.started.record()
            host = host.pin_memory()
        buf = host.to(self.device, non_blocking=True)  # the round's one upload
        packed = self.engine.run_round(h.plan, buf, self.policy, h.span)  # [R, F]: unpack_results
        h.committed = True
        out = unpack_results(packed, self.Tcap)
        slots = buf[h.plan.requests[0] : h.plan.requests[0] + len(h.reqs)]
        res = {"packed": _to_host(packed)}  # before the next round's replay
        if self.trace:
            res |= {
                k: _to_host(v.float()) for k, v in self.engine.trace_arrays(slots, out["start"], max(h.counts)).items()
            }
        if self.debug_poison:
            self._poison(slots, out["start"] + out["a"] + 1)
        if self.device.type == "cuda":
            h.event = torch.cuda.Event(enable_timing=True)
            h.event.record()
        return res, [host, buf]

    def _poison(self, slots, frontier):
        self.engine.kv.poison(slots, frontier)

    @_no_autograd
    def collect(self, h: Handle):
        while not h.done:
            self._finish(self.pending[0])
        if h.error is not None:
            raise h.error
        return h.trace

    def _drain(self, req: HostRequest) -> None:
        while req.in_flight:
            self._finish(self.pending[0])

    def _finish(self, h: Handle) -> None:
        assert self.pending and self.pending[0] is h, "rounds finish in submission order"
        self.pending.pop(0)
        h.done = True
        if h.error is not None:  # failed by an earlier round
            self._fail(h, h.error)
            return
        t0 = time.perf_counter()
        try:
            if h.event is not None:
                h.event.synchronize()
                h.device_ms = h.started.elapsed_time(h.event)  # stream order: after the previous round
            t1 = time.perf_counter()
            out = {k: v.numpy() for k, v in h.out.items()}
            out |= unpack_results(out.pop("packed"), self.Tcap)
            results = check_results(h, out)
        except OracleError as e:
            self._fail(h, e)
            return
        for r in h.reqs:
            r.in_flight.remove(h)
        h.trace = build_trace(h, out, results, self.dtype_name, full=self.trace)
        self.commit_round(h, results)
        h.out = h.keep = None
        h.host_ms |= {"wait": (t1 - t0) * 1e3, "finish": (time.perf_counter() - t1) * 1e3}
        for r in h.reqs:  # a round submitted after the one that finished r fails
            for later in r.in_flight if r.finished else ():
                later.error = later.error or OracleError(
                    f"round {later.round_idx} names request {r.rid}, "
                    f"which finished ({r.finished}) in round {h.round_idx}"
                )

    def commit_round(self, h: Handle, results) -> None:
        """The host side of a collected round's commit (the device committed its own state in
        Engine.accept_commit): each request's kept tokens, generated count and finish reason,
        and its stream cursor past the uniforms the round used. results: check_results'."""
        for req, (K, a, events, drafts, emitted, used, n, why) in zip(h.reqs, results):
            req.tokens.extend(emitted[:n])
            req.generated += n
            if why:
                req.finished = why
            req.stream.consume(used)

    def _fail(self, h: Handle, error) -> None:
        """Drop every request of a failed round (freeing its slot); later rounds that
        include one of them fail too, naming the first error."""
        h.error = h.error or error
        for r in h.reqs:
            if self.requests.get(r.rid) is r:
                self.requests.pop(r.rid)
                self.engine.kv.release(r.slot)
            for later in r.in_flight:
                if later is not h and later.error is None:
                    later.error = OracleError(
                        f"round {later.round_idx} was dropped: it shares request {r.rid} "
                        f"with round {h.round_idx}, which failed ({h.error})"
                    )
            r.in_flight.clear()
        h.out = h.keep = None


def _to_host(t: torch.Tensor) -> torch.Tensor:
    if t.device.type == "cpu":
        return t.clone()
    dst = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    dst.copy_(t, non_blocking=True)
    return dst
