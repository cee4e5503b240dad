"""The Ouro layer math in JAX, FP32 (docs/DESIGN.md section 2), as pure functions.

Weights are stored [in, out] so a row vector multiplies from the left, either one buffer per
layer and matrix (params["layers"]: a list of per-layer dicts; the layer loops are unrolled,
so no program slices a stacked weight array and the KV planes are indexed by a static
layer) or stacked over layers (a dict of [L, ...] arrays; the loops are scans). A per-layer
dict may hold q/k/v as one [H, q+2kv] matrix "wqkv" and gate/up as one [H, 2I] matrix "wgu"
(model.py merges them when unsharded: fewer, wider products).

Precision: with dot="highest" every matmul runs in true FP32 (Precision.HIGHEST), the XLA
attention too; "rows" (the default on one GPU) takes products of 2..128 rows through the Pallas
kernel of few rows (skinny.py, FP32 multiply-adds); the Pallas attention multiplies few query rows
in FP32 and from PLANES_TILE's dot_rows with TF32x3 (dot_x3). No TF32 / bf16 single passes.
`Dims.dot` may name a multi-pass algorithm for the weight products instead (DOT_ALGORITHMS:
"tf32x3", three TF32 tensor-core products of the split operands, FP32 accumulation; the
default with a mesh). On the H200 (scripts/gpu_judge_profile.py, docs/results/judge_profile_h200.json)
one [32, 2048] x [2048, 5632] product was 1.5e-7 off an FP64 product with tf32x3 and 4.1e-7 at
HIGHEST, and the judge with tf32x3 was within 3e-6 of the NumPy reference at ouro-1.4b
(scripts/gpu_judge_crosscheck.py; the 1e-5 of tests/test_jax_model.py). CPU XLA has no such
algorithm: there the products stay at HIGHEST whatever `dot` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import skinny

HIGHEST = jax.lax.Precision.HIGHEST
mm = partial(jnp.matmul, precision=HIGHEST)
einsum = partial(jnp.einsum, precision=HIGHEST)
DOT_ALGORITHMS = {
    "highest": HIGHEST,
    "tf32x3": jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3,
    "bf16x6": jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X6,
}


# "rows": a call's products of 2..SKINNY_ROWS rows through the Pallas kernel of few rows
# (skinny.skinny_mm, FP32 multiply-adds), the others at HIGHEST (measured on the H200 at ouro-1.4b,
# docs/results.md "The JAX judge on the H200": half XLA's time at 4-16 rows, a third less at 32-64,
# 0.88x at 128 with its own tiling; XLA's HIGHEST GEMV fastest at one row)
DOTS = (*DOT_ALGORITHMS, "rows")
SKINNY_ROWS = 128


class Stacked(NamedTuple):
    """Layer l (a traced int32 inside a scan) of a stacked [L, in, out] weight, not sliced: the
    kernel of few rows reads it in place; an XLA product takes W[l]."""

    W: object
    l: object


def wmm(dims: "Dims | None"):
    """The weight product of `dims.dot`: (x [M, in], w [in, out] or Stacked) -> [M, out] (HIGHEST
    without dims, and on a CPU backend for the dot algorithms; "rows" runs interpreted there)."""
    dot = "highest" if dims is None else dims.dot
    prec = HIGHEST if dot in ("highest", "rows") or jax.default_backend() == "cpu" else DOT_ALGORITHMS[dot]

    def product(x, w):
        W, l = w if isinstance(w, Stacked) else (w, 0)
        if dot == "rows" and 2 <= x.shape[0] <= SKINNY_ROWS and skinny.fits(*W.shape[-2:]):
            return skinny.skinny_mm(x, W, l)
        return jnp.matmul(x, W if W.ndim == 2 else W[l], precision=prec)

    return product


@dataclass(frozen=True)
class Dims:
    """Static shape facts of a model (hashable: a jit static argument)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float
    norm_offset: float = 0.0  # test seam: 1.0 applies norm weights as (1 + w), which is WRONG for Ouro
    dot: str = "highest"  # the weight products' algorithm (DOTS); attention stays HIGHEST
    attn: str = "xla"  # recurrent attention: "xla" (gather the planes, einsum) or "pallas" (attend_planes
    # where planes_fit, else the einsum)
    attn_tile: tuple = ()  # attend_planes' tiling, PLANES_TILE's items (() = planes_tile() when traced)


def rms_norm(x, w, dims: Dims, c):
    # x: [..., H] FP32; the statistic in FP32, then times the weight (Ouro: no 1 + w).
    # c["hidden"]: the model's true H (padding columns hold exact zeros, layout.py)
    r = jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) / c["hidden"] + jnp.float32(dims.eps))
    return (x * r) * (w + jnp.float32(dims.norm_offset))


def rope_table(n: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin: [n, head_dim] for positions 0..n-1, angles in FP64 on the host (an FP32 angle
    at position 2000 is off by ~1e-4 rad, far past the FP32 tolerance), then cast to FP32."""
    exponent = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    freq = np.power(float(theta), -exponent)  # [hd/2]
    ang = np.arange(n, dtype=np.float64)[:, None] * freq[None, :]  # [n, hd/2]
    ang = np.concatenate([ang, ang], axis=1)  # rotate_half pairs i, i+hd/2
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def apply_rope(x, cos, sin):
    # x: [rows, heads, hd]; cos, sin: [rows, hd] (non-interleaved rotate_half form)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def mlp(y, lw, dims: "Dims | None" = None):
    # y: [rows, H] -> [rows, H]; SwiGLU: down(silu(gate y) * up y)
    mw = wmm(dims)
    if "wgu" in lw:  # gate and up as one product
        g, u = jnp.split(mw(y, lw["wgu"]), 2, axis=-1)
    else:
        g, u = mw(y, lw["wg"]), mw(y, lw["wu"])
    return mw(jax.nn.silu(g) * u, lw["wd"])


def qkv(x, lw, cos, sin, dims: Dims):
    # x: [rows, H] (already normed) -> q: [rows, nh, hd], k, v: [rows, nkv, hd]; RoPE on q, k
    n, mw = x.shape[0], wmm(dims)
    nq, nk = dims.num_heads * dims.head_dim, dims.num_kv_heads * dims.head_dim
    if "wqkv" in lw:  # q, k, v as one product
        y = mw(x, lw["wqkv"])
        q, k, v = y[:, :nq], y[:, nq : nq + nk], y[:, nq + nk :]
    else:
        q, k, v = mw(x, lw["wq"]), mw(x, lw["wk"]), mw(x, lw["wv"])
    q = q.reshape(n, dims.num_heads, dims.head_dim)
    k = k.reshape(n, dims.num_kv_heads, dims.head_dim)
    v = v.reshape(n, dims.num_kv_heads, dims.head_dim)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def attend(q, K, V, allowed, dims: Dims, c):
    """Grouped-query attention of row groups over their own keys.
    q: [G, R, nh, hd]; K, V: [G, T, nkv, hd]; allowed: [G, R, T] bool -> [G, R, nh*hd]."""
    G, R = q.shape[:2]
    grp = dims.num_heads // dims.num_kv_heads  # query head h uses kv head h // grp
    qg = q.reshape(G, R, dims.num_kv_heads, grp, dims.head_dim)
    s = einsum("grkjd,gtkd->grkjt", qg, K) * c["scale"]  # true head_dim ** -0.5
    s = jnp.where(allowed[:, :, None, None, :], s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    o = einsum("grkjt,gtkd->grkjd", p, V)
    return o.reshape(G, R, dims.num_heads * dims.head_dim)


# The Pallas attention's tiling (attend_planes). A (group, kv head)'s query rows below dot_rows
# take broadcast multiply-sums (keys per step bt, programs: the keys of a plane are split over
# programs until G * nkv * splits reaches this, warps and pipeline stages per program); from
# dot_rows they take tl.dot products (rows padded to 16; dot_* the same four), with dot_x3=1 (the
# default) TF32x3 (three TF32 tensor-core products, FP32 accumulation), with 0 FP32 "ieee" (CUDA-core
# FMAs; H200, 2026-12-03, `gpu_run.sh split2`: TF32x3 took the block round's device time from 77.2 to
# 73.9 ms; `gpu_judge_crosscheck.py --judges rows/scan/auto/dot_x3=1 --rows-bits 3` within 2.75e-6
# of the NumPy reference, 4.14e-6 cache-free; on a CPU the interpreter runs FP32). A call whose
# rows per (group, kv head), padded, exceed max_rows (prefill chunks) keeps the XLA einsum.
# Measured on the H200 (docs/results.md, "The JAX judge on the H200"). JUDGE_JAX_PLANES_TILE=
# "bt=32,dot_bt=32" overrides (read when a JaxLoopedModel is made).
PLANES_TILE = {
    "bt": 16,
    "programs": 2048,
    "warps": 2,
    "stages": 3,
    "dot_rows": 4,
    "dot_bt": 64,
    "dot_programs": 1024,
    "dot_warps": 4,
    "dot_stages": 2,
    "dot_x3": 1,
    "max_rows": 16,
}


def planes_tile() -> dict:
    import os

    tile = dict(PLANES_TILE)
    for item in filter(None, os.environ.get("JUDGE_JAX_PLANES_TILE", "").split(",")):
        k, _, v = item.partition("=")
        if k not in tile or not v.isdigit():
            raise ValueError(f"JUDGE_JAX_PLANES_TILE: {item!r} is not KEY=INT with KEY one of {', '.join(tile)}")
        tile[k] = int(v)
    return tile


def _query_rows(R: int, dims: Dims, tile: dict) -> tuple[int, bool]:
    """(query rows per (group, kv head) as attend_planes pads them, whether they take tl.dot)."""
    Rp = R * (dims.num_heads // dims.num_kv_heads)
    use_dot = Rp >= tile["dot_rows"]
    return max(16 if use_dot else 1, 1 << (Rp - 1).bit_length()), use_dot  # Triton: powers of two


def planes_fit(R: int, dims: Dims) -> bool:
    """Whether attend_planes takes a call of R rows per group: its padded query rows within
    max_rows, and (compiled, not interpreted) a head_dim Triton takes (a power of two, >= 16
    for tl.dot)."""
    tile = dict(dims.attn_tile) or planes_tile()
    Mq, use_dot = _query_rows(R, dims, tile)
    hd, interpreted = dims.head_dim, jax.default_backend() == "cpu"  # the interpreter takes any shape
    return Mq <= tile["max_rows"] and (interpreted or (hd & (hd - 1) == 0 and (hd >= 16 or not use_dot)))


def attend_planes(kc, vc, l, q, depth, slot, pos, ctx: int, dims: Dims, scale, tile: dict | None = None):
    """attend() over the cache planes in place: a Pallas (Triton) kernel streams keys 0..ctx-1
    of plane kc[l, depth[g], slot[g]] (no gathered copy of the planes), a program per (group,
    kv head, split of the keys), online softmax in FP32, the splits combined after. Products:
    FP32 multiply-adds on the CUDA cores (broadcast multiply-sums for few query rows, else
    tl.dot, TF32x3 with PLANES_TILE's dot_x3, else "ieee"). l: the layer (an int, or a traced
    int32 inside a scan over the layers). q: [G, R, nh, hd]; pos: [G, R] (-1: a padding row,
    which sees key 0 only, as in recurrent) -> [G, R, nh*hd]. On a CPU backend it runs
    interpreted. tile: PLANES_TILE items over dims.attn_tile (else planes_tile()).
    (Over 80 lines: one Pallas kernel, its online-softmax step and its launch, which share the planes' index maps.)"""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    tile = {**(dict(dims.attn_tile) or planes_tile()), **(tile or {})}
    dot = getattr(plgpu, "dot", None) or pl.dot  # jax >= 0.10: pallas.triton.dot
    G, R = q.shape[:2]
    nkv, grp, hd = dims.num_kv_heads, dims.num_heads // dims.num_kv_heads, dims.head_dim
    Rp = R * grp  # a (group, kv head)'s query rows
    Mq, use_dot = _query_rows(R, dims, tile)
    pre = "dot_" if use_dot else ""
    BT, warps, stages = tile[pre + "bt"], tile[pre + "warps"], tile[pre + "stages"]
    nblk = -(-ctx // BT)
    splits = max(1, min(nblk, -(-tile[pre + "programs"] // (G * nkv))))
    per = -(-nblk // splits)  # key blocks per split
    splits = -(-nblk // per)  # none empty
    qg = (q * scale).reshape(G, R, nkv, grp, hd).transpose(0, 2, 1, 3, 4).reshape(G, nkv, Rp, hd)
    posg = jnp.repeat(pos, grp, axis=1)  # [G, Rp]
    if Mq > Rp:  # padding query rows: zeros, seeing key 0 only; dropped below
        qg = jnp.pad(qg, ((0, 0), (0, 0), (0, Mq - Rp), (0, 0)))
        posg = jnp.pad(posg, ((0, 0), (0, Mq - Rp)), constant_values=-1)
    lidx = jnp.asarray(l, jnp.int32).reshape(1)
    interpret = jax.default_backend() == "cpu"  # CPU XLA has no TF32x3: FP32 there, as wmm
    hi = jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3 if tile["dot_x3"] and not interpret else HIGHEST

    def kernel(l_ref, depth_ref, slot_ref, pos_ref, q_ref, kc_ref, vc_ref, o_ref, m_ref, d_ref):
        g, k, sp = pl.program_id(0), pl.program_id(1), pl.program_id(2)
        li, d, s = l_ref[0], depth_ref[g], slot_ref[g]
        qq, pp = q_ref[...], pos_ref[...]  # [Mq, hd], [Mq]
        first = sp * (per * BT)

        def step(i, carry):
            m, den, acc = carry
            t0 = first + i * BT
            t = t0 + jnp.arange(BT)
            valid = t < ctx
            kb = plgpu.load(kc_ref.at[li, d, s, pl.ds(t0, BT), k, :], mask=valid[:, None], other=0.0)
            if use_dot:
                sc = dot(qq, kb, trans_b=True, precision=hi)  # [Mq, BT]
            else:
                sc = jnp.sum(qq[:, None, :] * kb[None, :, :], axis=2)
            ok = ((t[None, :] <= pp[:, None]) | (t[None, :] == 0)) & valid[None, :]
            sc = jnp.where(ok, sc, -jnp.inf)
            mn = jnp.maximum(m, jnp.max(sc, axis=1))
            base = jnp.where(mn == -jnp.inf, 0.0, mn)  # a row with no key yet in this split: p = 0
            p = jnp.exp(sc - base[:, None])
            alpha = jnp.exp(m - base)
            vb = plgpu.load(vc_ref.at[li, d, s, pl.ds(t0, BT), k, :], mask=valid[:, None], other=0.0)
            if use_dot:
                pv = dot(p, vb, precision=hi)  # [Mq, hd]
            else:
                pv = jnp.sum(p[:, :, None] * vb[None, :, :], axis=1)
            return mn, den * alpha + jnp.sum(p, axis=1), acc * alpha[:, None] + pv

        init = (jnp.full((Mq,), -jnp.inf, jnp.float32), jnp.zeros((Mq,), jnp.float32), jnp.zeros((Mq, hd), jnp.float32))
        m, den, acc = jax.lax.fori_loop(0, per, step, init)
        o_ref[...], m_ref[...], d_ref[...] = acc, m, den

    whole = lambda shape: pl.BlockSpec(shape, lambda g, k, sp: (0,) * len(shape))  # noqa: E731
    part = lambda *blk: pl.BlockSpec((None, None, None, *blk), lambda g, k, sp: (g, k, sp) + (0,) * len(blk))  # noqa: E731
    o, m, den = pl.pallas_call(
        kernel,
        grid=(G, nkv, splits),
        in_specs=[
            whole((1,)),
            whole((G,)),
            whole((G,)),
            pl.BlockSpec((None, Mq), lambda g, k, sp: (g, 0)),
            pl.BlockSpec((None, None, Mq, hd), lambda g, k, sp: (g, k, 0, 0)),
            pl.no_block_spec,
            pl.no_block_spec,
        ],
        out_specs=[part(Mq, hd), part(Mq), part(Mq)],
        out_shape=[
            jax.ShapeDtypeStruct((G, nkv, splits, Mq, hd), jnp.float32),
            jax.ShapeDtypeStruct((G, nkv, splits, Mq), jnp.float32),
            jax.ShapeDtypeStruct((G, nkv, splits, Mq), jnp.float32),
        ],
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=warps, num_stages=stages),
    )(lidx, depth, slot, posg, qg, kc, vc)
    w = jnp.exp(m - jnp.max(m, axis=2, keepdims=True))  # every row sees key 0: the max is finite
    o = jnp.sum(w[..., None] * o, axis=2) / jnp.sum(w * den, axis=2)[..., None]  # [G, nkv, Mq, hd]
    o = o[:, :, :Rp]
    return o.reshape(G, nkv, R, grp, hd).transpose(0, 2, 1, 3, 4).reshape(G, R, dims.num_heads * hd)


def block_out(h, a, lw, dims: Dims, c):
    """The rest of a sandwich layer after attention: h: [rows, H], a: [rows, nh*hd]."""
    h = h + rms_norm(wmm(dims)(a, lw["wo"]), lw["n_attn_out"], dims, c)
    y = rms_norm(h, lw["n_post"], dims, c)
    return h + rms_norm(mlp(y, lw, dims), lw["n_mlp_out"], dims, c)


def full_forward(params, tokens, cos, sin, loops: int, dims: Dims):
    """Cache-free: tokens [T] -> logits [loops, T, V], the head after every loop.
    Causal attention over the whole sequence; one loop's normed output feeds the next."""
    T, c = tokens.shape[0], params["consts"]
    h = params["embed"][tokens]  # [T, H]
    allowed = (jnp.arange(T)[None, :] <= jnp.arange(T)[:, None])[None]  # [1, T, T]

    def layer(h, lw):
        q, k, v = qkv(rms_norm(h, lw["n_in"], dims, c), lw, cos, sin, dims)
        a = attend(q[None], k[None], v[None], allowed, dims, c)[0]
        return block_out(h, a, lw, dims, c)

    out = []
    for _ in range(loops):
        if isinstance(params["layers"], dict):  # stacked [L, ...]: a scan
            h, _ = jax.lax.scan(lambda h, lw: (layer(h, lw), None), h, params["layers"])
        for lw in () if isinstance(params["layers"], dict) else params["layers"]:
            h = layer(h, lw)
        h = rms_norm(h, params["norm"], dims, c)
        out.append(mm(h, params["lm_head"]))
    return jnp.stack(out)


def recurrent(params, kc, vc, cos, sin, h, slot, depth, pos, ctx: int, dims: Dims):
    """One loop of the stack over row groups; a group is the rows of one (slot, depth) plane.
    kc, vc: [L, P, S, N, nkv, hd] (P depth planes, S slots, N positions);
    h: [G*R, H]; slot, depth: [G]; pos: [G, R] (-1 = padding row); cos, sin: [G*R, hd].
    Each layer writes every row's K/V into its plane, then each row attends to its plane's
    positions <= its own (so later rows of one group see earlier rows of the same call).
    Returns (h_out [G*R, H] after the final norm, kc, vc)."""
    G, R = pos.shape
    N, c = kc.shape[3], params["consts"]
    wpos = jnp.where(pos >= 0, pos, N).reshape(-1)  # padding writes are dropped
    wslot, wdepth = jnp.repeat(slot, R), jnp.repeat(depth, R)
    t = jnp.arange(ctx)
    allowed = t[None, None, :] <= pos[:, :, None]  # [G, R, ctx]; pad rows: none
    allowed = allowed | (t == 0)[None, None, :]  # pad rows see key 0: no NaN
    planes = dims.attn == "pallas" and planes_fit(R, dims)  # else (prefill chunks) the einsum

    def layer(h, kc, vc, lw, l):
        q, k, v = qkv(rms_norm(h, lw["n_in"], dims, c), lw, cos, sin, dims)
        kc = kc.at[l, wdepth, wslot, wpos].set(k, mode="drop")
        vc = vc.at[l, wdepth, wslot, wpos].set(v, mode="drop")
        if planes:  # the planes read in place
            a = attend_planes(
                kc, vc, l, q.reshape(G, R, *q.shape[1:]), depth, slot, pos, ctx, dims, c["scale"]
            ).reshape(G * R, -1)
        else:
            K = kc[l, depth, slot, :ctx]  # [G, ctx, nkv, hd]: one plane each
            V = vc[l, depth, slot, :ctx]
            a = attend(q.reshape(G, R, *q.shape[1:]), K, V, allowed, dims, c).reshape(G * R, -1)
        return block_out(h, a, lw, dims, c), kc, vc

    if isinstance(params["layers"], dict) and dims.dot == "rows":  # a scan; the kernel reads W[l] in place
        st = params["layers"]

        def body(carry, l):
            lw = {k: Stacked(v, l) if v.ndim == 3 else v[l] for k, v in st.items()}
            return layer(*carry, lw, l), None

        (h, kc, vc), _ = jax.lax.scan(body, (h, kc, vc), jnp.arange(kc.shape[0]))
    elif isinstance(params["layers"], dict):  # stacked [L, ...]: a scan
        (h, kc, vc), _ = jax.lax.scan(
            lambda carry, xs: (layer(*carry, *xs), None), (h, kc, vc), (params["layers"], jnp.arange(kc.shape[0]))
        )
    else:  # unrolled: static buffers and layer
        for l, lw in enumerate(params["layers"]):
            h, kc, vc = layer(h, kc, vc, lw, l)
    return rms_norm(h, params["norm"], dims, c), kc, vc
