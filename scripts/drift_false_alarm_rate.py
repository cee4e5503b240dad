"""How often the drift verdict (oracle/judge/drift.py) fails a correct BF16 backend (torch-cpu-bf16) on
random tiny models of the property suite's sizes (hidden 8-32, head_dim 2-8, 1-2 layers), and how
large a fault it sees there: with --fault (kernels/options.py FAULTS, e.g. attn_scale=1.01) the
same runs report how often that fault is caught and named.

    python scripts/drift_false_alarm_rate.py [--seed 0] [--n 200] [--jobs 1] [--fault SPEC] [--json PATH]
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))          # bf16_false_alarm_rate.random_model


def one(args) -> tuple:
    """(failed, failure line, max |z|, |z| threshold, parameters tested) of run i of seed s."""
    seed, i, fault = args
    import torch
    torch.set_num_threads(1)
    from bf16_false_alarm_rate import random_model
    from kernels.backend import TorchBackend
    from kernels.options import KernelOptions
    from oracle.judge.drift import drift_check
    rng = np.random.default_rng([seed, i])
    _, model = random_model(rng)
    bk = TorchBackend("cpu", dtype="bfloat16", name="torch-cpu-bf16", kernel_options=KernelOptions(fault=fault))
    rep = drift_check(bk, model, seed=int(rng.integers(1 << 30)))
    return (not rep.ok, rep.failure[:160], max(abs(e.t) for e in rep.estimates), rep.threshold, len(rep.estimates))


def main(argv=None) -> int:
    from bf16_false_alarm_rate import parser, run_all, write_json
    p = parser(__doc__, 200)
    p.add_argument("--fault", default="", help="a kernel fault (kernels/options.py), e.g. attn_scale=1.01")
    args = p.parse_args(argv)
    res = run_all(one, [(args.seed, i, args.fault) for i in range(args.n)], args.jobs)
    fails = [r for r in res if r[0]]
    z = np.array([r[2] for r in res])
    print(f"{len(fails)} of {args.n} runs failed the drift verdict ({args.fault or 'correct backend'}); "
          f"max |z| per run: median {np.median(z):.2f}, 99% {np.quantile(z, 0.99):.2f}, max {z.max():.2f}; "
          f"thresholds {min(r[3] for r in res):.2f}-{max(r[3] for r in res):.2f} over "
          f"{min(r[4] for r in res)}-{max(r[4] for r in res)} directions")
    for f in fails[:20]:
        print("  ", f[1])
    write_json(args.json, "scripts/drift_false_alarm_rate.py", argv,
               {"runs": args.n, "seed": args.seed, "fault": args.fault, "failed": len(fails),
                "max_abs_z_per_run": {"median": float(np.median(z)), "q99": float(np.quantile(z, 0.99)),
                                      "max": float(z.max())},
                "thresholds": [min(r[3] for r in res), max(r[3] for r in res)],
                "directions": [min(r[4] for r in res), max(r[4] for r in res)],
                "failures": [f[1] for f in fails]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
