"""The noise twin on the device (docs/DESIGN.md, "Reduced precision"): the precision verdict's
error-energy baseline where the judge's side is the JAX model (the ouro-1.4b shape on a GPU).

The twin is oracle/judge/probe/drift_model.forward's noise model: every weight and every stored
intermediate multiplied by (1 + sigma * u), u uniform with mean 0 and variance 1, sigma =
oracle.judge.probe.calibration.SIGMA[dtype], SAMPLES forwards per context, each its own draws (here from
JAX's threefry, seeded by the context; the NumPy twin draws PCG64 streams: the same
distribution, other values). What comes back is per value, never a twin's values:

    s2_v = mean over samples of ||twin_v - center_v||^2      (center: the FP32 forward, HIGHEST)
    r2_v = ||got_v - center_v||^2 / s2_v

and `make_energy_fn(model, dtype)` returns energy_fn(tokens, loops, obs) -> {group: (sum of r2_v,
values)} with groups as oracle.judge.probe.precision's: ("k" | "v", depth, layer), ("draft" | "verify", depth).
`make_twin_logits_fn(model, dtype)` returns the twin samples' logits of one context, which the
token rule's margin scales are made from where the judge's side is this model.
"""

from __future__ import annotations

import zlib
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np


from .drift import (
    KIND_LOGITS,
    T_BUCKET,
    Shape,
    _device_params,
    _rms,
    _rope,
    _rope_tables,
    einsum,
    mm,
    pack_observations,
)
from .programs import bucket
from oracle.judge.probe.calibration import SAMPLES, SEED, SIGMA

_PARAMS: list = []  # [((model, device), device parameters)]: the last model's, shared by both factories
SITES = 16  # stored intermediates per layer (keys folded per site)
AT = 16  # logits positions per twin_logits call (a round's offsets: K + 1 <= AT); one compile per length


def _params(model, device):
    """The model's parameters on device, one copy for the energy and logits twins (ouro-1.4b: 5.6 GB)."""
    if not _PARAMS or _PARAMS[0][0][0] is not model or _PARAMS[0][0][1] != device:
        _PARAMS[:] = [((model, device), _device_params(model.cfg, model.weights, device))]
    return _PARAMS[0][1]


def _noisy(x, key, sigma):
    """x * (1 + sigma * u), u uniform on [-sqrt 3, sqrt 3)."""
    u = jax.random.uniform(key, x.shape, jnp.float32, -(3**0.5), 3**0.5)
    return x * (1.0 + sigma * u)


def twin_forward(params, tokens, cos, sin, loops: int, shape: Shape, key, sigma=None, at=None):
    """One forward of the model over tokens [T] (causal, no KV cache), with sigma > 0 a noise twin
    sample drawn from key (sigma None: the FP32 forward). Returns {"k", "v": [loops, L, T, nkv*hd],
    "logits": [loops, T, V]}; at: positions [P] to take the logits at ([loops, P, V]; None: all)."""
    L, nh, nkv, hd, eps = shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.eps
    T = tokens.shape[0]
    wkey, ikey = jax.random.split(key)
    rn = (lambda x, k: _noisy(x, k, sigma)) if sigma is not None else (lambda x, k: x)
    gkeys = jax.random.split(jax.random.fold_in(wkey, L), 5)
    embed, norm, lm_head = (rn(params[n], k) for n, k in zip(("embed", "norm", "lm_head"), gkeys[:3]))
    cos, sin = rn(cos, gkeys[3]), rn(sin, gkeys[4])
    causal = jnp.arange(T)[None, :] <= jnp.arange(T)[:, None]  # causal: [T(q), T(k)]
    grp = nh // nkv

    def layer(h, xs):
        lw, l, j = xs  # h: [T, H]; l: layer index; j: loop
        lk = jax.random.split(jax.random.fold_in(wkey, l), len(lw))  # the same weights in every loop
        lw = {n: rn(w, k) for (n, w), k in zip(sorted(lw.items()), lk)}
        sk = jax.random.split(jax.random.fold_in(jax.random.fold_in(ikey, j), l), SITES)
        x = rn(_rms(h, lw["n_in"], eps), sk[0])
        q = rn(mm(x, lw["wq"]), sk[1]).reshape(T, nh, hd)
        k = rn(mm(x, lw["wk"]), sk[2]).reshape(T, nkv, hd)
        v = rn(mm(x, lw["wv"]), sk[3]).reshape(T, nkv, hd)
        q, k = rn(_rope(q, cos, sin), sk[4]), rn(_rope(k, cos, sin), sk[5])
        qg = q.reshape(T, nkv, grp, hd)
        logit = einsum("qkjd,tkd->kjqt", qg, k) * hd**-0.5  # [nkv, grp, T, T]
        prob = rn(jax.nn.softmax(jnp.where(causal, logit, -jnp.inf), axis=-1), sk[6])
        a = rn(einsum("kjqt,tkd->qkjd", prob, v).reshape(T, nh * hd), sk[7])
        o = rn(mm(a, lw["wo"]), sk[8])
        h = rn(h + rn(_rms(o, lw["n_attn_out"], eps), sk[9]), sk[10])
        y = rn(_rms(h, lw["n_post"], eps), sk[11])
        g, u = rn(mm(y, lw["wg"]), sk[12]), rn(mm(y, lw["wu"]), sk[13])
        m = rn(mm(rn(jax.nn.silu(g) * u, sk[14]), lw["wd"]), sk[15])
        h = rn(h + rn(_rms(m, lw["n_mlp_out"], eps), jax.random.fold_in(sk[15], 1)), jax.random.fold_in(sk[15], 2))
        return h, (k.reshape(T, nkv * hd), v.reshape(T, nkv * hd))

    def loop(h, j):
        h, (k, v) = jax.lax.scan(layer, h, (params["layers"], jnp.arange(L), jnp.full(L, j)))
        hk = jax.random.fold_in(jax.random.fold_in(ikey, j), L)
        h = rn(_rms(h, norm, eps), jax.random.fold_in(hk, 0))
        return h, (k, v, rn(mm(h if at is None else h[at], lm_head), jax.random.fold_in(hk, 1)))

    h = rn(embed[tokens], jax.random.fold_in(ikey, 1 << 20))
    _, (k, v, logits) = jax.lax.scan(loop, h, jnp.arange(loops))
    return {"k": k, "v": v, "logits": logits}


@partial(jax.jit, static_argnames=("loops", "shape", "samples"))
def _energies(params, tokens, cos, sin, got, pres, key, sigma, loops, shape, samples):
    """Per group, the sum of r2_v over observed values and their count: ({"k", "v": [loops, L],
    "draft", "verify": [loops]} sums, the same counts)."""
    center = twin_forward(params, tokens, cos, sin, loops, shape, key)

    def sq(a, c):  # ||a - c||^2 over the last axis
        return jnp.sum(jnp.square(a - c), axis=-1)

    def one(acc, k):
        y = twin_forward(params, tokens, cos, sin, loops, shape, k, sigma)
        return {n: acc[n] + sq(y[n], center[n]) for n in acc}, None

    zero = {
        "k": jnp.zeros(center["k"].shape[:-1]),
        "v": jnp.zeros(center["v"].shape[:-1]),
        "logits": jnp.zeros(center["logits"].shape[:-1]),
    }
    s2, _ = jax.lax.scan(one, zero, jax.random.split(key, samples))
    s2 = {n: a / samples for n, a in s2.items()}
    sums, counts = {}, {}
    for kind in ("k", "v") + KIND_LOGITS:
        ref, s = (center[kind], s2[kind]) if kind in ("k", "v") else (center["logits"], s2["logits"])
        e = jnp.where(jnp.isfinite(ref), got[kind] - ref, 0.0)  # where the reference is -inf too: 0
        e2 = jnp.sum(jnp.where(jnp.isfinite(e), e * e, jnp.inf), axis=-1)  # a non-finite value: infinite energy
        ok = pres[kind] & (s > 0)
        r2 = jnp.where(ok, e2 / jnp.where(ok, s, 1.0), 0.0)
        sums[kind], counts[kind] = jnp.sum(r2, axis=-1), jnp.sum(ok, axis=-1)
    return sums, counts


def make_energy_fn(model, dtype: str, device=None, samples: int = SAMPLES):
    """energy_fn(tokens, loops, obs) -> {group: (sum r2, values)} for a backend declaring dtype
    (oracle.judge.probe.calibration.SIGMA), on `device` (default: JAX's default device)."""
    cfg = model.cfg
    shape = Shape(cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, float(cfg.rms_norm_eps))
    params = _params(model, device)
    sigma = float(SIGMA[dtype])

    def energy_fn(tokens, loops, obs):
        last, tok, got, pres = pack_observations(cfg, tokens, loops, obs)
        cos0, sin0, _, _ = _rope_tables(len(tok), cfg.head_dim, cfg.rope_theta)
        seed = zlib.crc32(np.asarray(tokens[:last], np.int64).tobytes()) ^ (SEED & 0x7FFFFFFF)
        put = lambda x: jax.device_put(x, device)
        sums, counts = _energies(
            params,
            put(tok),
            put(cos0),
            put(sin0),
            put(got),
            put(pres),
            jax.random.PRNGKey(seed),
            sigma,
            loops=loops,
            shape=shape,
            samples=samples,
        )
        out = {}
        for kind in ("k", "v") + KIND_LOGITS:
            s, n = np.asarray(sums[kind], np.float64), np.asarray(counts[kind])
            for idx in zip(*np.nonzero(n)):
                out[(kind,) + tuple(int(i) for i in idx)] = (float(s[idx]), int(n[idx]))
        return out

    return energy_fn


@partial(jax.jit, static_argnames=("loops", "shape", "samples"))
def _twin_logits(params, tokens, cos, sin, at, key, sigma, loops, shape, samples):
    """The twin samples' logits at positions at [AT]: [samples, loops, AT, V]."""

    def one(_, k):
        return None, twin_forward(params, tokens, cos, sin, loops, shape, k, sigma, at=at)["logits"]

    return jax.lax.scan(one, None, jax.random.split(key, samples))[1]


def make_twin_logits_fn(model, dtype: str, device=None, samples: int = SAMPLES):
    """twin_logits(tokens, loops, positions) -> [samples, loops, len(positions), V] FP32: the noise
    twin's logits of the context `tokens` at those positions, each loop (the token rule's margin
    scales where the judge's side is this model: oracle/judge/probe/noise.py Bounds.twin_logits).
    The noise is seeded by the context, as energy_fn's; lengths are padded to a power of two
    (at least T_BUCKET; trailing padding is never attended), so few lengths compile."""
    cfg = model.cfg
    shape = Shape(cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, float(cfg.rms_norm_eps))
    params = _params(model, device)
    sigma = float(SIGMA[dtype])
    put = lambda x: jax.device_put(x, device)

    def twin_logits(tokens, loops: int, positions):
        T = len(tokens)
        pos = [int(p) for p in positions]
        if not pos or len(pos) > AT or min(pos) < 0 or max(pos) >= T:
            raise ValueError(f"twin_logits: positions {pos} must be 1..{AT} positions of a context of {T} tokens")
        tok = np.zeros(bucket(T, 1, T_BUCKET), np.int32)
        tok[:T] = np.asarray(tokens, np.int64)
        at = np.asarray(pos + [pos[-1]] * (AT - len(pos)), np.int32)
        cos0, sin0, _, _ = _rope_tables(len(tok), cfg.head_dim, cfg.rope_theta)
        seed = zlib.crc32(np.asarray(tokens, np.int64).tobytes()) ^ (SEED & 0x7FFFFFFF)
        args = (params, *map(put, (tok, cos0, sin0, at)), jax.random.PRNGKey(seed), sigma)
        out = _twin_logits(*args, loops=loops, shape=shape, samples=samples)
        return np.asarray(out, np.float32)[:, :, : len(pos)]

    return twin_logits
