"""The JAX judge against the NumPy FP32 reference at a real shape, per weight-product algorithm.

    python scripts/gpu_judge_crosscheck.py                                  # ouro-1.4b, the judges below
    python scripts/gpu_judge_crosscheck.py --preset small --judges highest  # a CPU-sized run

For each of `--judges` (DOT[/LOOP[/ATTN[/TILE]]]: a weight-product algorithm of
judge_jax.layers.DOTS, the layer loop (auto, scan or unroll; default the judge's), the
recurrent attention (judge_jax.model.ATTENTION; default the judge's) and its Pallas tiling
(judge_jax.layers.PLANES_TILE items, e.g. dot_x3=1:bt=32)) it reports the largest relative
error (oracle.judge.comparison.compare.rel_err) of
* the cache-free logits (JaxLoopedModel.forward_full against LoopedModel.forward_full, every
  position, every depth), and
* judged rounds: a scenario of three requests (prompts of --prompt, 5 and 1 tokens, greedy and
  two sampled), two rounds per mode, the JAX backend's traces against the reference's
  (the one verdict: a traces plan, float32 row): KV writes and logits,
and whether each is within --tol (the 1e-5 of tests/test_jax_model.py). Exits 1 if any is not.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judge_jax.backend import make_jax_backend  # noqa: E402
from judge_jax.layers import DOTS  # noqa: E402
from judge_jax.model import ATTENTION, LAYER_LOOPS, JaxLoopedModel  # noqa: E402
from oracle.checkpoint import build_model  # noqa: E402
from oracle.judge.comparison.compare import rel_err  # noqa: E402
from oracle.judge.plans.plan import INLINE, traces_plan  # noqa: E402
from oracle.judge.plans.verdict import judge as judge_verdict  # noqa: E402
from oracle.judge.runner import REFERENCE, run_scenario  # noqa: E402
from oracle.judge.scenario import Case  # noqa: E402
from oracle.sampling_params import SamplingParams as SP  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="ouro-1.4b")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--judges",
        default="highest/scan,tf32x3/scan,tf32x3/unroll",
        help="comma-separated DOT[/LOOP[/ATTN[/TILE]]]: LOOP auto, scan or unroll; ATTN auto, xla or pallas; "
        "TILE K=V:K=V (judge_jax.layers.PLANES_TILE)",
    )
    p.add_argument("--tokens", type=int, default=8, help="cache-free sequence length")
    p.add_argument("--prompt", type=int, default=37, help="the first request's prompt length")
    p.add_argument(
        "--rows-bits", type=int, help="significant bits of the judge's rows-per-group bucket (default: the judge's)"
    )
    p.add_argument(
        "--kv-fetch", help="how the judge's KV writes come back (judge_jax.backend.KV_FETCH; default: the judge's)"
    )
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--json", help="write the result here")
    a = p.parse_args(argv)
    judges = [x for x in a.judges.split(",") if x]
    loops = dict(LAYER_LOOPS, **{"": None})  # no /LOOP: the judge's default

    def parts(x):  # DOT, LOOP, ATTN, TILE
        dot, loop, attn, tile = (x.split("/") + ["", "", ""])[:4]
        return dot, loop, attn or "auto", tile

    bad = [x for x in judges if x.count("/") > 3 or parts(x)[0] not in DOTS or parts(x)[1] not in loops]
    bad += [x for x in judges if parts(x)[2] not in ATTENTION]
    if bad or not judges:
        p.error(
            f"--judges {a.judges!r}: expected DOT[/auto|/scan|/unroll[/ATTN[/TILE]]], "
            f"DOT one of {', '.join(DOTS)}, ATTN one of {', '.join(ATTENTION)}"
        )
    if a.tokens < 1 or a.prompt < 1 or not a.tol > 0:
        p.error("--tokens and --prompt must be >= 1 and --tol > 0")
    import jax

    t0 = time.perf_counter()
    model = build_model(a.preset, seed=a.seed)
    cfg = model.cfg
    rng = np.random.default_rng(a.seed)
    tokens = list(map(int, rng.integers(0, cfg.vocab_size, a.tokens)))
    want = model.forward_full(tokens, 4)
    prompts = [list(map(int, rng.integers(0, cfg.vocab_size, n))) for n in (a.prompt, 5, 1)]
    sc = Case(
        "crosscheck",
        prompts,
        [SP(), SP(1.0, seed=3), SP(0.8, top_k=9, seed=4)],
        [{0: 5, 1: 3, 2: 1}, {0: 2, 1: 4, 2: 4}],
        2,
        4,
    )
    ref = {mode: run_scenario(REFERENCE, model, sc, mode).traces for mode in ("block", "loop")}
    tile_env = os.environ.get("JUDGE_JAX_PLANES_TILE")
    res = {"preset": a.preset, "device": str(jax.devices()[0].device_kind), "tol": a.tol, "judges": {}}
    res["rows_bits"], res["tokens"], res["prompt"], res["kv_fetch"] = a.rows_bits, a.tokens, a.prompt, a.kv_fetch
    ok = True
    for name in judges:
        dot, loop, attn, tile = parts(name)
        if tile:  # the Pallas attention's tiling, read when a model is made (judge_jax.layers.planes_tile)
            os.environ["JUDGE_JAX_PLANES_TILE"] = ",".join(filter(None, [tile_env, tile.replace(":", ",")]))
        rb = {} if a.rows_bits is None else {"rows_bits": a.rows_bits}
        jm = JaxLoopedModel(cfg, model.weights, dot=dot, unroll=loops[loop], attn=attn, **rb)
        got = jm.forward_full(tokens, 4)
        cache_free = max(rel_err(got[j][t], want[j][t]) for j in range(4) for t in range(len(tokens)))
        made = {"attn": jm.dims.attn, "attn_tile": dict(jm.dims.attn_tile), "unroll": jm.unroll}
        del jm
        kf = {} if a.kv_fetch is None else {"kv_fetch": a.kv_fetch}
        judge = make_jax_backend(dot=dot, unroll=loops[loop], attn=attn, **rb, **kf)
        rounds = {}
        for mode in ("block", "loop"):
            got = run_scenario(judge, model, sc, mode).traces
            v = judge_verdict(traces_plan(ref[mode], got, "float32", names=("reference", name)), INLINE)
            rounds[mode] = {
                "ok": v.ok,
                "kv": float(v.max_rel_err["kv"]),
                "logits": float(v.max_rel_err["logits"]),
                "first_failure": None if v.ok else v.first_failure(),
            }
        if tile_env is None:
            os.environ.pop("JUDGE_JAX_PLANES_TILE", None)
        else:
            os.environ["JUDGE_JAX_PLANES_TILE"] = tile_env
        worst = max([cache_free] + [r[k] for r in rounds.values() for k in ("kv", "logits")])
        within = worst <= a.tol and all(r["ok"] for r in rounds.values())
        ok &= within
        del judge
        gc.collect()
        res["judges"][name] = {**made, "cache_free": cache_free, "rounds": rounds, "worst": worst, "within_tol": within}
        print(
            f"{name:14s}: cache-free {cache_free:.3g}; rounds "
            + "; ".join(
                f"{m} KV {r['kv']:.3g} logits {r['logits']:.3g}{'' if r['ok'] else ' FAILED'}"
                for m, r in rounds.items()
            )
            + f" -> {'within' if within else 'NOT within'} {a.tol:g}",
            flush=True,
        )
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"done in {res['wall_s']} s")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
