"""JaxLoopedModel: the Ouro model in JAX FP32, jit-compiled, independent of oracle/model.py.

Two paths over the same parameters:
* `forward_full(tokens, loops)`: cache-free, logits after every loop (the cross-check);
* `call(kv, rows, src, tok, dst)`: one loop over rows (slot, position, depth) at mixed
  depths, reading and writing per-(depth, layer) KV planes held on the device (kvplanes.py).
  A row's input is a row of the device hidden-state pool (kv.pool) or a token's embedding,
  and its output goes to a pool row: a round's hidden states never leave the device. One
  packed int32 index vector goes up per call; `head_rows` reads pool rows through lm_head
  (logits come back: sampling is on the host); `kv_rows` gathers rows' K/V from the planes
  for the trace. `recurrent(kv, rows, h, want_kv)` is the same call with host h in and out.

Recompiles are bounded by bucketing: row groups (one per (slot, depth) plane in a call), rows
per group and the sequence length are padded to powers of two, the attended context of a
large model to 4 significant bits past 512 keys (at most 1/8 of it padding) and to a power of
two below (a power of two for tiny ones: fewer programs), and the rows of a KV fetch to 3
(padding rows are masked and their KV writes dropped); small calls of tiny models are padded
up to a fixed row count, and tiny configs share one canonical padded layout (layout.py), so a
property suite over random shapes compiles a handful of programs. A large model's sessions
share program shapes too (`session_shapes`): KV planes of a power-of-two slot count and a
length of 2 significant bits, one pool and RoPE table of at least 4096 rows, and prefill
chunks padded to whole chunks; so the 12 cases of gpu_tests/parity_full.py compile one set of
programs per case shape, not one per case. The programs and their bucketing: judge_jax/programs.py.
"""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from oracle.config import ModelConfig
from oracle.errors import OracleError

from . import layers
from .checkpoint import host_params
from .layers import Dims
from .layout import Layout
from .programs import _call, _call_rows, _full, _head, _kv_rows, bucket, pow2

LAYER_LOOPS = {"auto": None, "scan": False, "unroll": True}  # names of JaxLoopedModel's `unroll`
ATTENTION = ("auto", "xla", "pallas")  # JaxLoopedModel's `attn`
LOGITS_FETCH = ("pageable", "pinned")  # JaxLoopedModel's `logits_fetch`


class JaxLoopedModel:
    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict,
        mesh=None,
        norm_offset: float = 0.0,
        pad: bool = True,
        unroll: bool | None = None,
        ctx_bits: int = 4,
        dot: str = "auto",
        merge: bool = True,
        attn: str = "auto",
        rows_bits: int = 3,
        logits_fetch: str = "pinned",
    ):
        """weights: FP32 arrays by HF name (e.g. oracle's LoopedModel.weights); the early-exit
        gate is ignored. mesh: a jax.sharding.Mesh with axis "tp" (sharding.py) or None.
        pad: run tiny configs in the canonical padded layout (layout.py; exact zeros).
        unroll: one buffer per layer and unrolled layer loops (no per-layer weight slices in a
        program; slower to compile), else stacked weights and a scan over the layers; None: a
        scan on a GPU, unrolled on a CPU (where a scan ran 5x slower).
        ctx_bits: significant bits of a large model's attended-context bucket (1: powers of two:
        fewer programs, up to 2x the keys read).
        dot: the weight products' algorithm (layers.DOTS; "highest": true FP32; a GPU only:
        "tf32x3", measured at FP32-level error, the CPU keeps HIGHEST; "rows": calls of 2..128 rows
        through the Pallas kernel of few rows, FP32, others at HIGHEST; interpreted on a CPU);
        "auto": "rows" on one GPU with no mesh (measured at ouro-1.4b on the H200: the round
        0.90x of tf32x3's, within 3.2e-6 of the NumPy reference), "tf32x3" on a GPU with a
        mesh, "highest" on a CPU.
        attn: the recurrent call's attention, "xla" (gather each group's plane, einsum) or
        "pallas" (layers.attend_planes: the planes read in place, a Pallas kernel, in calls of
        at most PLANES_TILE's max_rows query rows per group and kv head; the einsum in larger
        ones: prefill chunks); "auto": "pallas" for a large model on a GPU with no mesh (as
        measured and cross-checked at ouro-1.4b on the H200), else "xla" (on a CPU the kernel
        runs interpreted: slow).
        rows_bits: significant bits of a large model's rows-per-group bucket (1: a power of two,
        fewer programs; 3, the default: a verification group of 5 rows stays 5, so 16 groups are 80
        rows, which the kernel of few rows takes as blocks of 64 + 16, not padded to 128; H200,
        2026-12-03, `gpu_run.sh split2`: the block round's device time 81.6 -> 77.2 ms).
        logits_fetch: how a head's logits come back to the host for sampling: "pinned", the
        default (a copy into pinned host memory, then a host view; H200, 2026-12-04, `gpu_run.sh
        logits`: the block round 107.2 / 105.7 -> 97.1 / 93.2 ms) or "pageable" (jax.device_get).
        merge: with no mesh, q/k/v as one [H, q+2kv] matrix and gate/up as one
        [H, 2I] per layer (two wide products instead of five narrow ones).
        norm_offset: a test seam only (1.0 = the wrong `1 + w` RMSNorm).
        The public API takes and returns true shapes: h [n, hidden], logits [n, vocab].
        (Over 80 lines for this docstring: each option's default, as measured.)"""
        self.cfg, self.mesh = cfg, mesh
        self.layout = lay = Layout.for_config(cfg, pad)
        from .layers import DOTS

        gpu = jax.default_backend() in ("gpu", "cuda")
        if dot == "auto":  # as measured (docstring); the kernel reads unsharded stacked weights
            dot = ("rows" if mesh is None else "tf32x3") if gpu else "highest"
        if dot not in DOTS:
            raise OracleError(f"dot algorithm {dot!r}: expected auto or one of {', '.join(DOTS)}")
        if attn not in ATTENTION:
            raise OracleError(f"attention {attn!r}: expected one of {', '.join(ATTENTION)}")
        small = lay.H * lay.L <= 4096  # tiny models: coarse buckets, few programs
        if attn == "auto":  # the kernel as measured: a large model on one GPU
            attn = "pallas" if mesh is None and not small and gpu else "xla"
        if attn != "xla" and mesh is not None:
            raise OracleError(f"attention {attn!r} reads unsharded planes: with a mesh, attention 'xla'")
        if not (isinstance(rows_bits, int) and 1 <= rows_bits <= 8):
            raise OracleError(f"rows_bits {rows_bits!r}: expected an integer in 1..8")
        if logits_fetch not in LOGITS_FETCH:
            raise OracleError(f"logits_fetch {logits_fetch!r}: expected one of {', '.join(LOGITS_FETCH)}")
        if not (isinstance(ctx_bits, int) and 1 <= ctx_bits <= 16):
            raise OracleError(f"ctx_bits {ctx_bits!r}: expected an integer in 1..16")
        tile = () if attn == "xla" else tuple(sorted(layers.planes_tile().items()))  # a jit key: read once here
        self.dims = Dims(*lay.dims, float(cfg.rms_norm_eps), float(norm_offset), dot, attn, tile)
        self._head_dims = self.dims if dot == "rows" else None  # the head: HIGHEST but with "rows"
        host = host_params(cfg, weights)
        self.embed_host = host["embed"]  # token lookup for the host-side round driver
        host = lay.pad_params(host)
        if unroll is None:  # a scan on a GPU (H200: round and compiles about as the
            unroll = jax.default_backend() == "cpu"  # unrolled loop's); unrolled on a CPU
        merge = merge and mesh is None  # sharding splits q/k/v and gate/up apart: unmerged there
        if merge:  # [L, H, q+2kv] and [L, H, 2I]: two wide products
            st = host["layers"]
            st["wqkv"] = np.concatenate([st.pop("wq"), st.pop("wk"), st.pop("wv")], axis=2)
            st["wgu"] = np.concatenate([st.pop("wg"), st.pop("wu")], axis=2)
        if unroll:  # [L, ...] arrays -> one dict of buffers per layer
            stacked = host["layers"]
            host["layers"] = [
                {k: np.ascontiguousarray(v[l]) for k, v in stacked.items()} for l in range(cfg.num_layers)
            ]
        self.unroll, self.ctx_bits, self.rows_bits, self.logits_fetch = unroll, ctx_bits, rows_bits, logits_fetch
        if mesh is None:
            self.params = jax.device_put(host)
        else:
            from .sharding import check_divisible, place_params

            check_divisible(lay, mesh)
            self.params = place_params(host, mesh)
        self.floors = (
            {"groups": 16, "rows": 16, "ctx": 64, "head": 64}
            if small
            else {"groups": 1, "rows": 1, "ctx": 16, "head": 1}
        )
        self.small = small
        self._rope = None  # (cos, sin) on the device, [rows, hd] each
        self._lock = threading.Lock()  # judge threads share one model: the RoPE table and counts
        self.counts = {"calls": 0, "h2d": 0, "d2h": 0, "d2h_bytes": 0}  # explicit transfers, all steps
        self.probe = None  # a list: each device step is waited for and timed into it

    @classmethod
    def from_reference(cls, model, **kw) -> "JaxLoopedModel":
        return cls(model.cfg, model.weights, **kw)

    def session_shapes(self, slots: int, max_len: int) -> tuple[int, int, int]:
        """(slots, max_len, pool rows) of a session's device state asked for slots x max_len: a
        large model's rounded up (program shapes shared by sessions of similar size; at most
        1.5x the positions), a tiny model's as asked (its layout already pads)."""
        if self.small:
            return slots, max_len, 64
        return pow2(slots), bucket(max_len, 2, 64), pow2(max(4096, max_len, 16 * slots))

    # ---- RoPE table (host FP64 angles, grown on demand; at least 4096 rows for a large model) ----
    def rope(self, n: int):
        with self._lock:
            if self._rope is None or n > self._rope[0].shape[0]:
                cos, sin = self.layout.rope(pow2(n, 64 if self.small else 4096))
                self._rope = (jax.device_put(cos), jax.device_put(sin))
            return self._rope

    def _count(self, **add: int) -> None:
        with self._lock:
            for k, v in add.items():
                self.counts[k] += v

    # ---- cache-free ----
    def forward_full(self, tokens, loops: int) -> list[np.ndarray]:
        """Logits [T, V] of every position after each of `loops` loops."""
        tokens = np.asarray(tokens, dtype=np.int32)
        self.check_tokens(tokens)
        T = len(tokens)
        Tb = pow2(T, 16)
        padded = np.zeros(Tb, np.int32)  # trailing padding: causal, so never attended
        padded[:T] = tokens
        cos, sin = self.layout.rope(Tb)
        out = np.asarray(_full(self.params, padded, cos, sin, loops, self.dims))
        return [out[j, :T, : self.cfg.vocab_size] for j in range(loops)]

    def check_tokens(self, tokens) -> None:
        tokens = np.asarray(tokens)
        bad = tokens[(tokens < 0) | (tokens >= self.cfg.vocab_size)]
        if bad.size:
            raise OracleError(f"token id {int(bad[0])} is outside the vocabulary [0, {self.cfg.vocab_size})")

    def embed(self, tokens) -> np.ndarray:
        self.check_tokens(tokens)
        return self.embed_host[np.asarray(tokens, dtype=np.int64)]  # [n, H]

    # ---- the device steps of a round (host arrays go up and come back only here) ----
    def _put(self, x: np.ndarray):
        self._count(h2d=1)
        return jax.device_put(x)

    def _get(self, x) -> np.ndarray:
        self._count(d2h=1, d2h_bytes=int(x.size) * x.dtype.itemsize)
        return np.asarray(jax.device_get(x))

    def _step(self, kind: str, rows: int, t0: float, fn, *args, **kw):
        """Enqueue fn; with a probe, wait for it and record (kind, rows, host s, device wait s)."""
        out = fn(*args, **kw)
        if self.probe is not None:
            t1 = time.perf_counter()
            jax.block_until_ready(out)
            self.probe.append((kind, rows, t1 - t0, time.perf_counter() - t1))
        return out

    def call(self, kv, rows, src, tok, dst, min_rows: int = 1, min_ctx: int = 0, gather: bool = False):
        """One loop over rows [(slot, position, depth)] (kv.claim's): row r's input is pool row
        src[r] of kv.pool, or the embedding of token tok[r] where src[r] < 0; its output goes
        to pool row dst[r]. Enqueued with one index vector up; nothing comes back.
        min_rows, min_ctx: pad the rows per group and the attended context to at least these
        (a prefill chunk's shape; fewer programs). gather: also gather the K/V the call wrote,
        in the same program (one dispatch and one upload fewer than kv_rows after it), and
        return them as kv_rows does: (device array [2, n_padded, L, nkv, hd], n)."""
        t0 = time.perf_counter()
        groups: dict[tuple[int, int], list[int]] = {}
        for r, (slot, _, depth) in enumerate(rows):
            groups.setdefault((slot, depth), []).append(r)
        f = self.floors
        R = max(min_rows, max(len(v) for v in groups.values()))
        G, R = pow2(len(groups)), pow2(R) if self.small else bucket(R, self.rows_bits)
        big = G * R > f["groups"] * f["rows"]  # floors only where they cost nothing real
        if not big:  # small calls: G*R padded to the floor product
            G = max(G, f["groups"])
            R = max(R, f["groups"] * f["rows"] // G)
        m = G * R
        idx = np.empty(2 * G + 4 * m, np.int32)
        idx[: 2 * G] = 0
        per_row = idx[2 * G :].reshape(4, m)
        per_row[0], per_row[1], per_row[2], per_row[3] = -1, -1, 0, kv.pool.shape[0]  # padding rows
        for g, ((s, j), members) in enumerate(groups.items()):
            idx[g], idx[G + g] = s, j
            for r_in_g, r in enumerate(members):
                w = g * R + r_in_g
                per_row[:, w] = rows[r][1], src[r], tok[r], dst[r]
        top = max(int(per_row[0].max()) + 1, min_ctx)
        if self.small:
            ctx = pow2(top, 16 if big else f["ctx"])
        else:
            ctx = bucket(top, self.ctx_bits, 16) if top > 512 else pow2(top, 16)
        ctx = min(kv.max_len, ctx)
        cos, sin = self.rope(kv.max_len)
        fn, kw = _call, {"groups": G, "ctx": ctx, "dims": self.dims}
        if gather:  # the K/V rows it writes, named after the call's own index vector
            fn, kw["m"], idx = _call_rows, m, np.concatenate([idx, self._kv_index(rows).ravel()])
        out = self._step(
            "recurrent", len(rows), t0, fn, self.params, kv.k, kv.v, kv.pool, cos, sin, self._put(idx), **kw
        )
        kv.k, kv.v, kv.pool = out[:3]
        self._count(calls=1)
        return (out[3], len(rows)) if gather else None

    def head_rows(self, kv, src, before_wait=None) -> np.ndarray:
        """lm_head over pool rows src: logits [n, V], brought back (sampling is on the host).
        before_wait: called once the head is enqueued, before the host waits for its logits."""
        t0 = time.perf_counter()
        n = len(src)
        if n == 0:
            return np.zeros((0, self.cfg.vocab_size), np.float32)
        s = np.zeros(pow2(n, self.floors["head"]), np.int32)
        s[:n] = src
        out = self._step("head", n, t0, _head, self.params["lm_head"], kv.pool, self._put(s), dims=self._head_dims)
        if before_wait is not None:
            before_wait()
        if self.logits_fetch == "pinned":  # through pinned host memory (DMA), then a host view
            return np.asarray(self.to_pinned_host((out, n))[0])[:n, : self.cfg.vocab_size]
        return self._get(out)[:n, : self.cfg.vocab_size]

    def kv_rows(self, kv, rows):
        """The K/V that rows [(slot, position, depth)] hold in the planes, every layer, gathered
        on the device and not brought back: (device array [2, n_padded, L, nkv, hd], n)."""
        t0 = time.perf_counter()
        return self._step("kv_fetch", len(rows), t0, _kv_rows, kv.k, kv.v, self._put(self._kv_index(rows))), len(rows)

    def _kv_index(self, rows) -> np.ndarray:
        # int32 [3, n padded]: slot, depth, pos of rows [(slot, position, depth)]
        n = len(rows)
        idx = np.zeros((3, pow2(n, 64) if self.small else bucket(n, 3)), np.int32)
        idx[:, :n] = np.asarray(rows, np.int32).T[[0, 2, 1]]
        return idx

    def to_pinned_host(self, dev_n):
        """(device array, n) -> the same with the array's copy into pinned host memory enqueued (no
        host wait): the array in the `pinned_host` memory kind of its devices (kv_rows' result, a
        head's logits)."""
        dev, n = dev_n
        self._count(d2h=1, d2h_bytes=int(dev.size) * dev.dtype.itemsize)
        return jax.device_put(dev, dev.sharding.with_memory_kind("pinned_host")), n

    def fetch_kv(self, dev_n, rows_first: bool = False) -> np.ndarray:
        """kv_rows' result on the host at the model's true shapes: [2, L, n, nkv, hd] (a view),
        or with rows_first [2, n, L, nkv, hd] as gathered."""
        dev, n = dev_n
        t0 = time.perf_counter()
        pinned = getattr(dev.sharding, "memory_kind", None) == "pinned_host"  # counted by to_pinned_host
        out = np.asarray(dev) if pinned else self._get(dev)
        if self.probe is not None:
            self.probe.append(("kv_fetch_to_host", n, time.perf_counter() - t0, 0.0))
        out = self.layout.unpad_kv(out[:, :n, : self.cfg.num_layers])
        return out if rows_first else out.transpose(0, 2, 1, 3, 4)

    # ---- head and recurrent call with host arrays (tests, tools) ----
    def head(self, h: np.ndarray) -> np.ndarray:
        """h: [n, H] loop outputs -> logits [n, V]."""
        n = len(h)
        if n == 0:
            return np.zeros((0, self.cfg.vocab_size), np.float32)
        hb = np.zeros((pow2(n, self.floors["head"]), self.layout.H), np.float32)
        hb[:n, : self.cfg.hidden_size] = h
        logits = _head(self.params["lm_head"], self._put(hb), jnp.arange(len(hb)), dims=self._head_dims)
        return self._get(logits)[:n, : self.cfg.vocab_size]

    def recurrent(self, kv, rows, h: np.ndarray, want_kv: bool):
        """rows: [(slot, position, depth)]; h: [n, H] loop inputs. Runs one loop over the rows
        (KV planes in `kv`, a kvplanes.DeviceKV, updated in place; its pool rows 0..n-1 are
        overwritten). Returns (h_out [n, H], k_new, v_new [L, n, nkv, hd] or None)."""
        n = len(rows)
        assert h.shape == (n, self.cfg.hidden_size), (h.shape, n)
        kv.ensure_pool(n)
        pool = np.zeros(kv.pool.shape, np.float32)
        pool[:n, : self.cfg.hidden_size] = h
        kv.pool = self._put(pool)
        self.call(kv, rows, list(range(n)), [0] * n, list(range(n)))
        h_out = self._get(kv.pool)[:n, : self.cfg.hidden_size]  # padded columns are exact zeros
        if not want_kv:
            return h_out, None, None
        kvr = self.fetch_kv(self.kv_rows(kv, rows))
        return h_out, kvr[0], kvr[1]
