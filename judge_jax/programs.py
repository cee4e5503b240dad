"""The judge's jit-compiled programs (judge_jax/model.py JaxLoopedModel runs them): the
cache-free forward (`_full`), one recurrent call over rows at mixed depths (`_call`), a head
over pool rows (`_head`), the K/V of rows (`_kv_rows`) and a call with its K/V rows in one
program (`_call_rows`); and the bucketing of their shapes (`pow2`, `bucket`)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from . import layers


def pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(0, int(n) - 1).bit_length())


def bucket(n: int, bits: int, floor: int = 1) -> int:
    """n rounded up to `bits` significant bits (bits=1: a power of two), at least floor."""
    n = max(int(n), floor, 1)
    step = 1 << max(0, n.bit_length() - bits)
    return -(-n // step) * step


@partial(jax.jit, static_argnames=("loops", "dims"))
def _full(params, tokens, cos, sin, loops, dims):
    return layers.full_forward(params, tokens, cos, sin, loops, dims)


@partial(jax.jit, static_argnames=("groups", "ctx", "dims"), donate_argnames=("kc", "vc", "pool"))
def _call(params, kc, vc, pool, cos_t, sin_t, idx, groups, ctx, dims):
    """idx: int32 [2G + 4n] = slot [G], depth [G], then per row (n = G*R) pos (-1: padding),
    src (pool row of its input; -1: the embedding of tok), tok, dst (pool row of its output;
    past the pool: dropped)."""
    G = groups
    n = (idx.shape[0] - 2 * G) // 4
    slot, depth = idx[:G], idx[G : 2 * G]
    pos, src, tok, dst = idx[2 * G :].reshape(4, n)
    h = jnp.where((src >= 0)[:, None], pool[jnp.maximum(src, 0)], params["embed"][tok])
    flat = jnp.maximum(pos, 0)
    h, kc, vc = layers.recurrent(
        params, kc, vc, cos_t[flat], sin_t[flat], h, slot, depth, pos.reshape(G, n // G), ctx, dims
    )
    return kc, vc, pool.at[dst].set(h, mode="drop")


@partial(jax.jit, static_argnames="dims")
def _head(lm_head, pool, src, dims=None):
    # [rows, H] @ [H, V] at HIGHEST; with dims (dot="rows"): 2..128 rows through the kernel of few rows
    return layers.wmm(dims)(pool[src], lm_head)


@jax.jit
def _kv_rows(kc, vc, idx):
    """idx: int32 [3, n] = slot, depth, pos -> K and V of those rows, row-major: [2, n, L, nkv, hd]
    (so the host can cut it into per-(row, layer) views without a copy)."""
    slot, depth, pos = idx
    return jnp.stack([kc[:, depth, slot, pos], vc[:, depth, slot, pos]]).transpose(0, 2, 1, 3, 4)


@partial(jax.jit, static_argnames=("groups", "m", "ctx", "dims"), donate_argnames=("kc", "vc", "pool"))
def _call_rows(params, kc, vc, pool, cos_t, sin_t, idx, groups, m, ctx, dims):
    """_call, then _kv_rows of the rows it wrote, in one program and one upload: idx = _call's
    [2G + 4m] then _kv_rows' [3, n] flattened. -> (kc, vc, pool, K/V rows [2, n, L, nkv, hd])."""
    cut = 2 * groups + 4 * m
    kc, vc, pool = _call(params, kc, vc, pool, cos_t, sin_t, idx[:cut], groups, ctx, dims)
    return kc, vc, pool, _kv_rows(kc, vc, idx[cut:].reshape(3, -1))
