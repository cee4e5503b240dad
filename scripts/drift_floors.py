"""The drift verdict of torch-cpu-bf16 (correct, or with a kernel fault) at a preset over weight seeds,
under several drift floors, from one probe each (judged by a ProbePlan with each floor and rho as its
allowance, on forwards computed once): what floor(H) a correct backend needs at that hidden size and
what a fault's z is under each (oracle/judge/probe/calibration.py FLOOR_POWER; docs/results.md, "The drift
floor at small").

    python scripts/drift_floors.py --preset small --seeds 0,1,2 --faults none,attn_scale=1.003 [--json PATH]

Prints, per seed and fault, the largest |z| (its direction) and the attention logit scale (all
layers)'s z under each floor, with the allowance's rho of the model's hidden size
(drift.allowance_rho) and with 2 (the RHO of before).
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FLOORS = (0.0, 0.000125, 0.00025, 0.0005, 0.001)


def reports(model, fault: str) -> dict:
    """(rho, floor) -> the drift verdict's report of the probe through torch-cpu-bf16 with `fault`, for
    rho the allowance_rho of the model's hidden size and 2, and each floor: one probe, judged under each
    allowance (ProbePlan allowance) on one Forwards (the twin's and the finite differences' forwards
    computed once)."""
    from kernels.backend import TorchBackend
    from kernels.options import KernelOptions
    from oracle.judge.probe import drift, probe_runs
    from oracle.judge.probe.forwards import Forwards
    from oracle.judge.plans.plan import INLINE, probe_plan
    from oracle.judge.plans.verdict import judge

    bk = TorchBackend("cpu", dtype="bfloat16", name="torch-cpu-bf16", kernel_options=KernelOptions(fault=fault))
    runs, fwd, out = probe_runs.probe_runs(bk, model), Forwards(model), {}
    for r in dict.fromkeys((drift.allowance_rho(model.cfg.hidden_size), 2.0)):
        for fl in FLOORS:
            plan = probe_plan(bk, model, runs, verdicts=("drift",), allowance=(fl, r), forwards=fwd)
            out[(r, fl)] = judge(plan, INLINE).drift
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--faults", default="none,attn_scale=1.003", help="kernel faults; none: the correct backend")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    import torch
    from threadpoolctl import threadpool_limits

    from oracle.checkpoint import build_model

    torch.set_num_threads(1)
    threadpool_limits(1, user_api="blas")
    out = {"command": "python scripts/drift_floors.py " + " ".join(sys.argv[1:] if argv is None else argv), "runs": {}}
    for seed in map(int, a.seeds.split(",")):
        model = build_model(a.preset, seed)
        for fault in a.faults.split(","):
            t0 = time.perf_counter()
            row = {}
            for (r, fl), rep in reports(model, "" if fault == "none" else fault).items():
                att = next(e for e in rep.estimates if e.label.startswith("attention logit scale (all"))
                top = max(rep.estimates, key=lambda e: abs(e.t))
                row[f"rho {r:g}, floor {fl:g}"] = {
                    "ok": rep.ok,
                    "threshold": rep.threshold,
                    "max_abs_z": abs(top.t),
                    "max_direction": top.label,
                    "attn_all": {
                        "scale": 1 + att.drift,
                        "se": att.se,
                        "z": att.t,
                        "allowance": list(att.allowance),
                    },
                }
            out["runs"][f"seed {seed}, {fault}"] = row
            print(
                f"seed {seed}, {fault} ({time.perf_counter() - t0:.0f} s), threshold {rep.threshold:.2f}:", flush=True
            )
            for k, v in row.items():
                print(
                    f"    {k}: max |z| {v['max_abs_z']:.2f} ({v['max_direction']}); attention logit scale (all "
                    f"layers) {v['attn_all']['scale']:.4f} z {v['attn_all']['z']:.2f}",
                    flush=True,
                )
            if a.json:
                Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
