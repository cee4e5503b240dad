"""The judge's weight products at few rows: XLA's (TF32x3, HIGHEST) against judge_jax.skinny's
Pallas kernel, at the ouro-1.4b shape, on a GPU.

One timed program is a scan over the 24 layers of a layer's four products in a chain, as the
judge runs them (merged q/k/v [2048, 6144], o [2048, 2048], merged gate/up [2048, 11264],
down [5632, 2048]; FP32 weights stacked [24, in, out], 4.93 GB), so every weight byte is read
from HBM once per call. Reports the median of --repeats per (M, variant), the floor (the
weights' bytes at the copy bandwidth measured here), and each variant's largest relative error
against an FP64 product on the host.

    python scripts/gpu_skinny_mm.py --json out/skinny.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from judge_jax.skinny import SKINNY_TILE, skinny_mm  # noqa: E402

L, H, Q, I = 24, 2048, 6144, 5632
SHAPES = {"wqkv": (H, Q), "wo": (H, H), "wgu": (H, 2 * I), "wd": (I, H)}
XLA = {"xla_tf32x3": jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3, "xla_highest": jax.lax.Precision.HIGHEST}


def chain(h, mm):
    # h: [M, H]; the four products in a layer's order, each feeding the next
    y = mm(h, "wqkv")[:, :H]
    y = mm(y, "wo")
    g = mm(y, "wgu")[:, :I]
    return h + 1e-3 * mm(g, "wd")


def program(variant, tile):
    if variant in XLA:
        prec = XLA[variant]

        def body(h, lw):
            return chain(h, lambda x, k: jnp.matmul(x, lw[k], precision=prec)), None

        return jax.jit(lambda W, h: jax.lax.scan(body, h, W)[0])

    def run(W, h):
        def body(h, l):
            return chain(h, lambda x, k: skinny_mm(x, W[k], l, tile)), None

        return jax.lax.scan(body, h, jnp.arange(L))[0]

    return jax.jit(run)


def timed(fn, args, repeats):
    jax.block_until_ready(fn(*args))  # compile + warm
    jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts), ts


def copy_bandwidth(nbytes=2 << 30):
    nbytes = nbytes if L == 24 else 1 << 24
    a = jnp.ones((nbytes // 4,), jnp.float32)
    f = jax.jit(lambda a: a * 1.0000001)
    ms, _ = timed(f, (a,), 10)
    return 2 * nbytes / (ms / 1e3)


def product_error(W, variant, tile, m, rng):
    """Largest relative error over the four matrices of layer 3 (or the last) against FP64, m rows."""
    worst, l = 0.0, min(3, L - 1)
    for k, (kin, _) in SHAPES.items():
        x = rng.standard_normal((m, kin)).astype(np.float32)
        if variant in XLA:
            y = jax.jit(lambda x, w: jnp.matmul(x, w, precision=XLA[variant]))(x, W[k][l])
        else:
            y = jax.jit(lambda x, w: skinny_mm(x, w, l, tile))(x, W[k])
        ref = x.astype(np.float64) @ np.asarray(W[k][l], np.float64)
        worst = max(worst, float(np.abs(np.asarray(y) - ref).max() / np.abs(ref).max()))
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1,4,16,32,64,128")
    p.add_argument("--sweep-rows", type=int, default=16, help="the M at which the tilings are swept")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--bn", default="64,128", help="the tilings swept: output columns per program")
    p.add_argument("--bk", default="32,64", help="the tilings swept: the K step")
    p.add_argument("--programs", default="264,528,1056", help="the tilings swept: programs aimed at")
    p.add_argument("--stages", default="3,4", help="the tilings swept: Triton's pipeline stages")
    p.add_argument("--warps", default="4", help="the tilings swept: Triton's warps per program")
    p.add_argument("--x3", default="0", help="the tilings swept: 1 TF32x3 products, 0 FP32 multiply-adds")
    p.add_argument("--budget-s", type=float, default=240, help="stop sweeping tilings after this")
    p.add_argument("--div", type=int, default=1, help="every dimension / DIV and 2 layers (a CPU smoke test)")
    p.add_argument(
        "--judge-tiles",
        action="store_true",
        help="time, at each of --rows, the kernel as the judge calls it (skinny.tile_for, rows cut into blocks), "
        "with its rows padded to a power of two (split 0), and for past 64 rows with the 16-row tiling; "
        "each with its error against FP64 (with --budget-s 0: no sweep)",
    )
    p.add_argument("--json", required=True)
    a = p.parse_args()
    if a.div > 1:
        global L, H, Q, I
        L, H, Q, I = 2, H // a.div, Q // a.div, I // a.div
        SHAPES.update(wqkv=(H, Q), wo=(H, H), wgu=(H, 2 * I), wd=(I, H))
    t_start = time.time()
    rng = np.random.default_rng(0)
    key = jax.random.PRNGKey(0)
    W = {}
    for k, (kin, kout) in SHAPES.items():
        key, sub = jax.random.split(key)
        W[k] = jax.random.normal(sub, (L, kin, kout), jnp.float32) * (kin**-0.5)
    wbytes = sum(int(np.prod(w.shape)) * 4 for w in W.values())
    bw = copy_bandwidth()
    floor_ms = wbytes / bw * 1e3
    out = {
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "weight_bytes": wbytes,
        "copy_bandwidth_bytes_per_s": bw,
        "floor_ms": floor_ms,
        "sweep": [],
        "rows": {},
    }
    print(f"weights {wbytes / 1e9:.2f} GB, copy bandwidth {bw / 1e12:.2f} TB/s, floor {floor_ms:.3f} ms", flush=True)

    def h_of(m):
        return jax.random.normal(jax.random.PRNGKey(m), (m, H), jnp.float32)

    # the tilings at sweep_rows
    best, best_ms = None, float("inf")
    ints = lambda v: [int(x) for x in v.split(",")]  # noqa: E731
    axes = (ints(a.bn), ints(a.bk), ints(a.programs), ints(a.stages), ints(a.warps), ints(a.x3))
    for bn, bk, progs, stages, warps, x3 in itertools.product(*axes):
        if time.time() - t_start > a.budget_s:
            print("sweep budget spent", flush=True)
            break
        tile = {"bn": bn, "bk": bk, "programs": progs, "stages": stages, "warps": warps, "x3": x3}
        try:
            ms, _ = timed(program("pallas", tile), (W, h_of(a.sweep_rows)), max(5, a.repeats // 2))
        except Exception as e:  # noqa: BLE001 (a tiling Triton refuses: shared memory, say)
            out["sweep"].append({"tile": tile, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            print(f"tile {tile}: {type(e).__name__}", flush=True)
            continue
        out["sweep"].append({"tile": tile, "ms": ms, "x_floor": ms / floor_ms})
        print(f"M={a.sweep_rows} tile {tile}: {ms:.3f} ms ({ms / floor_ms:.2f}x)", flush=True)
        if ms < best_ms:
            best, best_ms = tile, ms
    out["best_tile"] = best
    variants = {"xla_tf32x3": None, "xla_highest": None}
    if best is not None:
        variants["pallas_x3"] = {**best, "x3": 1}
        variants["pallas_fp32"] = {**best, "x3": 0}
    if a.judge_tiles:
        variants = {"xla_highest": None, "pallas_judge": {}, "pallas_padded": {"split": 0}}
    for m in [int(r) for r in a.rows.split(",")]:
        row = out["rows"][m] = {}
        more = {"pallas_tile16": dict(SKINNY_TILE)} if a.judge_tiles and m > 64 else {}
        for name, tile in {**variants, **more}.items():
            try:
                ms, ts = timed(program(name if name in XLA else "pallas", tile), (W, h_of(m)), a.repeats)
                err = product_error(W, name, tile, m, rng) if m in (1, 16, 64) or a.judge_tiles else None
            except Exception as e:  # noqa: BLE001
                row[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                print(f"M={m} {name}: {type(e).__name__}", flush=True)
                continue
            row[name] = {"ms": ms, "x_floor": ms / floor_ms, "min_ms": min(ts), "max_rel_err_fp64": err}
            print(f"M={m} {name}: {ms:.3f} ms ({ms / floor_ms:.2f}x)" + (f", err {err:.2e}" if err else ""), flush=True)
    out["wall_s"] = time.time() - t_start
    Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
