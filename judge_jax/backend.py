"""make_jax_backend(): the JAX FP32 model as an oracle backend (oracle/backends.py interface).

Rounds follow the shared planner (`oracle.schedule.plan`); the host-side logic of a round
(row bookkeeping, draft head, sampling, acceptance, RNG events, commit) is oracle.phases'
with a model adapter whose numerics (recurrent calls, heads) run in JAX and whose KV
planes live on the device (kvplanes.DeviceKV). Sampling on the host through oracle.sampling
and oracle.rng_trace, so RNG events match the reference exactly.
"""
from __future__ import annotations

import weakref

import numpy as np

from oracle.errors import OracleError
from oracle.kv import KVWrite
from oracle.phases import Request, RoundState, draft_head, finish_round, run_call, verify_head
from oracle.rng_trace import RequestRng, check_policy
from oracle.schedule import plan, validate
from oracle.session import admit

from .kvplanes import DeviceKV
from .model import JaxLoopedModel


class _RoundModel:
    """What oracle.phases calls `model`: embed / recurrent_call / head, run by JAX."""

    def __init__(self, jm: JaxLoopedModel, record: bool = True):
        self.jm, self.cfg, self.record = jm, jm.cfg, record

    def embed(self, tokens) -> np.ndarray:
        return self.jm.embed(tokens)

    def head(self, h) -> np.ndarray:
        return self.jm.head(np.asarray(h, np.float32))

    def recurrent_call(self, rows, h, kv: DeviceKV, call: int) -> np.ndarray:
        """rows: [(rid, position, depth)]; h: [n, H]. Writes are logged (for the trace) with
        the call number, as the reference numbers them."""
        dev_rows = kv.claim(rows, call)
        h_out, k, v = self.jm.recurrent(kv, dev_rows, np.asarray(h, np.float32), want_kv=self.record)
        if self.record:
            for r, (rid, pos, depth) in enumerate(rows):
                for l in range(self.cfg.num_layers):
                    kv.log.append(KVWrite(rid, pos, depth, l, call, k[l, r], v[l, r]))
        return h_out


class JaxSession:
    def __init__(self, jm: JaxLoopedModel, d, D, mode, policy="sequential", *, name="jax",
                 max_requests: int = 8, max_len: int = 64, prefill_chunk: int = 512):
        """prefill_chunk: prompt positions per prefill call (bounds memory and program shapes)."""
        assert prefill_chunk >= 1
        validate([1], d, D)
        plan(mode, [1], d, D)                                     # checks the mode
        self.jm, self.d, self.D, self.mode, self.policy = jm, d, D, mode, check_policy(policy)
        self.name, self.prefill_chunk = name, prefill_chunk
        sharding = None
        if jm.mesh is not None:
            from .sharding import kv_sharding
            sharding = kv_sharding(jm.mesh)
        self.kv = DeviceKV(jm.layout, D, max_requests, max_len, sharding)
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
                prefill = _RoundModel(self.jm, record=False)
                h = self.jm.embed(prompt[:n])                     # h: [n, H]
                c = self.prefill_chunk
                for depth in range(Di):             # in chunks: a chunk attends to the ones before it
                    outs = []
                    for a in range(0, n, c):
                        rows = [(rid, p, depth) for p in range(a, min(a + c, n))]
                        outs.append(prefill.recurrent_call(rows, h[a:a + c], self.kv, -1 - depth))
                    h = np.concatenate(outs)
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
        snap = [(r.rng.snapshot(), len(r.tokens), list(self.kv.front[r.rid]), r.generated, r.finished) for r in reqs]
        self.kv.log = []
        try:
            trace = self._round(reqs, list(counts.values()))
        except BaseException:                                     # a failed round leaves no trace
            for r, (rng, n_tok, front, generated, finished) in zip(reqs, snap):
                r.rng.restore(rng)
                del r.tokens[n_tok:]
                self.kv.front[r.rid] = front
                r.generated, r.finished = generated, finished
            raise
        finally:
            self.kv.log = []
        self.round_idx += 1
        return trace

    def _round(self, reqs, counts):
        d, D = [r.depths[0] for r in reqs], [r.depths[1] for r in reqs]
        st = RoundState(_RoundModel(self.jm), self.kv, reqs, counts, d, D, self.round_idx, self.policy, self.mode)
        sched = plan(self.mode, st.counts, d, D)
        for call in sched.calls:
            run_call(st, list(call.rows))
            draft_head(st, list(call.draft_head))
        trace = finish_round(st, verify_head(st))
        trace.dtype = "float32"
        return trace


class JaxBackend:
    name, dtype, exact = "jax", "float32", False
    policies = ("sequential", "fixed")
    host_rng = True                  # uniforms come from PCG64(seed) on the host, like the reference

    def __init__(self, mesh=None, **session_defaults):
        self.mesh, self.defaults = mesh, session_defaults
        self._models = weakref.WeakKeyDictionary()   # reference model -> its JAX model (weights on device)

    def model(self, model) -> JaxLoopedModel:
        jm = self._models.get(model)
        if jm is None:
            jm = self._models[model] = JaxLoopedModel.from_reference(model, mesh=self.mesh)
        return jm

    def drift_stats_fn(self, model, dtype: str, basis=None):
        """The drift verdict's sensitivities by jax.linearize on this device (judge_jax/drift.py);
        basis: fit these directions only (oracle.judge.drift.coarse_directions)."""
        from .drift import make_stats_fn
        return make_stats_fn(model, dtype, basis=basis)

    def session(self, model, d, D, mode, policy="sequential", **options) -> JaxSession:
        if policy not in self.policies:
            raise OracleError(f"backend {self.name} does not support RNG policy {policy!r}")
        return JaxSession(self.model(model), d, D, mode, policy, **(self.defaults | options))


def make_jax_backend(mesh=None, **options) -> JaxBackend:
    """options: session defaults (max_requests, max_len); mesh: a jax.sharding.Mesh with axis "tp"."""
    return JaxBackend(mesh, **options)
