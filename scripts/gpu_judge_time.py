"""The JAX FP32 judge's round time against its floor, both rounds (gpu_tests/judge_timing.py).

    python scripts/gpu_judge_time.py                         # ouro-1.4b, C=16, ctx 1024, on the GPU
    python scripts/gpu_judge_time.py --json out.json --trace /tmp/judge_trace
    python scripts/gpu_judge_time.py --preset small --ctx 128   # the same at a small shape (CPU)
    python scripts/gpu_judge_time.py --preset small --hidden 256 --layers 17 --ctx 256   # a mid shape
    python scripts/gpu_judge_time.py --variant "" --variant "dot=tf32x3,rows_bits=2"    # variants, one build

Prints, per mode: the median round ms (K = 4, d = 2, D = 4, greedy), the floor on the H200
(oracle.roofline.judge_round_floor: weights, KV and FLOPs at peak rates) and measured / floor; the
host-to-device transfers, device-to-host fetches and compiles of one round; and a probed
round (each device step synchronised): per step kind the host ms until enqueued and the ms
the host then waited for the device, and the host ms of oracle.phases' own work. --trace DIR
adds a jax.profiler trace of one round per mode (TensorBoard / Perfetto).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_tests.judge_timing import time_judge_round  # noqa: E402
from judge_jax.backend import make_jax_backend  # noqa: E402
from judge_jax.model import ATTENTION, LAYER_LOOPS, LOGITS_FETCH  # noqa: E402
from oracle.config import preset  # noqa: E402
from oracle.checkpoint import build_model  # noqa: E402
from oracle.model import LoopedModel, random_weights  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="ouro-1.4b")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--C", type=int, default=16, help="requests per round")
    p.add_argument("--ctx", type=int, default=1024, help="prompt tokens per request")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--gpu", default="h200", help="the peak rates of the floor (oracle.roofline.GPU_PEAKS)")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--trace", help="write a jax.profiler trace of one round per mode under this folder")
    p.add_argument(
        "--host-profile",
        type=int,
        default=0,
        metavar="N",
        help="one more round per mode under cProfile: keep its top N functions (in the JSON)",
    )
    p.add_argument("--hidden", type=int, help="override the preset's hidden size (random weights)")
    p.add_argument("--intermediate", type=int, help="override the preset's MLP size")
    p.add_argument("--layers", type=int, help="override the preset's layer count")
    p.add_argument("--vocab", type=int, help="override the preset's vocabulary size")
    p.add_argument(
        "--kv-fetch",
        default="pinned",
        choices=("async", "thread", "round", "pinned", "both"),
        help="how the trace's KV writes come back (judge_jax.backend._RoundModel); both: time each",
    )
    p.add_argument(
        "--layer-loop",
        default="auto",
        choices=tuple(LAYER_LOOPS),
        help="the judge's layer loop (JaxLoopedModel unroll: auto = a scan on a GPU)",
    )
    p.add_argument("--ctx-bits", type=int, default=4, help="significant bits of the attended-context bucket")
    p.add_argument("--rows-bits", type=int, default=3, help="significant bits of the rows-per-group bucket")
    p.add_argument(
        "--logits-fetch",
        default="pinned",
        choices=LOGITS_FETCH,
        help="how a head's logits come back (JaxLoopedModel)",
    )
    p.add_argument("--dot", default="auto", help="the weight products' algorithm (judge_jax.layers.DOTS)")
    p.add_argument("--attn", default="auto", choices=ATTENTION, help="the recurrent call's attention (JaxLoopedModel)")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE,...",
        help="time this judge variant too (repeatable; keys dot, rows_bits, ctx_bits, layer_loop, attn, "
        "kv_fetch, logits_fetch, tile (the Pallas attention's tiling, judge_jax.layers.PLANES_TILE: "
        "tile=bt=32:dot_x3=1); "
        "the rest from the options above): one model build, variants one after another",
    )
    p.add_argument("--allow-cpu", action="store_true", help="run ouro-1.4b even where JAX has no GPU (hours)")
    args = p.parse_args(argv)
    import jax

    dev = jax.devices()[0]
    print(f"JAX {jax.__version__} on {dev.platform}: {dev.device_kind}", flush=True)
    if dev.platform == "cpu" and args.preset == "ouro-1.4b" and not args.allow_cpu:
        print("no GPU: ouro-1.4b on the CPU takes hours; use --preset small --ctx 128, or --allow-cpu")
        return 2
    t0 = time.perf_counter()
    model = build(args)
    res = {
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "preset": args.preset,
        "config": dataclasses.asdict(model.cfg),
        "device": f"{dev.platform}: {dev.device_kind}",
        "jax": jax.__version__,
    }
    specs = [variant(args, v) for v in args.variant] or [variant(args, "")]
    if len(specs) > 1:
        res["variants"] = []
    for i, spec in enumerate(specs):
        opts = dict(spec)
        fetch_opt, tile = opts.pop("kv_fetch"), opts.pop("tile")
        judge = make_jax_backend(**opts)
        fetches = ("async", "round") if fetch_opt == "both" else (fetch_opt,)
        env = os.environ.get("JUDGE_JAX_PLANES_TILE")
        if tile:  # the model reads its Pallas tiling when made (judge_jax.layers.planes_tile)
            os.environ["JUDGE_JAX_PLANES_TILE"] = ",".join(filter(None, [env, tile.replace(":", ",")]))
        try:
            jm = judge.model(model)
        finally:
            if env is None:
                os.environ.pop("JUDGE_JAX_PLANES_TILE", None)
            else:
                os.environ["JUDGE_JAX_PLANES_TILE"] = env
        one = dict(spec, unroll=jm.unroll, attn_tile=dict(jm.dims.attn_tile))  # tile: JUDGE_JAX_PLANES_TILE
        if len(specs) > 1:
            print(f"variant {spec}", flush=True)
        for fetch in fetches:
            one[fetch] = time_judge_round(
                judge,
                model,
                C=args.C,
                ctx=args.ctx,
                repeats=args.repeats,
                gpu=args.gpu,
                trace_dir=None if args.trace is None else Path(args.trace) / (f"v{i}" * (len(specs) > 1)) / fetch,
                host_profile=args.host_profile,
                kv_fetch=fetch,
            )
            show(args, one[fetch], fetch)
        if len(specs) > 1:
            res["variants"].append(one)
        else:
            res.update(one)
        del judge
        gc.collect()
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        if args.json:  # after each variant: a run cut by a time limit keeps what it measured
            Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    print(f"done in {res['wall_s']} s")
    return 0


def variant(args, text: str) -> dict:
    """The judge options of a --variant spec (unset keys from the command-line options)."""
    spec = {
        "dot": args.dot,
        "rows_bits": args.rows_bits,
        "ctx_bits": args.ctx_bits,
        "layer_loop": args.layer_loop,
        "attn": args.attn,
        "kv_fetch": args.kv_fetch,
        "logits_fetch": args.logits_fetch,
        "tile": "",
    }
    for item in filter(None, text.split(",")):
        k, eq, v = item.partition("=")
        if not eq or k not in spec:
            raise SystemExit(f"error: --variant {text!r}: {item!r} is not KEY=VALUE with KEY one of {', '.join(spec)}")
        if k in ("rows_bits", "ctx_bits") and not v.isdigit():
            raise SystemExit(f"error: --variant {text!r}: {k} must be a whole number, not {v!r}")
        spec[k] = int(v) if k in ("rows_bits", "ctx_bits") else v
    loop = spec.pop("layer_loop")
    if loop not in LAYER_LOOPS:
        raise SystemExit(f"error: --variant {text!r}: layer_loop must be one of {', '.join(LAYER_LOOPS)}")
    spec["unroll"] = LAYER_LOOPS[loop]
    return spec


def build(args):
    """The preset's model, or its shape with --hidden/--intermediate/--layers replaced (random weights)."""
    cfg = preset(args.preset)
    over = {
        k: v
        for k, v in (
            ("hidden_size", args.hidden),
            ("intermediate_size", args.intermediate),
            ("num_layers", args.layers),
            ("vocab_size", args.vocab),
        )
        if v is not None
    }
    if not over:
        return build_model(args.preset, seed=args.seed)
    cfg = dataclasses.replace(cfg, **over)
    return LoopedModel(cfg, random_weights(cfg, args.seed))


def show(args, res: dict, fetch: str) -> None:
    print(
        f"judge round, {args.preset}, C={args.C}, context {args.ctx}, K=4, d=2, D=4, KV fetch {fetch} "
        f"(median of {args.repeats}; floor on {args.gpu})"
    )
    for mode in ("block", "loop"):
        r = res[mode]
        terms = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in r["floor_terms_ms"].items())
        pr = r["per_round"]
        print(
            f"  {mode:5s}: {r['median_ms']:9.2f} ms (CPU time {r['cpu_median_ms']:.2f} ms), "
            f"floor {r['floor_ms']:.2f} ms "
            f"({terms} ms alone), measured/floor {r['over_floor']:.2f}x; warm-up {r['warmup_s']:.1f} s "
            f"({r['warmup_compiles']['compiles']} compiles, {r['warmup_compiles']['compile_s']:.1f} s)"
        )
        print(
            f"         per round: {pr['h2d']} host->device transfers, {pr['d2h']} device->host fetches "
            f"({pr['d2h_bytes'] / 1e6:.1f} MB; {pr['d2h_logged']} in the guard's log), {pr['compiles']} compiles, "
            f"KV planes donated (not copied) by the calls: {pr.get('kv_donated')}"
        )
        if r["probe"]:
            pb = r["probe"]
            steps = "; ".join(
                f"{k} x{v['n']}: host {v['host_ms']:.2f} + device wait {v['device_wait_ms']:.2f}"
                for k, v in pb["steps"].items()
            )
            print(
                f"         probed round {pb['wall_ms']:.2f} ms: {steps}; "
                f"oracle.phases host {pb['phases_host_ms']:.2f} ms"
            )
        if r.get("trace_gaps"):
            tg = r["trace_gaps"]
            print(f"         traced round {tg['wall_ms']:.2f} ms: host {tg['host_ms']}")
            if "idle_ms" in tg:
                print(
                    f"         device busy {tg['device_busy_ms']:.2f} ms, copies {tg['copy_ms']:.2f} ms, "
                    f"idle {tg['idle_ms']:.2f} ms in {tg['idle_gaps']} gaps ({tg['idle_short_ms']:.2f} ms in "
                    f"{tg['idle_short_gaps']} under 0.1 ms), the rest while the host was in {tg['idle_by']}"
                )
                print(f"         {tg['device_launches']} kernels; the longest in all: {tg['device_by_kernel']}")


if __name__ == "__main__":
    sys.exit(main())
