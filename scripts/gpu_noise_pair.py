"""The rounding noise of backends, paired, against the JAX FP32 judge on cases of
scripts/gpu_parity_full.py: at every verification position whose inputs agree with the judge's run
(same committed prefix, same drafts before it) the relative L2 error of the logits and the error of
the judge's top-2 gap; quantiles per backend, and the paired ratio over positions every backend
reached. Settles whether one backend rounds further from FP32 than another at the real shape.

    python scripts/gpu_noise_pair.py --cases 0 --backends torch-cuda,torch-cuda-inv --json out/noise.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def positions(run, ref) -> dict:  # run, ref: oracle.judge.runner.ScenarioRun
    """(round, rid, offset) -> (backend logits, judge logits) where the inputs agree (the JAX judge's
    allocator settings come with gpu_tests.parity_full, imported before judge_jax)."""
    out = {}
    for tb, tr in zip(run.traces, ref.traces):
        for (rid, o), lb in tb.verify_logits.items():
            same = rid in tr.prefix and list(tb.prefix.get(rid, [])) == list(tr.prefix[rid])
            if same and (rid, o) in tr.verify_logits and tb.drafts[rid][:o] == tr.drafts[rid][:o]:
                lr = tr.verify_logits[(rid, o)]
                out[(tb.round, rid, o)] = (np.asarray(lb, np.float64), np.asarray(lr, np.float64))
    return out


def errors(lb, lr) -> tuple[float, float]:
    """(relative L2 error, |error of the judge's top-2 gap|)."""
    i, j = np.argsort(lr)[::-1][:2]
    return float(np.linalg.norm(lb - lr) / np.linalg.norm(lr)), float(abs((lb[i] - lb[j]) - (lr[i] - lr[j])))


def q(xs) -> dict:
    xs = np.asarray(xs)
    return {p: round(float(np.quantile(xs, p / 100)), 5) for p in (50, 90, 99, 100)} | {"n": int(xs.size)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="ouro-1.4b")
    p.add_argument("--cases", default="0", help="indices of gpu_parity_full.py's 12 cases, comma-separated")
    p.add_argument("--backends", default="torch-cuda,torch-cuda-inv")
    p.add_argument("--max-prompt", type=int, default=2048)
    p.add_argument("--max-requests", type=int, default=64)
    p.add_argument("--json")
    args = p.parse_args(argv)
    from gpu_tests.parity_full import PARITY_JUDGE, make_cases, max_len
    from judge_jax.backend import make_jax_backend
    from oracle.checkpoint import build_model
    from oracle.judge.runner import replay_lists, run_scenario
    from oracle.runtime.backends import load_backend
    from oracle.runtime.contract import as_loaded

    model = build_model(args.preset, seed=0)
    judge = as_loaded(make_jax_backend(**PARITY_JUDGE))
    cases = make_cases(12, model.cfg.vocab_size, args.max_prompt, args.max_requests, 24576, 2, 0)
    result = {}
    for ci in (int(x) for x in args.cases.split(",")):
        case, mode = cases[ci]
        opts = {"max_requests": len(case.prompts), "max_len": max_len(case)}
        per = {}
        for name in args.backends.split(","):
            t0 = time.perf_counter()
            run = run_scenario(load_backend(name), model, case, mode, **opts)
            ref = run_scenario(judge, model, case, mode, replay=replay_lists(run, case), **opts)
            per[name] = {k: errors(*v) for k, v in positions(run, ref).items()}
            del run, ref  # both sessions' KV (the judge's: 36 GiB at case 0) before the next pair
            gc.collect()
            print(f"{case.name} {name}: {len(per[name])} positions ({time.perf_counter() - t0:.1f} s)", flush=True)
        common = set.intersection(*(set(v) for v in per.values()))
        one = {}
        for name, errs in per.items():
            one[name] = {"rel": q([e[0] for e in errs.values()]), "gap": q([e[1] for e in errs.values()])}
            worst = sorted(errs.items(), key=lambda kv: -kv[1][1])[:3]
            one[name]["worst_gap"] = [[list(k), round(e[1], 4), round(e[0], 5)] for k, e in worst]
            print(f"  {name}: rel {one[name]['rel']}; gap {one[name]['gap']}; worst gap {one[name]['worst_gap']}")
        names = list(per)
        if len(names) == 2 and common:
            a, b = names
            ratio = [per[b][k][0] / per[a][k][0] for k in common if per[a][k][0] > 0]
            one["paired_rel_ratio"] = {"of": f"{b} / {a}", **q(ratio)}
            print(f"  paired relative error {b} / {a} over {len(common)} positions: {one['paired_rel_ratio']}")
        result[case.name] = one
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
