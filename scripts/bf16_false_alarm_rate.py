"""How often the judge fails a correct BF16 backend (torch-cpu-bf16) on random tiny models like
those the property suite draws (hidden 8-32, head_dim 2-8, 1-2 layers, D 2-6, 1-3 requests,
greedy and sampled, 1-2 block rounds): with the noise twin's bounds (the judge's default for
reduced precision, oracle/judge/probe/noise.py) or with the fixed bfloat16 row (--row). Also prints, per
run, the largest ratio of a value's error to its twin noise scale and of an excused margin to
its twin scale (the K_VALUE and K_MARGIN those runs would need), as quantiles; with --row, per kind
(KV writes, logits) and depth, the largest error over the row's depth-0 value. Each run is one verdict
(a traces plan that keeps every compared value: TracesPlan.values), the ratios read from its records.

    python scripts/bf16_false_alarm_rate.py [--seed 0] [--n 250] [--jobs 1] [--row] [--json PATH]
        [--backend SPEC]   (default torch-cpu-bf16; e.g. torch-cpu with --row: the float32 row)
"""

import argparse
import datetime
import json
import shlex
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def random_model(rng):
    """A random tiny model of the property suite's sizes (also scripts/drift_false_alarm_rate.py)."""
    from oracle.config import ModelConfig
    from oracle.model import LoopedModel, random_weights

    kvh = int(rng.choice([1, 2]))
    cfg = ModelConfig(
        vocab_size=int(rng.integers(16, 257)),
        hidden_size=int(rng.choice([8, 16, 32])),
        intermediate_size=int(rng.choice([16, 32, 64])),
        num_layers=int(rng.integers(1, 3)),
        num_heads=kvh * int(rng.choice([1, 2])),
        num_kv_heads=kvh,
        head_dim=int(rng.choice([2, 4, 8])),
        rope_theta=float(rng.choice([1e6, 1e4, 10.0])),
    )
    return cfg, LoopedModel(cfg, random_weights(cfg, int(rng.integers(0, 4))))


def one(args) -> tuple:
    """(failed, detail, head_dim, max value ratio, max margin ratio) of run i of seed s."""
    seed, i, row, spec = args
    import torch

    torch.set_num_threads(1)
    from oracle.runtime.backends import load_backend
    from oracle.judge.plans.plan import INLINE, traces_plan
    from oracle.judge.runner import judge_run, run_scenario
    from oracle.judge.scenario import Case
    from oracle.judge.plans.verdict import judge
    from oracle.sampling_params import SamplingParams as SP

    rng = np.random.default_rng([seed, i])
    cfg, model = random_model(rng)
    D = int(rng.integers(2, 7))
    d, n = int(rng.integers(1, D)), int(rng.integers(1, 4))
    prompts = [list(map(int, rng.integers(0, cfg.vocab_size, rng.integers(1, 9)))) for _ in range(n)]
    params = [
        SP() if rng.random() < 0.5 else SP(float(rng.choice([0.7, 1.0, 1.3])), seed=int(rng.integers(1000)))
        for _ in range(n)
    ]
    rounds = [{r: int(rng.integers(1, 7)) for r in range(n)} for _ in range(int(rng.integers(1, 3)))]
    sc = Case("random", prompts, params, rounds, d, D)
    bk = load_backend(spec)
    got, ref = run_scenario(bk, model, sc, "block"), judge_run(model, sc, "block")
    plan = traces_plan(ref.traces, got.traces, bk.dtype, model, tolerance="fixed" if row else "auto", values=True)
    v = judge(plan, INLINE)
    twin = v.info["bounds"] == "noise twin"
    ratio, margin = (row_ratios(v, bk.dtype) if row else 0.0), 0.0
    if twin:  # the ratios the twin's K must cover, over every value and divergence the verdict judged
        ratio, margin = twin_ratios(v)
    bad = v.failed[0]["detail"] if v.failed else ""
    return (not v.ok, bad[:140], cfg.head_dim, cfg.hidden_size, cfg.num_layers, d, D, ratio, margin)


def twin_ratios(v) -> tuple:
    """(the largest error of a compared value over its twin noise scale, the largest excused or failed
    divergence's margin in twin noise scales) of a verdict judged by the noise twin, from its records:
    a value's bound is K_VALUE noise scales, a divergence's error is its margin's noise scales."""
    from oracle.judge.probe.calibration import K_VALUE

    ratio = margin = 0.0
    for _, rep in v.reports:
        for x in rep.values or ():
            ratio = max(ratio, K_VALUE * x.error / max(x.bound, 1e-30))
        for f in rep.divergences + [f for f in rep.records if f.cls == "tokens"]:
            margin = max(margin, f.error or 0.0)
    return ratio, margin


def row_ratios(v, dtype: str) -> dict:
    """Per (kind, depth), the largest relative error of a compared value in units of the row's depth-0
    value: {("kv" | "logits", depth): max err / base}, from the verdict's records."""
    from oracle.tolerances import TOLERANCES

    out: dict = {}
    for _, rep in v.reports:
        for x in rep.values or ():
            kind = "kv" if x.check == "kv_writes" else "logits"
            out[(kind, x.depth)] = max(out.get((kind, x.depth), 0.0), x.error / TOLERANCES[dtype][kind])
    return out


def parser(doc: str, n: int) -> argparse.ArgumentParser:
    """--seed, --n, --first, --jobs and --json: the options both false-alarm scripts share."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=n)
    p.add_argument("--first", type=int, default=0, help="index of the first run (runs first .. first + n - 1)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--json", default="", help="also write the summary to this file, with the command and date")
    return p


def write_json(path: str, script: str, argv, summary: dict) -> None:
    """The summary with the command that produced it and the date (UTC)."""
    if not path:
        return
    argv = sys.argv[1:] if argv is None else list(argv)
    doc = {
        "command": "python " + " ".join(shlex.quote(a) for a in [script, *argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        **summary,
    }
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def run_all(fn, work: list, jobs: int) -> list:
    """fn over work, in `jobs` worker processes (1: in this one)."""
    if jobs <= 1:
        return [fn(w) for w in work]
    with ProcessPoolExecutor(jobs) as ex:
        return list(ex.map(fn, work, chunksize=4))


def main(argv=None) -> int:
    p = parser(__doc__, 250)
    p.add_argument("--row", action="store_true", help="judge by the backend's fixed row instead of the twin")
    p.add_argument("--backend", default="torch-cpu-bf16", help="the correct backend judged (a load_backend spec)")
    args = p.parse_args(argv)
    res = run_all(
        one, [(args.seed, i, args.row, args.backend) for i in range(args.first, args.first + args.n)], args.jobs
    )
    fails = [r for r in res if r[0]]
    by_hd = {
        hd: f"{sum(f[2] == hd for f in fails)}/{sum(r[2] == hd for r in res)}" for hd in sorted({r[2] for r in res})
    }
    print(
        f"{len(fails)} of {args.n} correct runs failed ({'fixed row' if args.row else 'noise twin'}, {args.backend}); "
        f"by head_dim: {by_hd}"
    )
    for f in fails:
        print("  hd=%d H=%d L=%d d=%d D=%d: %s" % (f[2], f[3], f[4], f[5], f[6], f[1]))
    summary = {
        "runs": args.n,
        "seed": args.seed,
        "judged_by": "fixed row" if args.row else "noise twin",
        "backend": args.backend,
        "failed": len(fails),
        "failed_by_head_dim": by_hd,
        "failures": [
            {"head_dim": f[2], "hidden": f[3], "layers": f[4], "d": f[5], "D": f[6], "detail": f[1]} for f in fails
        ],
    }
    if args.row:  # how the row's errors grow with depth
        worst: dict = {}
        for r in res:
            for key, v in r[7].items():
                worst.setdefault(key, []).append(v)
        print("  error / the row's depth-0 value, per (kind, depth): 99% and max over runs")
        for key in sorted(worst):
            x = np.array(worst[key])
            print(
                f"    {key[0]:6s} depth {key[1]}: {len(x):5d} runs, 99% {np.quantile(x, 0.99):.3f}, max {x.max():.3f}"
            )
        summary["row_error_over_base"] = {
            f"{k[0]}@{k[1]}": {"runs": len(v), "q99": float(np.quantile(v, 0.99)), "max": float(max(v))}
            for k, v in sorted(worst.items())
        }
    if not args.row:
        for name, col, key in (
            ("value error / twin scale", 7, "value_ratio"),
            ("excused margin / twin scale", 8, "margin_ratio"),
        ):
            x = np.array([r[col] for r in res])
            q = np.quantile(x, [0.5, 0.9, 0.99, 0.999, 1.0])
            print(
                f"  per-run max {name}: median {q[0]:.2f}, 90% {q[1]:.2f}, 99% {q[2]:.2f}, 99.9% {q[3]:.2f}, "
                f"max {q[4]:.2f}"
            )
            summary[f"per_run_max_{key}"] = dict(zip(("median", "q90", "q99", "q999", "max"), map(float, q)))
    write_json(args.json, "scripts/bf16_false_alarm_rate.py", argv, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
