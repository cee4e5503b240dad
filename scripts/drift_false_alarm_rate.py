"""How often the drift and precision verdicts (oracle/judge/probe/drift.py, oracle/judge/probe/precision.py: the
probe's two verdicts) fail a correct BF16 backend (torch-cpu-bf16) on random tiny models of the
property suite's sizes (hidden 8-32, head_dim 2-8, 1-2 layers), and how large a fault they see
there: with --fault (kernels/options.py FAULTS, e.g. attn_scale=1.01 or fp8_k) the same runs report
how often that fault is caught and named. --rounding SPEC runs a rounding variant of
meta_tests/band_faults.py instead (a legitimate bfloat16 variant: the precision limit's calibration;
or a band fault). Also prints, per hidden size and kind of value group, the quantiles of each run's
largest group energy (x the twin's): what the precision limit (oracle/judge/probe/calibration.py
PRECISION_LIMITS) must cover.

    python scripts/drift_false_alarm_rate.py [--seed 0] [--n 200] [--first 0] [--jobs 1] [--fault SPEC]
        [--rounding SPEC] [--json PATH]
    python scripts/drift_false_alarm_rate.py --merge A.json B.json ... [--json PATH]

Each --json holds its runs (per_run: index, failed, max |z|, threshold, directions, failure), so
parts run apart (--first) merge into one summary.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bf16_false_alarm_rate.random_model


def one(args) -> tuple:
    """(failed, failure line, max |z|, |z| threshold, parameters tested, precision failed, its failure
    line, its max z, its threshold, groups tested, {kind: largest group energy}, hidden size) of run i
    of seed s."""
    seed, i, fault, rounding, no_drift = args
    import torch

    torch.set_num_threads(1)
    from bf16_false_alarm_rate import random_model
    from kernels.backend import TorchBackend
    from kernels.options import KernelOptions
    from oracle.judge.probe.probe_runs import probe_runs
    from oracle.judge.plans.plan import VERDICTS, probe_plan
    from oracle.judge.plans.verdict import judge

    rng = np.random.default_rng([seed, i])
    _, model = random_model(rng)
    if rounding:
        from meta_tests.band_faults import rounding_backend

        bk = rounding_backend(rounding, "cpu", KernelOptions(fault=fault))
    else:
        bk = TorchBackend("cpu", dtype="bfloat16", name="torch-cpu-bf16", kernel_options=KernelOptions(fault=fault))
    runs = probe_runs(bk, model, seed=int(rng.integers(1 << 30)))
    v = judge(probe_plan(bk, model, runs, verdicts=("precision",) if no_drift else VERDICTS))
    rep, prec = v.drift, v.precision
    if no_drift:  # the precision verdict alone (the limit's calibration): no drift fields
        drift_fields = (False, "", 0.0, 0.0, 0)
    else:
        drift_fields = (
            not rep.ok,
            rep.failure[:160],
            max(abs(e.t) for e in rep.estimates),
            rep.threshold,
            len(rep.estimates),
        )
    return (
        *drift_fields,
        not prec.ok,
        prec.failure[:160],
        max(g.t for g in prec.groups),
        prec.threshold,
        len(prec.groups),
        {k["kind"]: {"largest": k["largest"], "critical": k["critical_limit"]} for k in prec.kinds()},
        model.cfg.hidden_size,
    )


def summarize(res: list, label: str) -> dict:
    """Prints the summary of runs res [(index, failed, failure, max |z|, threshold, directions, precision
    failed, failure, max z, threshold, groups)]: the drift verdict's, then the precision verdict's."""
    out = summarize_drift(res, label)
    if res and len(res[0]) > 6:
        fails = [r for r in res if r[6]]
        z = np.array([r[8] for r in res])
        print(
            f"{len(fails)} of {len(res)} runs failed the precision verdict ({label}); max z per run: median "
            f"{np.median(z):.2f}, 99% {np.quantile(z, 0.99):.2f}, max {z.max():.2f}; thresholds "
            f"{min(r[9] for r in res):.2f}-{max(r[9] for r in res):.2f} over {min(r[10] for r in res)}-"
            f"{max(r[10] for r in res)} groups"
        )
        for f in fails[:20]:
            print("  ", f[7])
        out["precision"] = {
            "failed": len(fails),
            "max_z_per_run": {"median": float(np.median(z)), "q99": float(np.quantile(z, 0.99)), "max": float(z.max())},
            "failures": [f[7] for f in fails],
        }
    if res and len(res[0]) > 12:
        out["largest_energy"] = energy_quantiles(res)
    return out


def energy_quantiles(res: list) -> dict:
    """Per hidden size (and all together) and kind: quantiles over runs of each run's largest group
    energy; printed."""
    table: dict = {}
    for H in sorted({r[12] for r in res}) + ["all"]:
        rows = [r for r in res if H == "all" or r[12] == H]
        for kind in dict.fromkeys(k for r in rows for k in r[11]):
            x = np.array([r[11][kind]["largest"] for r in rows if kind in r[11]])
            q = dict(zip(("median", "q99", "max"), map(float, np.quantile(x, [0.5, 0.99, 1.0]))))
            table.setdefault(str(H), {})[kind] = {"runs": len(x), **q}
            print(
                f"  largest energy, hidden {H}, {kind}: {len(x)} runs, median {q['median']:.2f}, "
                f"99% {q['q99']:.2f}, max {q['max']:.2f}"
            )
    from oracle.judge.probe import calibration

    fails = [
        r
        for r in res
        if any(k["critical"] > calibration.precision_limits(r[12])[KEY[kind]] for kind, k in r[11].items())
    ]
    print(f"  under calibration.PRECISION_LIMITS as now: {len(fails)} of {len(res)} runs fail the precision verdict")
    table["fail_under_current_limits"] = [r[0] for r in fails]
    return table


KEY = {"K writes": "k", "V writes": "v", "draft logits": "draft", "verification logits": "verify"}


def summarize_drift(res: list, label: str) -> dict:
    fails = [r for r in res if r[1]]
    z = np.array([r[3] for r in res])
    print(
        f"{len(fails)} of {len(res)} runs failed the drift verdict ({label}); "
        f"max |z| per run: median {np.median(z):.2f}, 99% {np.quantile(z, 0.99):.2f}, max {z.max():.2f}; "
        f"thresholds {min(r[4] for r in res):.2f}-{max(r[4] for r in res):.2f} over "
        f"{min(r[5] for r in res)}-{max(r[5] for r in res)} directions"
    )
    for f in fails[:20]:
        print("  ", f[2])
    return {
        "runs": len(res),
        "failed": len(fails),
        "max_abs_z_per_run": {"median": float(np.median(z)), "q99": float(np.quantile(z, 0.99)), "max": float(z.max())},
        "thresholds": [min(r[4] for r in res), max(r[4] for r in res)],
        "directions": [min(r[5] for r in res), max(r[5] for r in res)],
        "failures": [f[2] for f in fails],
        "per_run": [list(r) for r in res],
    }


def main(argv=None) -> int:
    import json
    from bf16_false_alarm_rate import parser, run_all, write_json

    p = parser(__doc__, 200)
    p.add_argument("--fault", default="", help="a kernel fault (kernels/options.py), e.g. attn_scale=1.01")
    p.add_argument("--rounding", default="", help="a rounding variant (meta_tests/band_faults.py), e.g. scale_bf16")
    p.add_argument("--no-drift", action="store_true", help="the precision verdict alone (its limit's calibration)")
    p.add_argument("--merge", nargs="+", default=None, help="merge the per_run lists of these --json files")
    args = p.parse_args(argv)
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        res = sorted({r[0]: tuple(r) for part in parts for r in part["per_run"]}.values())
        fault = parts[0].get("fault", "")
        summary = {"seed": parts[0]["seed"], "fault": fault, "merged": [p_["command"] for p_ in parts]}
    else:
        work = [
            (args.seed, i, args.fault, args.rounding, args.no_drift) for i in range(args.first, args.first + args.n)
        ]
        res = [(w[1],) + r for w, r in zip(work, run_all(one, work, args.jobs))]
        fault = "+".join(filter(None, [args.fault, args.rounding and "rd:" + args.rounding]))
        summary = {"seed": args.seed, "fault": fault}
    summary |= summarize(res, fault or "correct backend")
    write_json(args.json, "scripts/drift_false_alarm_rate.py", argv, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
