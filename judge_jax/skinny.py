"""Weight products of few rows as a Pallas (Triton) kernel: y = x @ w[l], FP32 in and out.

The judge's recurrent calls multiply 1-128 rows by FP32 weights of 16-92 MB; XLA's products
there run far below the memory bandwidth (2026-12-01 on the H200: the 24 layers' products at 16
rows 4.54 ms at HIGHEST, 4.63 ms at TF32x3, against a 1.03 ms floor). This kernel streams the
weight once at full width: a program per (tile of bn output columns, split of the K dimension),
each looping over its split in bk-deep steps with tl.dot on the rows padded to 16, TF32x3 (three
TF32 tensor-core products, FP32 accumulation) or FP32 multiply-adds ("ieee"); the splits' partial
sums are added after, in FP32. The weight may be stacked [L, K, N] and indexed by a traced layer
(inside a scan over the layers) without a sliced copy.

On a CPU backend it runs interpreted (slow; tests only), products at HIGHEST.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# bn output columns per program; bk: the K step; programs: the (column tile, K split) programs a
# call aims at (the K splits fill it up); warps, stages: Triton's; x3: TF32x3 products (0: FP32
# multiply-adds, "ieee"). The best of 24 tilings at 16 rows on the H200 (scripts/gpu_skinny_mm.py,
# 2026-12-03): bn 128, bk 32, 1056 programs, 3 stages; FP32 took 2.56 ms where TF32x3 took 3.48.
SKINNY_TILE = {"bn": 128, "bk": 32, "programs": 1056, "warps": 4, "stages": 3, "x3": 0, "split": 1}
# rows padded to 128: the best of 24 tilings there (scripts/gpu_skinny_mm.py --sweep-rows 128,
# 2026-12-03): bn 64, 528 programs, 8 warps, FP32: 9.26 ms against XLA HIGHEST's 10.54
SKINNY_TILE_128 = {**SKINNY_TILE, "bn": 64, "programs": 528, "warps": 8}


def tile_for(m: int, split: int = 1) -> dict:
    """The measured tiling for m rows: the 128-row one where the largest row block is 128 rows, else
    the 16-row one (H200, 2026-12-03, `gpu_run.sh split`: 80 rows as 64 + 16 took 6.77 ms with it,
    7.73 ms with the 128-row tiling, 9.12 ms padded to 128; 96 rows as 64 + 32 8.51 / 8.71 / 9.21 ms)."""
    return SKINNY_TILE_128 if row_blocks(m, split)[0] > 64 else SKINNY_TILE


def _width(n: int, most: int) -> int:
    """The largest power of two <= most dividing n, or 0 below 16 (tl.dot's least)."""
    w = most
    while w >= 16 and n % w:
        w //= 2
    return w if w >= 16 else 0


def fits(k: int, n: int, tile: dict | None = None) -> bool:
    """Whether a [k, n] weight takes the kernel: both divide by a power of two >= 16."""
    t = {**SKINNY_TILE, **(tile or {})}
    return bool(_width(n, t["bn"]) and _width(k, t["bk"]))


def padded_rows(m: int) -> int:
    """Rows as the kernel pads them: a power of two, at least 16 (tl.dot's minimum)."""
    return max(16, 1 << (m - 1).bit_length())


def row_blocks(m: int, split: int = 1) -> tuple[int, ...]:
    """The row blocks of an m-row product, each a power of two >= 16 (Triton's shapes), largest
    first. split=1: m rounded up to 16 and cut into its binary parts (80 -> 64 + 16; the weight tile
    read once feeds each block's tl.dot), so past 64 rows the FP32 multiply-adds run on 16-row
    steps rather than on the rows padded to 128; split=0: one block of padded_rows(m)."""
    assert m >= 1, m
    if not split:
        return (padded_rows(m),)
    m16 = -(-m // 16) * 16
    return tuple(b for b in (1 << i for i in range(m16.bit_length() - 1, 3, -1)) if m16 & b)


def k_splits(k_blocks: int, n_tiles: int, programs: int) -> int:
    """The largest divisor of k_blocks with n_tiles * splits <= max(programs, n_tiles): every
    split the same number of K steps."""
    want = max(1, programs // n_tiles)
    return max(s for s in range(1, min(k_blocks, want) + 1) if k_blocks % s == 0)


def skinny_mm(x, w, l=0, tile: dict | None = None):
    """x: [M, K] FP32; w: [K, N] or stacked [L, K, N] (then layer l: an int or a traced int32)
    -> [M, N] FP32. K and N must take a power of two >= 16 (fits); bn and bk narrow to divide them."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    over = tile or {}
    t = {**tile_for(x.shape[0], over.get("split", SKINNY_TILE["split"])), **over}
    W = w if w.ndim == 3 else w[None]
    _, K, N = W.shape
    M = x.shape[0]
    bn, bk = _width(N, t["bn"]), _width(K, t["bk"])  # narrower where the weight needs it
    assert x.shape[1] == K and bn and bk, (x.shape, W.shape, t)
    blocks, n_tiles = row_blocks(M, t["split"]), N // bn
    starts = [sum(blocks[:i]) for i in range(len(blocks))]
    splits = k_splits(K // bk, n_tiles, t["programs"])
    per = K // bk // splits  # K steps per program
    xp = jnp.pad(x, ((0, sum(blocks) - M), (0, 0)))  # x: [sum(blocks), K], cut into the blocks below
    xs = [xp[s : s + b] for s, b in zip(starts, blocks)]  # each [b, K]
    lidx = jnp.asarray(l, jnp.int32).reshape(1)
    interpret = jax.default_backend() == "cpu"
    hi = jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3 if t["x3"] and not interpret else jax.lax.Precision.HIGHEST
    dot = getattr(plgpu, "dot", None) or pl.dot
    nb = len(blocks)

    def kernel(l_ref, *refs):
        x_refs, w_ref, o_refs = refs[:nb], refs[nb], refs[nb + 1 :]
        n, sp = pl.program_id(0), pl.program_id(1)
        li, k_first = l_ref[0], sp * (per * bk)

        def step(i, accs):
            k0 = k_first + i * bk
            wb = plgpu.load(w_ref.at[li, pl.ds(k0, bk), pl.ds(n * bn, bn)])  # [bk, bn], read once for every block
            return tuple(
                acc + dot(plgpu.load(x_ref.at[:, pl.ds(k0, bk)]), wb, precision=hi)  # [b, bk] x [bk, bn]
                for acc, x_ref in zip(accs, x_refs)
            )

        accs = jax.lax.fori_loop(0, per, step, tuple(jnp.zeros((b, bn), jnp.float32) for b in blocks))
        for o_ref, acc in zip(o_refs, accs):
            o_ref[...] = acc

    parts = pl.pallas_call(
        kernel,
        grid=(n_tiles, splits),
        in_specs=[
            pl.BlockSpec((1,), lambda n, sp: (0,)),
            *(pl.BlockSpec((b, K), lambda n, sp: (0, 0)) for b in blocks),
            pl.no_block_spec,
        ],
        out_specs=[pl.BlockSpec((None, b, bn), lambda n, sp: (sp, 0, n)) for b in blocks],
        out_shape=[jax.ShapeDtypeStruct((splits, b, N), jnp.float32) for b in blocks],
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=t["warps"], num_stages=t["stages"]),
    )(lidx, *xs, W)
    # the splits' partial sums, the blocks' rows in order: [M, N]
    return jnp.concatenate([jnp.sum(p, axis=0) for p in parts], axis=0)[:M]
