"""The model with knobs: the Ouro forward of oracle/model.py over one whole sequence, in FP64,
for a batch of B parameter settings at once (docs/DESIGN.md, "Reduced precision").

A setting multiplies each knob (oracle/judge/probe/knobs.py: params) by a factor (1 = the
reference): an attention logit scale, the RoPE base, a norm's weight or a projection's output, per
layer, and the embedding, final norm and lm_head. `forward(model, tokens, loops, scales)` returns every K/V
write and every loop's logits for every setting; the drift fit takes finite differences of it
(oracle/judge/probe/drift.py). With `noise=(rng, sigma)` every stored intermediate and every weight is also
multiplied by (1 + sigma * u), u uniform with mean 0 and variance 1 (a rounding's relative error
is uniform), independently per setting: the noise twin that calibrates
what a correct reduced-precision implementation may differ by (oracle/judge/probe/noise.py).

Same math as LoopedModel.forward_full (tests/test_drift.py holds them equal at scales 1).
"""

from __future__ import annotations

import numpy as np

from .knobs import params


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to the nearest value of a storage dtype ("bfloat16": ties to even, "float16",
    "float32"), returned as FP32."""
    x = np.ascontiguousarray(x, np.float32)
    if dtype == "bfloat16":  # on the bits: add half an ULP (less one, plus the kept lowest bit: ties to even), cut
        u = x.view(np.uint32)
        r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        return r.view(np.float32)
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    return x.copy()


class Rounded:
    """A model whose weights are stored in `dtype` (what a correct engine of that precision
    multiplies by); the weights only, for forward()."""

    def __init__(self, model, dtype: str):
        self.cfg = model.cfg
        self.weights = {k: round_to(v, dtype) for k, v in model.weights.items()}


def _weights(model, precision=np.float64) -> dict:
    """The model's weights in `precision`, kept on the model (one copy per precision)."""
    caches = getattr(model, "_drift_weights", None)
    if caches is None:
        caches = {}
        try:
            model._drift_weights = caches
        except AttributeError:  # a model with __slots__: recompute each time
            pass
    key = np.dtype(precision).name
    if key not in caches:
        caches[key] = {k: np.asarray(v, precision) for k, v in model.weights.items()}
    return caches[key]


def _rms(x, w, eps):
    # x: [B, T, H]; w: [B, 1, H] or [H]
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x, cos, sin):
    # x: [B, T, heads, hd]; cos, sin: [B, T, hd]
    half = x.shape[-1] // 2
    sin = sin[:, :, None]
    out = x * cos[:, :, None]  # + rotate_half(x) * sin, a half at a time
    out[..., :half] -= x[..., half:] * sin[..., :half]
    out[..., half:] += x[..., :half] * sin[..., half:]
    return out


def unit_uniform(rng, shape) -> np.ndarray:
    """FP32 draws uniform on [-sqrt 3, sqrt 3): mean 0, variance 1."""
    z = rng.random(shape, dtype=np.float32)
    z -= np.float32(0.5)
    z *= np.float32(2 * 3**0.5)
    return z


class _Tape:
    """One stream's draws u (uniform on [-sqrt 3, sqrt 3): mean 0, variance 1; uniform draws cost a
    fifth of normal ones on the CPUs measured) for the stored intermediates, taken in blocks of at least 1 << 16
    (a block too short for the next intermediate is dropped and a new one drawn)."""

    __slots__ = ("rng", "z", "i")

    def __init__(self, rng):
        self.rng, self.z, self.i = rng, np.zeros(0, np.float32), 0

    def take(self, n: int) -> np.ndarray:
        if self.i + n > self.z.size:
            self.z, self.i = unit_uniform(self.rng, max(1 << 16, n)), 0
        self.i += n
        return self.z[self.i - n : self.i]


def rows(fw, r0: int, r1: int, n: int) -> dict:
    """Rows r0:r1 of a batched forward, positions below n: what forward over them alone gives."""
    return {
        "k": [[x[r0:r1, :n] for x in layer] for layer in fw["k"]],
        "v": [[x[r0:r1, :n] for x in layer] for layer in fw["v"]],
        "logits": [x[r0:r1, :n] for x in fw["logits"]],
    }


def _rows_tokens(tokens, B: int):
    """(tok [T] shared by every row, or [B, T] right-padded with 0; lengths [B])."""
    if len(tokens) and np.ndim(tokens[0]) > 0:  # one sequence per row
        assert len(tokens) == B, (len(tokens), B)
        lengths = np.array([len(t) for t in tokens], np.int64)
        tok = np.zeros((B, int(lengths.max())), np.int64)
        for r, t in enumerate(tokens):
            tok[r, : len(t)] = t
        return tok, lengths
    tok = np.asarray(tokens, np.int64)
    return tok, np.full(B, len(tok), np.int64)


def forward(model, tokens, loops: int, scales: np.ndarray, noise=None, precision=np.float64) -> dict:
    """tokens: [T] ids (every row), or B sequences of ids, one per row of scales (ragged: a row is
    right-padded to the longest; causal attention keeps a row's positions below its length
    exactly what forward over that row alone gives, and those past it are meaningless);
    scales: [B, len(params(L))] factors. Returns {"k": [loop][layer] [B, T, nkv, hd] (after
    RoPE), "v": same, "logits": [loop] [B, T, V]} in `precision` (FP64 unless told; the RoPE
    angles are FP64 either way).

    noise: (rng, sigma), one stream for every row; or (rngs, sigma), a list of G streams: the rows
    are G equal consecutive blocks (rows of one block share a length), and block g gets exactly
    the draws forward(model, its tokens, loops, its scales, noise=(rngs[g], sigma)) would, so a
    batch of noise twins equals the twins run one by one.
    (Over 80 lines: the whole forward, layer by layer, in one place: the spec the twin and the
    finite differences share.)"""
    cfg = model.cfg
    names = params(cfg.num_layers)
    scales = np.asarray(scales, precision)
    B = scales.shape[0]
    tok, lengths = _rows_tokens(tokens, B)
    T = tok.shape[-1]
    assert scales.shape[1] == len(names), (scales.shape, len(names))
    nh, nkv, hd, eps = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps
    col = {n: i for i, n in enumerate(names)}
    s = lambda name, layer=None: scales[:, col[(name, layer)]][:, None, None]  # [B, 1, 1]
    rngs, sigma = noise if noise is not None else (None, 0.0)
    rng = rngs
    blocks = []  # (tape, first row, end row, length)
    if rngs is not None:
        rngs = list(rngs) if isinstance(rngs, (list, tuple)) else [rngs]
        nb = B // len(rngs)
        assert nb * len(rngs) == B, (B, len(rngs))
        for g, r in enumerate(rngs):
            n = lengths[g * nb : (g + 1) * nb]
            assert (n == n[0]).all(), "the rows of one noise stream must share a length"
            blocks.append((_Tape(r), g * nb, (g + 1) * nb, int(n[0])))
    whole = len(blocks) == 1 and blocks[0][3] == T
    sig32 = np.float32(sigma)

    def rn(x, taxes=(1,)):  # a stored intermediate, rounded (twin) or not
        if rng is None:
            return x
        if whole:  # one stream, no padding
            f = np.multiply(blocks[0][0].take(x.size).reshape(x.shape), sig32)
        else:
            f = np.zeros(x.shape, np.float32)
            for tape, r0, r1, n in blocks:
                idx = [slice(r0, r1)] + [slice(None)] * (x.ndim - 1)
                for a in taxes:  # the position axes: the block's own length
                    idx[a] = slice(0, n)
                idx = tuple(idx)
                shape = f[idx].shape
                np.multiply(tape.take(int(np.prod(shape))).reshape(shape), sig32, out=f[idx])
        f += np.float32(1.0)  # 1 + sigma * z in FP32, as x * (1.0 + sigma * z)
        return np.multiply(x, f, out=x) if x.dtype == precision and x.flags.owndata and x.flags.writeable else x * f

    w = _weights(model, precision)
    if rng is not None:  # per stream: every weight's draws, in order, then the tape
        z = {k: [] for k in w}
        for tape, r0, r1, _ in blocks:
            for k, v in w.items():
                z[k].append(unit_uniform(tape.rng, (r1 - r0,) + v.shape))
        w = {k: v * (1.0 + sigma * (z[k][0] if len(blocks) == 1 else np.concatenate(z[k]))) for k, v in w.items()}

    def mm(x, name):  # x: [B, T, in] @ w[name].T -> [B, T, out]
        m = w[name]
        if rng is None:
            return (x.reshape(-1, x.shape[-1]) @ m.T).reshape(x.shape[:-1] + (m.shape[0],))
        return np.matmul(x, m.transpose(0, 2, 1))

    def nw(name):  # a norm weight, broadcast to [B or 1, 1, H]
        return w[name][None, None] if rng is None else w[name][:, None]

    theta = cfg.rope_theta * scales[:, col[("rope_theta", None)]].astype(np.float64)  # [B]; angles in FP64
    inv = 1.0 / theta[:, None] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)[None]  # [B, hd/2]
    ang = np.arange(T, dtype=np.float64)[None, :, None] * inv[:, None, :]  # [B, T, hd/2]
    ang = np.concatenate([ang, ang], axis=-1)
    cos, sin = rn(np.cos(ang).astype(precision)), rn(np.sin(ang).astype(precision))
    mask = np.triu(np.full((T, T), -np.inf, precision), k=1)
    emb = w["model.embed_tokens.weight"]
    if rng is None:
        e = emb[tok] if tok.ndim == 2 else emb[tok][None]
    else:
        e = emb[np.arange(B)[:, None], tok] if tok.ndim == 2 else emb[:, tok]
    h = rn(e * s("embed_tokens"))  # h: [B, T, H]
    out = {"k": [], "v": [], "logits": []}
    for j in range(loops):
        out["k"].append([]), out["v"].append([])
        for l in range(cfg.num_layers):
            p = f"model.layers.{l}."
            x = rn(_rms(h, nw(p + "input_layernorm.weight") * s("input_layernorm", l), eps))
            q = rn(mm(x, p + "self_attn.q_proj.weight")).reshape(B, T, nh, hd)
            k = rn(mm(x, p + "self_attn.k_proj.weight") * s("k_proj", l)).reshape(B, T, nkv, hd)
            v = rn(mm(x, p + "self_attn.v_proj.weight") * s("v_proj", l)).reshape(B, T, nkv, hd)
            q, k = rn(_rope(q, cos, sin)), rn(_rope(k, cos, sin))
            out["k"][j].append(k), out["v"][j].append(v)
            kk, vv = (k, v) if nh == nkv else (np.repeat(k, nh // nkv, axis=2), np.repeat(v, nh // nkv, axis=2))
            qt = (q * ((hd**-0.5) * s("attn_scale", l)[..., None])).transpose(0, 2, 1, 3)  # the logit scale, on q
            prob = qt @ kk.transpose(0, 2, 3, 1)  # logits: [B, nh, T, T]
            prob += mask
            prob -= prob.max(-1, keepdims=True)
            np.exp(prob, out=prob)  # exp(-inf) = 0 above the diagonal
            prob /= prob.sum(-1, keepdims=True)
            prob = rn(prob, (2, 3))
            a = rn((prob @ vv.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3).reshape(B, T, nh * hd))
            o = rn(mm(a, p + "self_attn.o_proj.weight") * s("o_proj", l))
            h = rn(h + rn(_rms(o, nw(p + "input_layernorm_2.weight") * s("input_layernorm_2", l), eps)))
            y = rn(_rms(h, nw(p + "post_attention_layernorm.weight") * s("post_attention_layernorm", l), eps))
            g = rn(mm(y, p + "mlp.gate_proj.weight") * s("gate_proj", l))
            u = rn(mm(y, p + "mlp.up_proj.weight") * s("up_proj", l))
            act = np.exp(-g)  # SiLU(g) * u: g / (1 + e^-g) * u
            act += 1.0
            np.divide(g, act, out=act)
            act *= u
            m = rn(mm(rn(act), p + "mlp.down_proj.weight") * s("down_proj", l))
            h = rn(
                h + rn(_rms(m, nw(p + "post_attention_layernorm_2.weight") * s("post_attention_layernorm_2", l), eps))
            )
        h = rn(_rms(h, nw("model.norm.weight") * s("norm"), eps))
        out["logits"].append(rn(mm(h, "lm_head.weight") * s("lm_head")))
    return out
