"""The looped (Ouro) model in NumPy FP32 (docs/DESIGN.md section 2).

One entry point does the work of both rounds: `recurrent_call(rows, h, kv, call)` runs one
loop of the layer stack over an arbitrary list of rows (request, position, depth) at mixed
depths. Every row is computed on its own, with 1-D matrix-vector products, so a row's
result does not depend on which rows share its call (batch-invariant by construction).
`forward_full` is a second, cache-free path through the same math (full-sequence matmuls).
The tensors by HF name come first: their shapes for a config, seeded random weights (the
presets), and the check every weight set passes (LoopedModel runs it; so does
oracle/checkpoint.py on a file's tensors). Where a model comes from (a preset or a
checkpoint) is oracle/checkpoint.py `build_model`.
"""

from __future__ import annotations

import numpy as np

from .errors import OracleError

F32 = np.float32


# ---- the tensors of an Ouro checkpoint by HF name (cfg: an oracle.config.ModelConfig) ----


def weight_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """Every tensor of an Ouro checkpoint, by HF name (weights are [out, in])."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    shapes = {
        "model.embed_tokens.weight": (V, H),
        "model.norm.weight": (H,),
        "lm_head.weight": (V, H),
        "model.early_exit_gate.weight": (1, H),
        "model.early_exit_gate.bias": (1,),
    }
    for l in range(cfg.num_layers):
        p = f"model.layers.{l}."
        shapes |= {
            p + "self_attn.q_proj.weight": (q, H),
            p + "self_attn.k_proj.weight": (kv, H),
            p + "self_attn.v_proj.weight": (kv, H),
            p + "self_attn.o_proj.weight": (H, q),
            p + "mlp.gate_proj.weight": (I, H),
            p + "mlp.up_proj.weight": (I, H),
            p + "mlp.down_proj.weight": (H, I),
            p + "input_layernorm.weight": (H,),
            p + "input_layernorm_2.weight": (H,),
            p + "post_attention_layernorm.weight": (H,),
            p + "post_attention_layernorm_2.weight": (H,),
        }
    return shapes


OPTIONAL = ("model.early_exit_gate.weight", "model.early_exit_gate.bias")  # rounds ignore the gate


def random_weights(cfg, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random weights with logits spread enough that sampling is not uniform."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(cfg).items():
        if name.endswith("layernorm_2.weight"):  # branch-output norms: small, so that
            w = 0.3 * (1.0 + 0.1 * rng.standard_normal(shape, dtype=F32))  # drafts often pass
        elif name.endswith("norm.weight") or "layernorm" in name:
            w = 1.0 + 0.1 * rng.standard_normal(shape, dtype=F32)
        elif name == "model.embed_tokens.weight":
            w = rng.standard_normal(shape, dtype=F32)
        elif name == "model.early_exit_gate.bias":
            w = np.zeros(shape, F32)
        elif name == "lm_head.weight":
            w = rng.standard_normal(shape, dtype=F32) * F32(2.0 / np.sqrt(shape[1]))
        else:
            w = rng.standard_normal(shape, dtype=F32) * F32(1.0 / np.sqrt(shape[1]))
        out[name] = np.ascontiguousarray(w, dtype=F32)
    return out


def check_weights(cfg, weights: dict[str, np.ndarray]) -> None:
    for name, shape in weight_shapes(cfg).items():
        if name not in weights:
            if name in OPTIONAL:
                continue
            raise OracleError(f"checkpoint is missing tensor {name} (expected shape {list(shape)})")
        got = tuple(weights[name].shape)
        if got != shape:
            raise OracleError(f"tensor {name} has shape {list(got)}, expected {list(shape)}")
        if not np.all(np.isfinite(weights[name])):
            raise OracleError(f"tensor {name} holds NaN or inf values")


# ---- the math ----


def rope_cos_sin(positions, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin: [n, head_dim] for the non-interleaved rotate_half form (computed in FP64)."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang).astype(F32), np.sin(ang).astype(F32)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    # x: [..., H]; FP32 statistic, then times the weight (no 1 + w). The mean is np.mean's own
    # (an FP32 pairwise sum, divided by H in FP64 and rounded: the same as FP32 division), without
    # its Python overhead: this is the reference's most called function.
    x = x.astype(F32, copy=False)
    mean_sq = np.add.reduce(x * x, axis=-1, keepdims=True) / F32(x.shape[-1])
    return (x * (1.0 / np.sqrt(mean_sq + F32(eps))).astype(F32)) * w


def rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (F32(1.0) + np.exp(-x))


class Layer:
    __slots__ = ("q", "k", "v", "o", "gate", "up", "down", "n_in", "n_attn_out", "n_post", "n_mlp_out")

    def __init__(self, w: dict, l: int):
        p = f"model.layers.{l}."
        self.q, self.k = w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"]
        self.v, self.o = w[p + "self_attn.v_proj.weight"], w[p + "self_attn.o_proj.weight"]
        self.gate, self.up = w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]
        self.down = w[p + "mlp.down_proj.weight"]
        self.n_in, self.n_attn_out = w[p + "input_layernorm.weight"], w[p + "input_layernorm_2.weight"]
        self.n_post = w[p + "post_attention_layernorm.weight"]
        self.n_mlp_out = w[p + "post_attention_layernorm_2.weight"]


class LoopedModel:
    def __init__(self, cfg, weights: dict[str, np.ndarray]):
        """cfg: an oracle.config.ModelConfig; weights: FP32 tensors by HF name (check_weights)."""
        check_weights(cfg, weights)
        self.cfg = cfg
        self.weights = {k: np.ascontiguousarray(v, dtype=F32) for k, v in weights.items()}
        w = self.weights
        self.embed_w, self.norm_w, self.lm_head = (
            w["model.embed_tokens.weight"],
            w["model.norm.weight"],
            w["lm_head.weight"],
        )
        self.layers = [Layer(w, l) for l in range(cfg.num_layers)]

    # ---- row machinery (the reference) ----
    def embed(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        bad = tokens[(tokens < 0) | (tokens >= self.cfg.vocab_size)]
        if bad.size:
            raise OracleError(f"token id {int(bad[0])} is outside the vocabulary [0, {self.cfg.vocab_size})")
        return self.embed_w[tokens].copy()  # [n, H]

    def recurrent_call(self, rows, h: np.ndarray, kv, call: int) -> np.ndarray:
        """rows: [(request, position, depth)]; h: [n, H] each row's loop input.
        Runs one loop of the stack (then the shared final norm) and writes each row's
        K/V into plane (request, depth, layer) of kv (an oracle.kv.KVCache). Returns the
        loop outputs [n, H]."""
        cfg = self.cfg
        nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        assert h.shape == (len(rows), cfg.hidden_size), (h.shape, len(rows))
        cos, sin = rope_cos_sin([r[1] for r in rows], hd, cfg.rope_theta)  # [n, hd]
        eps, n = cfg.rms_norm_eps, len(rows)
        if n == 0:
            return np.zeros((0, cfg.hidden_size), F32)
        h = np.array(h, dtype=F32)  # [n, H]
        # Products are one matrix-vector product per row (`rowwise`: a row's bits never depend on
        # the call's other rows); norms, RoPE and SiLU work on all rows at once, element by element
        # (or per row along the last axis), which gives each row the bits it has alone.
        for l, L in enumerate(self.layers):
            x = rms_norm(h, L.n_in, eps)  # [n, H]
            q = rowwise(L.q, x).reshape(n, nh, hd)
            k = rowwise(L.k, x).reshape(n, nkv, hd)
            v = rowwise(L.v, x).reshape(n, nkv, hd)
            q = q * cos[:, None] + rotate_half(q) * sin[:, None]  # [n, nh, hd]
            k = k * cos[:, None] + rotate_half(k) * sin[:, None]
            for r, (req, pos, depth) in enumerate(rows):  # KV writes
                kv.write(req, pos, depth, l, k[r], v[r], call)
            # attention: row r reads the keys of its own plane up to its position
            a = np.stack([attend(q[r], *kv.read(req, depth, l, pos)) for r, (req, pos, depth) in enumerate(rows)])
            x = h + rms_norm(rowwise(L.o, a), L.n_attn_out, eps)  # [n, H]
            y = rms_norm(x, L.n_post, eps)
            m = rowwise(L.down, silu(rowwise(L.gate, y)) * rowwise(L.up, y))  # [n, H]
            h = x + rms_norm(m, L.n_mlp_out, eps)
        return rms_norm(h, self.norm_w, eps)

    def head(self, h: np.ndarray) -> np.ndarray:
        """h: [n, H] loop outputs (already normed) -> logits [n, V], row by row."""
        h = np.asarray(h, dtype=F32)
        return rowwise(self.lm_head, h) if len(h) else np.zeros((0, self.cfg.vocab_size), F32)

    # ---- second path: full sequence, no KV cache, batched matmuls ----
    def forward_full(self, tokens, loops: int, past=None, keep: bool = False):
        """Logits [T, V] of every position after each of `loops` loops, computed from tokens
        alone (no KV cache). past: the keys/values of P earlier positions, as returned by a
        forward of those positions with keep=True; `tokens` then stand at positions P..P+T-1
        and also attend to them (a prefix is computed once, never taken from a cache).
        keep=True: returns (logits, kv) with kv[loop][layer] = (K, V) [P+T, nkv, hd]."""
        cfg = self.cfg
        nh, nkv, hd, eps = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps
        T = len(tokens)
        P = 0 if past is None else len(past[0][0][0])
        assert past is None or len(past) >= loops, "past holds fewer loops than asked for"
        cos, sin = rope_cos_sin(np.arange(P, P + T), hd, cfg.rope_theta)  # [T, hd]
        mask = np.triu(np.full((T, P + T), -np.inf, F32), k=P + 1)  # [T, P+T]
        h = self.embed(tokens)
        out, kv = [], []
        for j in range(loops):
            kv.append([])
            for l, L in enumerate(self.layers):
                x = rms_norm(h, L.n_in, eps)
                q = (x @ L.q.T).reshape(T, nh, hd)
                k = (x @ L.k.T).reshape(T, nkv, hd)
                v = (x @ L.v.T).reshape(T, nkv, hd)
                q = q * cos[:, None] + rotate_half(q) * sin[:, None]
                k = k * cos[:, None] + rotate_half(k) * sin[:, None]
                if past is not None:  # [P+T, nkv, hd]
                    k, v = np.concatenate([past[j][l][0], k]), np.concatenate([past[j][l][1], v])
                kv[j].append((k, v))
                k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
                s = np.einsum("qhd,khd->hqk", q, k) * F32(hd**-0.5) + mask
                p = np.exp(s - s.max(-1, keepdims=True))
                p /= p.sum(-1, keepdims=True)
                a = np.einsum("hqk,khd->qhd", p, v).reshape(T, nh * hd)
                h = h + rms_norm(a @ L.o.T, L.n_attn_out, eps)
                y = rms_norm(h, L.n_post, eps)
                h = h + rms_norm((silu(y @ L.gate.T) * (y @ L.up.T)) @ L.down.T, L.n_mlp_out, eps)
            h = rms_norm(h, self.norm_w, eps)
            out.append(h @ self.lm_head.T)
        return (out, kv) if keep else out


def rowwise(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """W: [out, in]; x: [n, in] -> [n, out], one matrix-vector product per row. numpy's matmul
    over a stack of [in, 1] columns calls BLAS gemv once per row, exactly as `W @ x[r]` does, and
    never a matrix-matrix product, so a row's bits do not depend on n."""
    return np.matmul(W, x[:, :, None])[:, :, 0]


def attend(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """One query row. q: [nh, hd]; K, V: [n, nkv, hd] -> [nh*hd]. Head hh reads K/V head
    hh // group; each head's scores and output are matrix-vector products (gemv, as `rowwise`)."""
    nh, hd = q.shape
    nkv = K.shape[1]
    qg = q.reshape(nkv, nh // nkv, hd, 1)  # [nkv, group, hd, 1]
    Kt, Vt = K.transpose(1, 0, 2)[:, None], V.transpose(1, 0, 2)[:, None]  # [nkv, 1, n, hd]
    s = np.matmul(Kt, qg).reshape(nh, -1) * F32(hd**-0.5)  # [nh, n]
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)  # per head, as a vector alone
    return np.matmul(p.reshape(nkv, nh // nkv, 1, -1), Vt).reshape(nh * hd)  # [nh*hd]
