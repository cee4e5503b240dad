"""The drift verdict's sensitivities on the device (docs/DESIGN.md, "Reduced precision"):
`make_stats_fn(model, dtype)` -> stats_fn(tokens, loops, obs) -> (b [P], G [P, P], values, bw [P]),
the same statistics as oracle.judge.probe.drift.request_stats, in JAX FP32 (Precision.HIGHEST), with J exact
(forward-mode derivatives of a knob-parametrised forward) instead of FP64 finite differences.

The forward `knob_forward(s, ...)` is oracle/judge/probe/drift_model.forward for one setting s [P] (one
whole sequence, causal, no KV cache; the math of LoopedModel.forward_full), with the scales
where drift_model puts them. Its outputs y(s) are every K/V write and every loop's logits.
With w the per-element weight of the observed values (oracle.judge.probe.drift's group normalisation
1 / (rms * GROWTH**depth)**2; 0 where nothing is observed or an entry is not finite):

    b  = J^T (w * e),   bw = J^T (w * e_w),   G = J^T (w * J)

One jax.linearize at s = 1 gives y(1) and the linear map ds -> J ds (jvp); its transpose
(jax.linear_transpose) is the map dy -> J^T dy (vjp). G is built CHUNK columns at a time,
G[:, c] = J^T (w * (J E_c)) with E_c a block of unit directions, and b, bw are two more rows
of the same batches (direction 0, cotangent w * e or w * e_w). Memory is the linearisation's
residuals plus one chunk's tangents (at ouro-1.4b, T = 64, 4 loops, CHUNK = 16: ~7 GiB of
temporaries besides the weights), never J itself; only b, G, bw and the value count come back.

Two forms keep J accurate in FP32 where the naive jvp cancels:
* a scale s of a branch that is linear up to an RMSNorm (v_proj and o_proj into the attention
  output norm, up_proj and down_proj into the MLP output norm) is applied there, as
  rms(s o) = o / sqrt(mean(o^2) + eps / s^2) (its effect is only through eps); the V write
  carries v_proj's scale itself;
* the RoPE base: cos(ang0 * s^-e) = cos0 cos(dl) - sin0 sin(dl), dl = ang0 (s^-e - 1), with
  cos0, sin0 from FP64 angles on the host (an FP32 angle at a large position is off by 1e-4).

The reference values c (e = got - c) are this FP32 forward's, where oracle.judge.probe.drift uses FP64:
they differ by ~1e-6 relative, far below a reduced-precision backend's errors; for an FP32
backend that is noise of the backend's own size (no bias: the verdict's spread absorbs it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from oracle.judge.probe import drift_model, knobs
from oracle.judge.probe.calibration import GROWTH

from .checkpoint import host_params

HIGHEST = jax.lax.Precision.HIGHEST
mm = partial(jnp.matmul, precision=HIGHEST)
einsum = partial(jnp.einsum, precision=HIGHEST)

CHUNK = 16  # directions per jvp / transpose batch (bounds memory at ouro-1.4b)
# On the CPU (tests, tiny / small presets) XLA's compile dominates: LLVM at -O0 halves it.
CPU_COMPILER_OPTIONS = {"xla_backend_optimization_level": "0"}
_PROGRAMS: dict = {}  # programs compiled with options: (name, Shape, chunk, device, options, Tb, loops) -> program
T_BUCKET = 64  # sequence lengths are padded up to a multiple of this (bounds recompiles)
NL = len(knobs.LAYER_PARAMS)
LP = {n: i for i, n in enumerate(knobs.LAYER_PARAMS)}  # column of a per-layer knob
GP = {n: i for i, n in enumerate(knobs.GLOBAL_PARAMS)}  # index of a global knob
KIND_LOGITS = ("draft", "verify")


@dataclass(frozen=True)
class Shape:
    """Static facts of a model (a jit static argument)."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float

    @property
    def P(self) -> int:
        return self.num_layers * NL + len(knobs.GLOBAL_PARAMS)


def _rms(x, w, eps):
    # x: [T, H]; w: [H]. The statistic in FP32, then times the weight (Ouro: no 1 + w)
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rms_scaled(x, s, w, eps):
    # rms(s * x) * w for a scalar s > 0, written so that d/ds has no cancellation: x: [T, H]
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps / (s * s)) * w


def _rope(x, cos, sin):
    # x: [T, heads, hd]; cos, sin: [T, hd] (non-interleaved rotate_half form)
    half = x.shape[-1] // 2
    rot = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def knob_forward(s, params, tokens, rope, loops: int, shape: Shape):
    """s: [P] knob factors (params() order: per layer the 11 LAYER_PARAMS, then the globals);
    tokens: [T] int32; rope: (cos0, sin0, ang0, expo) with cos0, sin0, ang0: [T, hd], expo: [hd].
    Returns {"k", "v": [loops, L, T, nkv*hd] (K after RoPE), "logits": [loops, T, V]}."""
    L, nh, nkv, hd, eps = shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.eps
    T = tokens.shape[0]
    sl = s[: L * NL].reshape(L, NL)  # sl: [L, 11]
    sg = s[L * NL :]  # sg: [4]
    cos0, sin0, ang0, expo = rope
    dl = ang0 * (sg[GP["rope_theta"]] ** (-expo) - 1.0)  # dl: [T, hd]; exactly 0 at s = 1
    cos = cos0 * jnp.cos(dl) - sin0 * jnp.sin(dl)
    sin = sin0 * jnp.cos(dl) + cos0 * jnp.sin(dl)
    causal = jnp.arange(T)[None, :] <= jnp.arange(T)[:, None]  # causal: [T(q), T(k)]
    grp = nh // nkv

    def layer(h, xs):
        lw, sc = xs  # h: [T, H]; sc: [11]
        x = _rms(h, lw["n_in"], eps) * sc[LP["input_layernorm"]]
        q = mm(x, lw["wq"]).reshape(T, nh, hd)
        k = (mm(x, lw["wk"]) * sc[LP["k_proj"]]).reshape(T, nkv, hd)
        v = mm(x, lw["wv"]).reshape(T, nkv, hd)  # v_proj's scale: below
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        qg = q.reshape(T, nkv, grp, hd)  # query head h uses kv head h // grp
        logit = einsum("qkjd,tkd->kjqt", qg, k) * (hd**-0.5 * sc[LP["attn_scale"]])  # [nkv, grp, T, T]
        prob = jax.nn.softmax(jnp.where(causal, logit, -jnp.inf), axis=-1)
        a = einsum("kjqt,tkd->qkjd", prob, v).reshape(T, nh * hd)  # a: [T, nh*hd]
        # o = o_proj(attention of v_proj's output): linear in both scales, into an RMSNorm
        o = mm(a, lw["wo"])
        h = h + _rms_scaled(o, sc[LP["o_proj"]] * sc[LP["v_proj"]], lw["n_attn_out"], eps) * sc[LP["input_layernorm_2"]]
        y = _rms(h, lw["n_post"], eps) * sc[LP["post_attention_layernorm"]]
        g = mm(y, lw["wg"]) * sc[LP["gate_proj"]]
        m = mm(jax.nn.silu(g) * mm(y, lw["wu"]), lw["wd"])  # m: [T, H]; linear in up and down scales
        h = (
            h
            + _rms_scaled(m, sc[LP["up_proj"]] * sc[LP["down_proj"]], lw["n_mlp_out"], eps)
            * sc[LP["post_attention_layernorm_2"]]
        )
        v = v * sc[LP["v_proj"]]  # the V write carries v_proj's scale
        return h, (k.reshape(T, nkv * hd), v.reshape(T, nkv * hd))

    def loop(h, _):  # one loop of the stack, then the head
        h, (k, v) = jax.lax.scan(layer, h, (params["layers"], sl))  # k, v: [L, T, nkv*hd]
        h = _rms(h, params["norm"], eps) * sg[GP["norm"]]
        return h, (k, v, mm(h, params["lm_head"]) * sg[GP["lm_head"]])  # logits: [T, V]

    h = params["embed"][tokens] * sg[GP["embed_tokens"]]  # h: [T, H]
    _, (k, v, logits) = jax.lax.scan(loop, h, None, length=loops)
    return {"k": k, "v": v, "logits": logits}


def _weights(got, pres, ref, ew, depth_of, growth):
    """One kind's per-element weights and its (w*e, w*ew) terms.
    got, ref, ew: [..., T, n]; pres: [..., T] (a vector observed); depth_of: the depth of each
    group, broadcastable to pres.shape[:-1]. A group is every index but T and n."""
    e = got - ref
    ok = pres[..., None] & jnp.isfinite(e) & jnp.isfinite(ew)  # ok: [..., T, n]
    csq = jnp.sum(jnp.where(ok, ref * ref, 0.0), axis=-1)  # ||c[ok]||^2: [..., T]
    items = jnp.sum(pres, axis=-1)  # observed vectors per group
    rms = jnp.sqrt(jnp.sum(csq, axis=-1) / jnp.maximum(items, 1))  # rms: [groups...]
    wg = 1.0 / jnp.maximum(rms * growth**depth_of, 1e-30) ** 2
    w = jnp.where(ok, wg[..., None, None], 0.0)  # w: [..., T, n]
    return w, jnp.where(ok, w * e, 0.0), jnp.where(ok, w * ew, 0.0), jnp.sum(ok)


@partial(jax.jit, static_argnames=("loops", "shape"))
def _forward(params, tokens, rope, loops, shape):
    """The forward at the reference setting (s = 1): the rounded weights' values."""
    return knob_forward(jnp.ones(shape.P, jnp.float32), params, tokens, rope, loops, shape)


@partial(jax.jit, static_argnames=("loops", "shape", "chunk"))
def _stats(params, tokens, rope, got, pres, rf, rounded, basis, loops, shape, chunk):
    """got: {"k", "v": [loops, L, T, n], "draft", "verify": [loops, T, V]} observed values (any
    value where not observed); pres: the same without the last axis (True: observed).
    rf: _forward with the weights rounded to the backend's dtype ({"k", "v", "logits"});
    rounded: False (float32) makes e_w = 0 (rf is then ignored).
    basis: [m, P] directions (the identity: every knob). Returns (b [P], basis G [m, P], bw [P],
    values)."""
    P = shape.P
    f = lambda s: knob_forward(s, params, tokens, rope, loops, shape)
    s1 = jnp.ones(P, jnp.float32)
    ref, f_jvp = jax.linearize(f, s1)  # ref: y(1); f_jvp: ds -> J ds
    f_vjp = jax.linear_transpose(f_jvp, s1)  # dy -> (J^T dy,)
    ew = jax.tree_util.tree_map(lambda a, c: jnp.where(rounded, a - c, 0.0), rf, ref)

    # per-element weights: K/V groups (kind, depth, layer), logits groups (kind, depth)
    depth = jnp.arange(loops, dtype=jnp.float32)  # [loops]
    W, WE, WEW, n = {}, {}, {}, 0
    for kind in ("k", "v"):
        W[kind], WE[kind], WEW[kind], c = _weights(got[kind], pres[kind], ref[kind], ew[kind], depth[:, None], GROWTH)
        n = n + c
    W["logits"] = WE["logits"] = WEW["logits"] = 0.0
    for kind in KIND_LOGITS:  # draft and verify: two observations of one reference value
        w, we, wew, c = _weights(got[kind], pres[kind], ref["logits"], ew["logits"], depth, GROWTH)
        W["logits"], WE["logits"], WEW["logits"], n = W["logits"] + w, WE["logits"] + we, WEW["logits"] + wew, n + c

    # P + 2 rows, `chunk` at a time: row i < P is G's column i, J^T W J e_i (its direction e_i);
    # row P is b = J^T (W e), row P + 1 is bw = J^T (W e_w) (direction 0, a fixed cotangent).
    # One jvp and one transpose in the program (compile time).
    m = basis.shape[0]
    nc = -(-(m + 2) // chunk)
    E = jnp.zeros((nc * chunk, P), jnp.float32).at[:m].set(basis)  # E: [rows, P]; rows >= m are 0
    sel = jnp.zeros((nc * chunk, 2), jnp.float32).at[m, 0].set(1.0).at[m + 1, 1].set(1.0)  # [rows, 2]

    def rows(xs):
        Ec, sc = xs  # Ec: [chunk, P]; sc: [chunk, 2]
        t = jax.vmap(f_jvp)(Ec)  # t: J Ec^T per output, [chunk, ...]

        def cot(t, w, we, wew):  # t: [chunk, ...]; w, we, wew: [...]
            a, c = (sc[:, i].reshape((-1,) + (1,) * w.ndim) for i in (0, 1))  # [chunk, 1, ...]
            return jnp.where(w > 0, t * w, 0.0) + a * we + c * wew  # 0 where unobserved (J may be NaN)

        return jax.vmap(f_vjp)(jax.tree_util.tree_map(cot, t, W, WE, WEW))[0]  # [chunk, P]

    out = jax.lax.map(rows, (E.reshape(nc, chunk, P), sel.reshape(nc, chunk, 2))).reshape(nc * chunk, P)
    return out[m], out[:m], out[m + 1], n  # b, basis @ G: [m, P], bw


def _rope_tables(T: int, head_dim: int, theta: float):
    """cos0, sin0, ang0: [T, hd] FP32 from FP64 angles; expo: [hd] (2i / hd, twice)."""
    e = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    ang = np.arange(T, dtype=np.float64)[:, None] / theta ** e[None, :]
    ang, e = np.concatenate([ang, ang], axis=1), np.concatenate([e, e])
    return tuple(np.asarray(a, np.float32) for a in (np.cos(ang), np.sin(ang), ang, e))


def _device_params(cfg, weights, device):
    host = host_params(cfg, weights)  # matrices [L, in, out], norms [L, H], lm_head [H, V]
    return jax.device_put(host, device)


def pack_observations(cfg, tokens, loops: int, obs: dict):
    """A request's observations as the device programs take them (stats_fn here, energy_fn in
    twin.py): (last, tok, got, pres). last: the last observed position + 1; tok: [Tb] int32, the
    tokens up to last, Tb = last padded up to a multiple of T_BUCKET (trailing padding: causal,
    never attended); got: {"k", "v": [loops, L, Tb, nkv*hd], "draft", "verify": [loops, Tb, V]}
    FP32, 0 where nothing is observed; pres: the same without the last axis (True: observed). A
    value of the wrong size is left out (malformed: the comparison fails it)."""
    last = max(k[1] for k in obs) + 1
    Tb = -(-last // T_BUCKET) * T_BUCKET
    tok = np.zeros(Tb, np.int32)
    tok[:last] = np.asarray(tokens[:last], np.int64)
    kvn = cfg.num_kv_heads * cfg.head_dim
    got = {kind: np.zeros((loops, cfg.num_layers, Tb, kvn), np.float32) for kind in ("k", "v")}
    got |= {kind: np.zeros((loops, Tb, cfg.vocab_size), np.float32) for kind in KIND_LOGITS}
    pres = {kind: np.zeros(a.shape[:-1], bool) for kind, a in got.items()}
    for key, val in obs.items():
        idx = (key[2], key[3], key[1]) if key[0] in ("k", "v") else (key[2], key[1])  # (depth[, layer], pos)
        val = np.asarray(val, np.float32).ravel()
        if val.size != got[key[0]][idx].size:
            continue
        got[key[0]][idx] = val
        pres[key[0]][idx] = True
    return last, tok, got, pres


def make_stats_fn(model, dtype: str = "float32", device=None, chunk: int = CHUNK, compiler_options=None, basis=None):
    """model: the oracle's LoopedModel (cfg + FP32 weights by HF name); dtype: the backend's
    storage dtype (bw: what rounding the weights to it alone changes; "float32": bw = 0).
    Returns stats_fn(tokens, loops, obs) -> (b [P], G [P, P], values, bw [P]) as
    oracle.judge.probe.drift.request_stats(model, tokens, loops, obs, dtype), computed on `device` (default:
    JAX's default device). compiler_options: XLA options of the two programs (default:
    CPU_COMPILER_OPTIONS on a CPU device, none elsewhere). One compile per (padded length, loops).
    basis: [m, P] directions with disjoint supports (rows of 0/1) to fit instead of every knob:
    m jvps instead of P; G is then exact on the span of the rows (oracle.judge.probe.knobs.coarse_directions).
    (Over 80 lines: a factory whose three closures share its programs and device parameters.)"""
    cfg = model.cfg
    shape = Shape(cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, float(cfg.rms_norm_eps))
    params = _device_params(cfg, model.weights, device)
    rounded = dtype != "float32"  # float32: e_w = 0 (one program for every dtype)
    rparams = (
        None
        if not rounded
        else _device_params(cfg, {k: drift_model.round_to(v, dtype) for k, v in model.weights.items()}, device)
    )
    C = np.eye(shape.P, dtype=np.float32) if basis is None else np.asarray(basis, np.float32)  # [m, P]
    platform = (device or jax.devices()[0]).platform
    if compiler_options is None:
        compiler_options = CPU_COMPILER_OPTIONS if platform == "cpu" else {}
    opt_key = tuple(sorted(compiler_options.items()))

    def call(fn, name, key, *args, **static):
        if not compiler_options:  # jit's own cache
            return fn(*args, **static)
        k = (name, shape, chunk, str(device), opt_key) + key
        if k not in _PROGRAMS:
            _PROGRAMS[k] = fn.lower(*args, **static).compile(compiler_options)
        return _PROGRAMS[k](*args)

    def stats_fn(tokens, loops, obs):
        _, tok, got, pres = pack_observations(cfg, tokens, loops, obs)
        Tb = len(tok)
        rope = _rope_tables(Tb, cfg.head_dim, cfg.rope_theta)
        put = lambda x: jax.device_put(x, device)
        tok, rope = put(tok), put(rope)
        if rounded:
            rf = call(_forward, "forward", (Tb, loops), rparams, tok, rope, loops=loops, shape=shape)
        else:  # placeholders of rf's shapes (e_w = 0)
            rf = {kind: put(np.zeros(got[kind].shape, np.float32)) for kind in ("k", "v")}
            rf["logits"] = put(np.zeros(got["draft"].shape, np.float32))
        b, CG, bw, n = call(
            _stats,
            "stats",
            (Tb, loops),
            params,
            tok,
            rope,
            put(got),
            put(pres),
            rf,
            rounded,
            put(C),
            loops=loops,
            shape=shape,
            chunk=chunk,
        )
        CG = np.asarray(CG, np.float64)  # [m, P]
        if basis is None:
            G = 0.5 * (CG + CG.T)
        else:  # G on span(C): C^T D^-1 (C G C^T) D^-1 C, D = C C^T (diagonal)
            Cd = C.astype(np.float64) / np.sum(C.astype(np.float64) ** 2, axis=1, keepdims=True)  # [m, P]
            inner = CG @ C.T.astype(np.float64)  # [m, m]
            G = Cd.T @ (0.5 * (inner + inner.T)) @ Cd
        return (np.asarray(b, np.float64), G, int(n), np.asarray(bw, np.float64))

    def reference(tokens, loops):
        """The FP32 forward at the reference setting (s = 1), on the host: {"k", "v": [loops, L, T,
        nkv, hd] (K after RoPE), "logits": [loops, T, V]} (tests and scripts)."""
        T = len(tokens)
        Tb = -(-T // T_BUCKET) * T_BUCKET
        tok = np.zeros(Tb, np.int32)
        tok[:T] = np.asarray(tokens, np.int64)
        y = call(
            _forward,
            "forward",
            (Tb, loops),
            params,
            jax.device_put(tok, device),
            jax.device_put(_rope_tables(Tb, cfg.head_dim, cfg.rope_theta), device),
            loops=loops,
            shape=shape,
        )
        out = {
            kind: np.asarray(y[kind])[:, :, :T].reshape(loops, cfg.num_layers, T, cfg.num_kv_heads, cfg.head_dim)
            for kind in ("k", "v")
        }
        out["logits"] = np.asarray(y["logits"])[:, :T]
        return out

    stats_fn.reference = reference
    return stats_fn
