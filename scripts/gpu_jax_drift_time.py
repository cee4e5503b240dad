"""The drift verdict's device sensitivities (judge_jax/drift.py) at the ouro-1.4b shape: one
request's stats_fn(tokens, loops, obs) on random real-shape weights, timed (first call incl.
compile, then a second call), with the device's peak memory where JAX reports it.

The request: --tokens 60 tokens, loops = 4, K/V observed at --positions 40 positions x every depth
x every layer, draft and verify logits at depths 1 and 3 at the same positions (what the drift
probe commits); values = the JAX FP32 reference times (1 + 1e-3 N(0, 1)).
Results also in $OUT/jax_drift_time.json (when $OUT is set).

    PYTHONPATH=. python scripts/gpu_jax_drift_time.py [--preset ouro-1.4b] [--dtype bfloat16] [--chunk 16]
    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/gpu_jax_drift_time.py --preset small   # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np

from judge_jax.drift import CHUNK, make_stats_fn
from oracle.checkpoint import build_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="ouro-1.4b")
    ap.add_argument("--dtype", default="bfloat16", help="the backend dtype the weights' share is computed for")
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--positions", type=int, default=40)
    ap.add_argument("--chunk", type=int, default=CHUNK)
    args = ap.parse_args()
    dev = jax.devices()[0]
    print(f"device: {dev.device_kind} ({dev.platform}); preset {args.preset}", flush=True)

    t0 = time.perf_counter()
    model = build_model(args.preset, 0)  # random weights of the real shapes (numpy FP32)
    cfg = model.cfg
    t_build = time.perf_counter() - t0
    print(f"build_model: {t_build:.1f} s", flush=True)

    t0 = time.perf_counter()
    stats_fn = make_stats_fn(model, args.dtype, chunk=args.chunk)
    t_put = time.perf_counter() - t0
    print(f"make_stats_fn (weights to the device): {t_put:.1f} s", flush=True)

    rng = np.random.default_rng(0)
    T, loops = args.tokens, args.loops
    tokens = [int(t) for t in rng.integers(0, cfg.vocab_size, T)]
    ref = stats_fn.reference(tokens, loops)  # k, v: [loops, L, T, nkv, hd]; logits: [loops, T, V]
    noisy = lambda c: (c * (1.0 + 1e-3 * rng.standard_normal(c.shape))).astype(np.float32)
    positions = range(max(0, T - 1 - args.positions), T - 1)  # the last committed positions
    obs = {}
    for pos in positions:
        for j in range(loops):
            for l in range(cfg.num_layers):
                obs[("k", pos, j, l)] = noisy(ref["k"][j, l, pos])
                obs[("v", pos, j, l)] = noisy(ref["v"][j, l, pos])
        for kind, j in (("draft", 1), ("verify", min(3, loops - 1))):
            obs[(kind, pos, j)] = noisy(ref["logits"][j, pos])
    print(f"observations: {len(obs)} vectors at {len(positions)} positions", flush=True)

    times = []
    for call in ("first (incl. compile)", "second"):
        t0 = time.perf_counter()
        b, G, n, bw = stats_fn(tokens, loops, obs)
        times.append(time.perf_counter() - t0)
        print(f"stats_fn {call}: {times[-1]:.2f} s  (P = {len(b)}, values = {n})", flush=True)
    assert np.all(np.isfinite(b)) and np.all(np.isfinite(G)) and np.all(np.isfinite(bw))
    d = np.diag(G)
    print(
        f"G diag range [{d.min():.3g}, {d.max():.3g}]; |b| max {np.abs(b).max():.3g}; |bw| max {np.abs(bw).max():.3g}"
    )

    peak = None
    try:
        peak = (dev.memory_stats() or {}).get("peak_bytes_in_use")
    except Exception:  # a backend without memory stats (CPU)
        pass
    if peak:
        print(f"device peak memory: {peak / 2**30:.1f} GiB")
    res = {
        "device": dev.device_kind,
        "preset": args.preset,
        "dtype": args.dtype,
        "tokens": T,
        "loops": loops,
        "positions": len(positions),
        "chunk": args.chunk,
        "values": n,
        "P": len(b),
        "build_s": t_build,
        "put_s": t_put,
        "first_s": times[0],
        "second_s": times[1],
        "peak_bytes": peak,
    }
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "jax_drift_time.json"), "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
