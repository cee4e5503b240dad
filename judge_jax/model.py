"""JaxLoopedModel: the Ouro model in JAX FP32, jit-compiled, independent of oracle/model.py.

Two paths over the same parameters:
* `forward_full(tokens, loops)`: cache-free, logits after every loop (the cross-check);
* `recurrent(kv, rows, h, want_kv)`: one loop over rows (slot, position, depth) at mixed
  depths, reading and writing per-(depth, layer) KV planes held on the device (kvplanes.py).

Recompiles are bounded by bucketing: row groups (one per (slot, depth) plane in a call), rows
per group, attended context and the sequence length are padded to powers of two (padding
rows are masked and their KV writes dropped); small calls of tiny models are padded up to a
fixed row count, and tiny configs share one canonical padded layout (layout.py), so a
property suite over random shapes compiles a handful of programs.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from oracle.config import ModelConfig
from oracle.errors import OracleError

from . import layers
from .checkpoint import HF_LAYER, read_checkpoint
from .layers import Dims
from .layout import Layout


def pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(0, int(n) - 1).bit_length())


def host_params(cfg: ModelConfig, weights: dict) -> dict:
    """HF-named FP32 tensors -> the stacked layout: matrices [L, in, out], norms [L, H]."""
    def get(name):
        if name not in weights:
            raise OracleError(f"weights are missing tensor {name}")
        return np.asarray(weights[name], dtype=np.float32)

    stacked = {}
    for key, hf in HF_LAYER.items():
        per_layer = [get(f"model.layers.{l}.{hf}") for l in range(cfg.num_layers)]
        arr = np.stack(per_layer)
        stacked[key] = np.ascontiguousarray(arr.transpose(0, 2, 1)) if arr.ndim == 3 else arr
    return {"embed": get("model.embed_tokens.weight"), "norm": get("model.norm.weight"),
            "lm_head": np.ascontiguousarray(get("lm_head.weight").T), "layers": stacked}


@partial(jax.jit, static_argnames=("loops", "dims"))
def _full(params, tokens, cos, sin, loops, dims):
    return layers.full_forward(params, tokens, cos, sin, loops, dims)


@partial(jax.jit, static_argnames=("ctx", "dims", "want_kv"), donate_argnames=("kc", "vc"))
def _recurrent(params, kc, vc, cos_t, sin_t, h, slot, depth, pos, ctx, dims, want_kv):
    flat = jnp.maximum(pos.reshape(-1), 0)                              # [G*R] positions of the rows
    cos, sin = cos_t[flat], sin_t[flat]
    return layers.recurrent(params, kc, vc, cos, sin, h, slot, depth, pos, ctx, dims, want_kv)


@jax.jit
def _head(lm_head, h):
    return layers.mm(h, lm_head)                      # [rows, H] @ [H, V]


class JaxLoopedModel:
    def __init__(self, cfg: ModelConfig, weights: dict, mesh=None, norm_offset: float = 0.0, pad: bool = True):
        """weights: FP32 arrays by HF name (e.g. oracle's LoopedModel.weights); the early-exit
        gate is ignored. mesh: a jax.sharding.Mesh with axis "tp" (sharding.py) or None.
        pad: run tiny configs in the canonical padded layout (layout.py; exact zeros).
        norm_offset: a test seam only (1.0 = the wrong `1 + w` RMSNorm).
        The public API takes and returns true shapes: h [n, hidden], logits [n, vocab]."""
        self.cfg, self.mesh = cfg, mesh
        self.layout = lay = Layout.for_config(cfg, pad)
        self.dims = Dims(*lay.dims, float(cfg.rms_norm_eps), float(norm_offset))
        host = host_params(cfg, weights)
        self.embed_host = host["embed"]               # token lookup for the host-side round driver
        host = lay.pad_params(host)
        if mesh is None:
            self.params = jax.device_put(host)
        else:
            from .sharding import check_divisible, place_params
            check_divisible(lay, mesh)
            self.params = place_params(host, mesh)
        small = lay.H * lay.L <= 4096                 # tiny models: coarse buckets, few programs
        self.floors = {"groups": 16, "rows": 16, "ctx": 64, "head": 64} if small else \
            {"groups": 1, "rows": 1, "ctx": 16, "head": 1}
        self._rope_n = 0
        self._rope = None

    @classmethod
    def from_reference(cls, model, **kw) -> "JaxLoopedModel":
        return cls(model.cfg, model.weights, **kw)

    @classmethod
    def from_checkpoint(cls, folder, **kw) -> "JaxLoopedModel":
        cfg, weights = read_checkpoint(folder)
        return cls(cfg, weights, **kw)

    # ---- RoPE table (host FP64 angles, grown on demand) ----
    def rope(self, n: int):
        if n > self._rope_n:
            self._rope_n = pow2(n, 64)
            cos, sin = self.layout.rope(self._rope_n)
            self._rope = (jax.device_put(cos), jax.device_put(sin))
        return self._rope

    # ---- cache-free ----
    def forward_full(self, tokens, loops: int) -> list[np.ndarray]:
        """Logits [T, V] of every position after each of `loops` loops."""
        tokens = np.asarray(tokens, dtype=np.int32)
        self.check_tokens(tokens)
        T = len(tokens)
        Tb = pow2(T, 16)
        padded = np.zeros(Tb, np.int32)               # trailing padding: causal, so never attended
        padded[:T] = tokens
        cos, sin = self.layout.rope(Tb)
        out = np.asarray(_full(self.params, padded, cos, sin, loops, self.dims))
        return [out[j, :T, :self.cfg.vocab_size] for j in range(loops)]

    def check_tokens(self, tokens) -> None:
        tokens = np.asarray(tokens)
        bad = tokens[(tokens < 0) | (tokens >= self.cfg.vocab_size)]
        if bad.size:
            raise OracleError(f"token id {int(bad[0])} is outside the vocabulary [0, {self.cfg.vocab_size})")

    def embed(self, tokens) -> np.ndarray:
        self.check_tokens(tokens)
        return self.embed_host[np.asarray(tokens, dtype=np.int64)]       # [n, H]

    # ---- head ----
    def head(self, h: np.ndarray) -> np.ndarray:
        """h: [n, H] loop outputs -> logits [n, V]."""
        n = len(h)
        if n == 0:
            return np.zeros((0, self.cfg.vocab_size), np.float32)
        hb = np.zeros((pow2(n, self.floors["head"]), self.layout.H), np.float32)
        hb[:n, :self.cfg.hidden_size] = h
        return np.asarray(_head(self.params["lm_head"], hb))[:n, :self.cfg.vocab_size]

    # ---- recurrent call ----
    def recurrent(self, kv, rows, h: np.ndarray, want_kv: bool):
        """rows: [(slot, position, depth)]; h: [n, H] loop inputs. Runs one loop over the rows
        (KV planes in `kv`, a kvplanes.DeviceKV, updated in place). Returns (h_out [n, H],
        k_new, v_new [L, n, nkv, hd] or None)."""
        n = len(rows)
        assert h.shape == (n, self.cfg.hidden_size), (h.shape, n)
        groups: dict[tuple[int, int], list[int]] = {}
        for r, (slot, _, depth) in enumerate(rows):
            groups.setdefault((slot, depth), []).append(r)
        f = self.floors
        G, R = pow2(len(groups)), pow2(max(len(v) for v in groups.values()))
        big = G * R > f["groups"] * f["rows"]         # floors only where they cost nothing real
        if not big:                                   # small calls: G*R padded to the floor product
            G = max(G, f["groups"])
            R = max(R, f["groups"] * f["rows"] // G)
        slot = np.zeros(G, np.int32)
        depth = np.zeros(G, np.int32)
        pos = np.full((G, R), -1, np.int32)
        where = np.empty(n, np.int64)                 # row r sits at flat index where[r]
        for g, ((s, j), members) in enumerate(groups.items()):
            slot[g], depth[g] = s, j
            for r_in_g, r in enumerate(members):
                pos[g, r_in_g] = rows[r][1]
                where[r] = g * R + r_in_g
        hp = np.zeros((G * R, self.layout.H), np.float32)
        hp[where, :self.cfg.hidden_size] = h
        top = int(pos.max()) + 1
        ctx = min(kv.max_len, pow2(top, 16 if big else f["ctx"]))
        cos, sin = self.rope(kv.max_len)
        out = _recurrent(self.params, kv.k, kv.v, cos, sin, hp, slot, depth, pos,
                         ctx=ctx, dims=self.dims, want_kv=want_kv)
        h_out, kv.k, kv.v, k_new, v_new = out
        h_out = np.asarray(h_out)[where, :self.cfg.hidden_size]      # padded columns are exact zeros
        if not want_kv:
            return h_out, None, None
        L, unpad = self.cfg.num_layers, self.layout.unpad_kv
        return h_out, unpad(np.asarray(k_new)[:L, where]), unpad(np.asarray(v_new)[:L, where])
