"""make_jax_backend(): the JAX FP32 model as an oracle backend (oracle/runtime/backends.py interface).

Rounds follow the shared planner (`oracle.schedule.plan`); the host-side logic of a round
(row bookkeeping, draft head, sampling, acceptance, RNG events, commit) is oracle.phases'
with a model adapter whose numerics (recurrent calls, heads) run in JAX and whose KV
planes and hidden states live on the device (kvplanes.DeviceKV; _RoundModel says what
crosses to the host: an index vector per call, the logits per head call, the KV writes).
Sampling on the host through oracle.sampling and oracle.rng_trace, so RNG events match the
reference exactly.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from oracle.errors import OracleError
from oracle.kv import KVWrite
from oracle.phases import Request, RoundState, draft_head, finish_round, run_call, verify_head
from oracle.rng_trace import RequestRng, check_policy
from oracle.schedule import plan, validate
from oracle.session import admit, restore, snapshot

from .kvplanes import DeviceKV
from .model import JaxLoopedModel


KV_FETCH = ("async", "thread", "round", "pinned")


class _Token:
    """A depth-0 row's loop input: the embedding of a token (looked up on the device)."""

    __slots__ = ("token",)

    def __init__(self, token: int):
        self.token = token


class _Hidden:
    """A loop output: row `row` of the device pool, as written by that row's `version`th write."""

    __slots__ = ("row", "version")

    def __init__(self, row: int, version: int):
        self.row, self.version = row, version


class _RoundModel:
    """What oracle.phases calls `model`: embed / stack / recurrent_call / head, run by JAX.

    Hidden states stay on the device: embed returns token handles, recurrent_call returns
    handles of pool rows (one pool row per (request, position) branch of the round), stack
    keeps handles as a list (oracle.phases' `stack` hook), and the device gathers a call's
    inputs and a head's rows from them. Per call one index vector goes up; per head call the
    logits come back (sampling is on the host). The trace's KV writes are gathered from the
    planes on the device and brought back at `flush`, which puts them in the round's trace:
    kv_fetch="pinned" (the default) gathers each call's rows in the call's program and enqueues,
    right after the call, their copy into pinned host memory (`jax.device_put` to the
    `pinned_host` memory kind: no host wait, a copy at DMA speed; on the H200 at ouro-1.4b the
    block round took 105 ms against 147-154 with "async", the loop round 113-116 against 142-157,
    docs/results.md); "async" starts their copy to the (pageable) host at the next head call
    (they overlap the later calls), "round" gathers the whole
    round's at flush, one copy; "thread" gathers each call's rows right after it and hands
    them to the session's fetch thread (one worker), which waits for them and copies them to
    the host while the main thread goes on with the round (on the H200 no faster than "async":
    the thread's copies and the main thread's head calls contend, docs/results.md).

    Why "async" starts the copies at a head call: `copy_to_host_async` holds the host until its array
    is computed. Started right after each call (as before 2026-12-01), it held the host for
    that call's device time, 12 times a round (65-84 ms of a 195 ms round at ouro-1.4b on the
    H200, cProfile), so the next calls were not enqueued meanwhile. A head call's logits come
    after those gathers in stream order, so the host waits for them there anyway. Measured
    on the H200 and dropped (docs/results.md, 2026-12-03): the head's logits queued ahead of
    these copies, and each call's copy started once the next call is enqueued."""

    def __init__(self, jm: JaxLoopedModel, kv: DeviceKV, record: bool = True, kv_fetch: str = "pinned", fetcher=None):
        if kv_fetch not in KV_FETCH:
            raise OracleError(f"kv_fetch {kv_fetch!r}: expected one of {', '.join(KV_FETCH)}")
        if kv_fetch == "thread" and fetcher is None:
            raise OracleError("kv_fetch 'thread' needs the session's fetch thread")
        self.jm, self.cfg, self.kv, self.record, self.kv_fetch = jm, jm.cfg, kv, record, kv_fetch
        self.fetcher = fetcher  # a one-worker executor (kv_fetch="thread")
        self.row_of: dict = {}  # (rid, position) -> pool row
        self.version: list[int] = []  # per pool row: writes so far
        self.pending: list = []  # (device K/V rows or None, [(rid, pos, depth, call)])
        self.rows: list = []  # device rows (slot, pos, depth) not yet gathered (kv_fetch="round")
        self.kicked = 0  # pending[:kicked] have their host copies started (kv_fetch="async")
        self.staged: list[dict] = []  # trace entries of pending[: len(staged)] (kv_fetch="pinned")

    def embed(self, tokens) -> list:
        self.jm.check_tokens(tokens)
        return [_Token(int(t)) for t in tokens]

    def stack(self, hs) -> list:
        return list(hs)

    def _row(self, x: _Hidden) -> int:
        if not isinstance(x, _Hidden) or self.version[x.row] != x.version:
            raise OracleError("a loop input is not the current output of its row (stale or foreign hidden state)")
        return x.row

    def head(self, h) -> np.ndarray:
        return self.jm.head_rows(self.kv, [self._row(x) for x in h], before_wait=self._kick)

    def _kick(self) -> None:
        """Called once a head is enqueued, before the host waits for its logits. "async": start
        the host copies of the KV rows gathered since the last head call. "pinned": turn the
        calls whose pinned copies are done into trace entries now, while the device runs the
        call and head just enqueued, so that flush has only the last calls' rows left (on the
        H200 flush held the device idle 5-7 ms a round with all of them, docs/results.md)."""
        if self.kv_fetch == "pinned":
            while len(self.staged) < len(self.pending) and self.pending[len(self.staged)][0][0].is_ready():
                dev, ws = self.pending[len(self.staged)]
                self.staged.append(self._entries(self.jm.fetch_kv(dev, rows_first=True), ws))
            return
        if self.kv_fetch != "async":
            return
        for dev, _ in self.pending[self.kicked :]:
            if dev is not None:
                dev[0].copy_to_host_async()
        self.kicked = len(self.pending)

    def _entries(self, kvr: np.ndarray, ws) -> dict:
        """One call's K/V rows on the host, [2, n, L, nkv, hd] -> {(rid, pos, depth, layer): (call,
        k, v)}, keyed as finish_round keys kv.log (views, no copy)."""
        L, n = self.cfg.num_layers, len(ws)
        ks = list(kvr[0].reshape(n * L, *kvr.shape[3:]))  # row r, layer l at r * L + l (views)
        vs = list(kvr[1].reshape(n * L, *kvr.shape[3:]))
        keys = [(rid, pos, depth, l) for rid, pos, depth, _ in ws for l in range(L)]
        calls = [call for *_, call in ws for _ in range(L)]
        return dict(zip(keys, zip(calls, ks, vs)))

    def recurrent_call(self, rows, h, kv: DeviceKV, call: int, min_rows: int = 1, min_ctx: int = 0) -> list:
        """rows: [(rid, position, depth)]; h: their inputs (handles). Writes are logged (for the
        trace) with the call number, as the reference numbers them. min_rows, min_ctx: the
        call's least padded shape (JaxLoopedModel.call)."""
        assert kv is self.kv
        src, tok = [], []
        for x in h:
            if isinstance(x, _Token):
                src.append(-1)
                tok.append(x.token)
            else:
                src.append(self._row(x))
                tok.append(0)
        dev_rows = kv.claim(rows, call)
        dst = []
        for rid, pos, _ in rows:
            r = self.row_of.setdefault((rid, pos), len(self.row_of))
            if r == len(self.version):
                self.version.append(0)
            dst.append(r)
        kv.ensure_pool(len(self.version))
        gather = self.record and self.kv_fetch != "round"  # the written K/V gathered in the call's program
        got = self.jm.call(kv, dev_rows, src, tok, dst, min_rows, min_ctx, gather=gather)
        out = []
        for r in dst:
            self.version[r] += 1
            out.append(_Hidden(r, self.version[r]))
        if self.record:
            logged = [(rid, pos, depth, call) for rid, pos, depth in rows]
            if self.kv_fetch == "async":  # its copy starts at the next head call (_kick)
                self.pending.append((got, logged))
            elif self.kv_fetch == "pinned":  # copied into pinned host memory now, behind the call
                self.pending.append((self.jm.to_pinned_host(got), logged))
            elif self.kv_fetch == "thread":  # waited for and copied by the fetch thread
                self.pending.append((self.fetcher.submit(self.jm.fetch_kv, got, True), logged))
            else:
                self.rows += dev_rows
                self.pending.append((None, logged))
        return out

    def flush(self, trace=None) -> int:
        """Bring the round's KV writes back. With a trace, put them straight into
        trace.kv_writes ((rid, pos, depth, layer) -> (call, k, v), the entries finish_round
        makes of kv.log; 7680 KVWrite objects a round at ouro-1.4b cost
        ~25 ms of host time) and return their count, the writes made, for the trace's stats;
        without one, log them in kv.log (KVWrite) as the reference's cache does."""
        pending, staged = self.pending, self.staged
        self.pending, self.staged, self.kicked = [], [], 0
        if self.kv_fetch == "round" and pending:
            got = self.jm.kv_rows(self.kv, self.rows)
            pending, self.rows = [(got, [w for _, ws in pending for w in ws])], []
        elif self.kv_fetch == "thread":
            pending = [(fut.result(), ws) for fut, ws in pending]  # on the host already
        for dev, ws in pending[len(staged) :]:  # those _kick has not turned into entries
            staged.append(self._entries(dev if isinstance(dev, np.ndarray) else self.jm.fetch_kv(dev, True), ws))
        made = 0
        for part in staged:
            if trace is None:
                self.kv.log.extend(KVWrite(*key, *val) for key, val in part.items())
            else:
                trace.kv_writes.update(part)
            made += len(part)
        return made


class JaxSession:
    def __init__(
        self,
        jm: JaxLoopedModel,
        d,
        D,
        mode,
        policy="sequential",
        *,
        name="jax",
        max_requests: int = 8,
        max_len: int = 64,
        prefill_chunk: int = 512,
        kv_fetch: str = "pinned",
    ):
        """prefill_chunk: prompt positions per prefill call (bounds memory and program shapes);
        kv_fetch: how the trace's KV writes come back ("async" / "thread" / "pinned" per call, "round":
        once a round; _RoundModel)."""
        assert prefill_chunk >= 1
        if kv_fetch not in KV_FETCH:
            raise OracleError(f"kv_fetch {kv_fetch!r}: expected one of {', '.join(KV_FETCH)}")
        self.kv_fetch = kv_fetch
        self.fetcher = None
        if kv_fetch == "thread":
            from concurrent.futures import ThreadPoolExecutor

            self.fetcher = ThreadPoolExecutor(1, thread_name_prefix="jax-kv-fetch")
            weakref.finalize(self, self.fetcher.shutdown, wait=False)
        validate([1], d, D)
        plan(mode, [1], d, D)  # checks the mode
        self.jm, self.d, self.D, self.mode, self.policy = jm, d, D, mode, check_policy(policy)
        self.name, self.prefill_chunk = name, prefill_chunk
        sharding = None
        if jm.mesh is not None:
            from .sharding import kv_sharding

            sharding = kv_sharding(jm.mesh)
        slots, length, pool = jm.session_shapes(max_requests, max_len)
        self.kv = DeviceKV(jm.layout, D, slots, length, sharding, pool_rows=pool)
        self.requests: dict = {}
        self.round_idx = 0

    def add(self, rid, prompt, params, replay=None, depths=None) -> None:
        """Join a request: prefill t[0..n-2] at every depth 0..D_i-1 (offset 0 of its first
        round is the prompt's last token). replay: uniforms to consume instead of its seeded
        stream; depths: (d_i, D_i), default the session's (d, D)."""
        di, Di, prompt = admit(self.requests, rid, prompt, depths, self.d, self.D)
        self.jm.check_tokens(prompt)
        rng = RequestRng(rid, seed=params.seed) if replay is None else RequestRng(rid, replay=replay)
        params.check_vocab(self.jm.cfg.vocab_size, f"request {rid}")
        self.kv.add(rid, Di)
        try:
            n = len(prompt) - 1
            if n:
                prefill = _RoundModel(self.jm, self.kv, record=False)
                h = prefill.embed(prompt[:n])  # n handles; the states stay on the device
                c = self.prefill_chunk
                for depth in range(Di):  # in chunks: a chunk attends to the ones before it
                    outs = []
                    for a in range(0, n, c):
                        rows = [(rid, p, depth) for p in range(a, min(a + c, n))]
                        # a prompt past one chunk: every chunk padded to c rows and whole chunks
                        # of context (one program per chunk index); a shorter one: at least 16 rows
                        whole = (c, a + c) if n > c else (16, 0)
                        outs += prefill.recurrent_call(rows, h[a : a + c], self.kv, -1 - depth, *whole)
                    h = outs
        except BaseException:
            self.kv.drop(rid)
            raise
        self.requests[rid] = Request(rid, prompt, params, rng, (di, Di))

    def remove(self, rid) -> list[int]:
        req = self._get(rid)
        self.requests.pop(rid)
        self.kv.drop(rid)
        return req.tokens

    def tokens(self, rid) -> list[int]:
        return list(self._get(rid).tokens)

    def kv_frontiers(self, rid) -> set[int]:
        self._get(rid)
        return self.kv.frontiers(rid)

    def _get(self, rid) -> Request:
        if rid not in self.requests:
            raise OracleError(f"request {rid} is not in the session")
        return self.requests[rid]

    def step(self, counts: dict):
        """One round over the requests named in `counts` (rid -> T_i = K_i + 1)."""
        missing = [r for r in counts if r not in self.requests]
        if missing:
            raise OracleError(f"round names unknown request(s) {missing}")
        reqs = [self.requests[r] for r in counts]
        snap, fronts = snapshot(reqs), {r.rid: list(self.kv.front[r.rid]) for r in reqs}
        self.kv.log = []
        try:
            trace = self._round(reqs, list(counts.values()))
        except BaseException:  # a failed round leaves no trace
            restore(reqs, snap)
            self.kv.front.update(fronts)
            raise
        finally:
            self.kv.log = []
        self.round_idx += 1
        return trace

    def _round(self, reqs, counts):
        d, D = [r.depths[0] for r in reqs], [r.depths[1] for r in reqs]
        model = _RoundModel(self.jm, self.kv, kv_fetch=self.kv_fetch, fetcher=self.fetcher)
        st = RoundState(model, self.kv, reqs, counts, d, D, self.round_idx, self.policy, self.mode)
        sched = plan(self.mode, st.counts, d, D)
        for call in sched.calls:
            run_call(st, list(call.rows))
            draft_head(st, list(call.draft_head))
        logits = verify_head(st)
        made = model.flush(st.trace)  # the KV writes, straight into the trace
        trace = finish_round(st, logits)  # (kv.log stays empty: it counts 0 writes)
        trace.stats["kv_writes"] += made
        trace.dtype = "float32"
        return trace


class JaxBackend:
    name, dtype, exact = "jax", "float32", False
    policies = ("sequential", "fixed")
    host_rng = True  # uniforms come from PCG64(seed) on the host, like the reference

    def __init__(
        self,
        mesh=None,
        unroll: bool | None = None,
        ctx_bits: int = 4,
        dot: str = "auto",
        attn: str = "auto",
        rows_bits: int = 3,
        logits_fetch: str = "pinned",
        **session_defaults,
    ):
        self.mesh, self.defaults = mesh, session_defaults
        self.model_options = {
            "unroll": unroll,
            "ctx_bits": ctx_bits,
            "dot": dot,
            "attn": attn,
            "rows_bits": rows_bits,
            "logits_fetch": logits_fetch,
        }
        self._models = weakref.WeakKeyDictionary()  # reference model -> its JAX model (weights on device)
        self._lock = threading.Lock()  # judge threads: one JAX model per reference model

    def model(self, model) -> JaxLoopedModel:
        with self._lock:
            jm = self._models.get(model)
            if jm is None:
                jm = self._models[model] = JaxLoopedModel.from_reference(model, mesh=self.mesh, **self.model_options)
            return jm

    def drift_stats_fn(self, model, dtype: str, basis=None):
        """The drift verdict's sensitivities by jax.linearize on this device (judge_jax/drift.py);
        basis: fit these directions only (oracle.judge.probe.knobs.coarse_directions)."""
        from .drift import make_stats_fn

        return make_stats_fn(model, dtype, basis=basis)

    def precision_energy_fn(self, model, dtype: str):
        """The precision verdict's noise twin on this device (judge_jax/twin.py): energy_fn(tokens,
        loops, obs) -> {group: (sum of r^2, values)}."""
        from .twin import make_energy_fn

        return make_energy_fn(model, dtype)

    def twin_logits_fn(self, model, dtype: str):
        """The token rule's noise twin on this device (judge_jax/twin.py): twin_logits(tokens, loops,
        positions) -> [samples, loops, positions, V]."""
        from .twin import make_twin_logits_fn

        return make_twin_logits_fn(model, dtype)

    def session(self, model, d, D, mode, policy="sequential", **options) -> JaxSession:
        if policy not in self.policies:
            raise OracleError(f"backend {self.name} does not support RNG policy {policy!r}")
        return JaxSession(self.model(model), d, D, mode, policy, **(self.defaults | options))


def make_jax_backend(mesh=None, **options) -> JaxBackend:
    """options: session defaults (max_requests, max_len, prefill_chunk, kv_fetch) and the
    model's unroll / ctx_bits / dot / attn / rows_bits / logits_fetch (JaxLoopedModel); mesh: a jax.sharding.Mesh with
    axis "tp"."""
    return JaxBackend(mesh, **options)
