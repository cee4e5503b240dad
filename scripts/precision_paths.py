"""The drift and precision verdicts of the torch backend on each kernel path and with each
deliberate fault, in one process (the model and the judge built once): what `check --backend`'s
probe gives, path by path. On a GPU: the CUDA BF16 kernels with GEMV, Triton attention and fusion
each on and off; on a CPU: torch-cpu-bf16 (one path).

    python scripts/precision_paths.py --preset small [--reference jax] [--variants NAME,...] [--json PATH]

A variant is a path and an optional fault, e.g. `default`, `gemv0`, `gemv0+fp8_k`, `attn_scale=1.003`
(names: PATHS below; faults: kernels/options.py), or a rounding variant of meta_tests/band_faults.py
after `rd:` (a legitimate bfloat16 variant or a band fault, patched into the eager path: on CUDA
give the path `eager`), e.g. `rd:scale_bf16+norm_bf16`, `eager+rd:o_bits=7.1`. Prints one line per
variant: each verdict, the largest precision z, the group energies' range, the largest energy per
kind of value group against its limit and the smallest this run could detect, the drift estimate
nearest its threshold. --no-drift: the precision verdict alone (the limit's calibration).

    python scripts/precision_paths.py --table FILE.json ...

prints the precision limit's table (oracle/judge/probe/calibration.py PRECISION_LIMITS) from measurements:
this script's --json files (their correct paths and legitimate rounding variants; faults are
skipped) and scripts/drift_false_alarm_rate.py's (random models, correct or legitimate variants): per hidden size
and kind the largest group energy, and the limit, LIMIT_FACTOR times the envelope over that size and
every larger one.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX beside torch on one GPU

# the kernel paths: KernelOptions switches (unset: on where available)
PATHS = {
    "default": {},
    "gemv0": {"gemv": False},
    "triton0": {"triton_attn": False},
    "fuse0": {"fuse": False},
    "eager": {"gemv": False, "triton_attn": False, "fuse": False},
}
CORRECT = ["default", "gemv0", "triton0", "fuse0", "eager"]
FAULTED = ["fp8_k", "gemv0+fp8_k", "fp8_v", "gemv0+fp8_v", "fp8_act", "fp8_gate_up.1", "attn_scale=1.003"]


def backend(variant: str, device: str):
    from kernels.backend import TorchBackend
    from kernels.options import KernelOptions

    head, _, rounding = variant.partition("rd:")
    parts = [p for p in head.split("+") if p]
    path = parts[0] if parts and parts[0] in PATHS else "default"
    fault = "+".join(p for p in parts if p not in PATHS)
    opts = KernelOptions(**PATHS[path], fault=fault) if device == "cuda" else KernelOptions(fault=fault)
    if rounding:  # meta_tests/band_faults.py: the eager path's functions patched
        from meta_tests.band_faults import rounding_backend

        return rounding_backend(rounding, device, opts, f"torch-{device}-bf16 [{variant}]")
    return TorchBackend(device, dtype="bfloat16", name=f"torch-{device}-bf16 [{variant}]", kernel_options=opts)


def kinds_line(prec: dict) -> str:
    """Per kind of value group: its largest energy / its limit (detectable: the smallest energy this
    run could have detected in its best-measured group)."""
    return "; ".join(
        f"{k['kind']} {k['largest']:.2f}/{k['limit']:.2f} (detectable {k['detectable']:.2f})"
        for k in prec.get("kinds", [])
    )


KINDS = {"K writes": "k", "V writes": "v", "draft logits": "draft", "verification logits": "verify"}


def correct(variant: str) -> bool:
    """Whether a variant is a correct path: kernel paths and legitimate rounding variants only."""
    from meta_tests.band_faults import LEGITIMATE

    head, _, rounding = variant.partition("rd:")
    return all(t in PATHS for t in head.split("+") if t) and all(t in LEGITIMATE for t in rounding.split("+") if t)


def table(files: list) -> dict:
    """{hidden: {kind: (largest energy, where)}} over the measurement files, printed with the limits."""
    from oracle.config import PRESETS
    from oracle.judge.probe import calibration

    seen: dict = {}

    def add(hidden, kind, energy, where):
        cell = seen.setdefault(int(hidden), {})
        if KINDS[kind] not in cell or energy > cell[KINDS[kind]][0]:
            cell[KINDS[kind]] = (energy, where)

    for f in files:
        d = json.loads(Path(f).read_text())
        if "per_run" in d:  # drift_false_alarm_rate.py: one random model per run
            for r in d["per_run"]:
                for kind, k in r[11].items():
                    add(r[12], kind, k["largest"], f"{Path(f).name} run {r[0]} ({d.get('fault') or 'correct'})")
        else:
            for v, res in d["variants"].items():
                if not correct(v):
                    continue
                prec = res.get("precision") or {}
                hidden = prec.get("hidden") or PRESETS[d["preset"]].hidden_size
                for g in prec.get("groups", []):  # files from before the per-kind summary too
                    add(hidden, g["group"].split(",")[0], g["energy"], f"{d['preset']} {d['device']} {v}")
    sizes = sorted(seen)
    print("hidden  kind                  largest  (where)                                   limit")
    limits = {}
    for i, H in enumerate(sizes):
        limits[H] = {}
        for kind in ("k", "v", "draft", "verify"):
            env = max(seen[h][kind][0] for h in sizes[i:] if kind in seen[h])
            limits[H][kind] = round(calibration.LIMIT_FACTOR * env, 2)
            e, where = seen[H].get(kind, (float("nan"), "-"))
            print(f"{H:6d}  {kind:20s}  {e:7.2f}  ({where[:40]:40s})  {limits[H][kind]:.2f}")
    print(f"limits (LIMIT_FACTOR {calibration.LIMIT_FACTOR} x the envelope over each size and the larger):")
    for H in sizes:
        print(f"    ({H}, {limits[H]}),")
    return limits


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--table":
        table(argv[1:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference", choices=("numpy", "jax"), default="numpy")
    p.add_argument("--variants", default=None, help="comma-separated (default: every correct path, then the faults)")
    p.add_argument("--device", default=None, help="cuda | cpu (default: cuda where torch sees one)")
    p.add_argument("--json", default=None)
    p.add_argument("--no-drift", action="store_true", help="the precision verdict alone (ProbePlan verdicts)")
    a = p.parse_args(argv)
    import torch
    from oracle.checkpoint import build_model
    from oracle.judge.probe import probe_runs
    from oracle.judge.plans import verdict
    from oracle.judge.plans.plan import VERDICTS, probe_plan

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":  # one torch and one BLAS thread, as `check --backend` below hidden 512
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(1)
        threadpool_limits(1, user_api="blas")
    variants = a.variants.split(",") if a.variants else CORRECT + FAULTED
    if device == "cpu":
        variants = [v for v in variants if v.split("+")[0] in ("default",) or v.split("+")[0] not in PATHS]
    t0 = time.perf_counter()
    model = build_model(a.preset, a.seed)
    judge = None  # the probe's fits: the NumPy reference's, or the JAX judge's jvp and twin
    if a.reference == "jax":
        from judge_jax.backend import make_jax_backend

        judge = make_jax_backend()
    out = {
        "preset": a.preset,
        "device": device,
        "reference": a.reference,
        "build_s": round(time.perf_counter() - t0, 1),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "variants": {},
    }
    for v in variants:
        t1 = time.perf_counter()
        try:
            bk = backend(v, device)
            runs = probe_runs.probe_runs(bk, model)
            t2 = time.perf_counter()
            # --no-drift: the precision verdict alone, on the NumPy twin's energies (or the JAX judge's)
            verdicts = ("precision",) if a.no_drift else VERDICTS
            got = verdict.judge(probe_plan(bk, model, runs, judge=judge, verdicts=verdicts))
            rep, prec = got.drift, got.precision
            if prec is None:  # the probe's runs malformed, or no twin for the dtype: the verdict says which
                raise RuntimeError(got.first_failure() or "no precision verdict")
        except Exception as e:  # noqa: BLE001 -- recorded, the other variants go on
            out["variants"][v] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{v}: ERROR {type(e).__name__}: {e}", flush=True)
            continue
        t3 = time.perf_counter()
        en = [g.energy for g in prec.groups]
        out["variants"][v] = {
            "precision": prec.to_json(),
            "probe_s": round(t2 - t1, 2),
            "verdicts_s": round(t3 - t2, 2),
        }
        said = ""
        if rep is not None:
            near = max(rep.estimates, key=lambda e: abs(e.t))
            out["variants"][v]["drift"] = rep.to_json()
            said = (
                f"drift {'ok' if rep.ok else 'FAIL'} (|z| max {abs(near.t):.1f} <= {rep.threshold:.2f}? "
                f"{near.label} {1 + near.drift:.4f}); "
            )
        print(
            f"{v}: {said}precision {'ok' if prec.ok else 'FAIL'} (z max {max(g.t for g in prec.groups):.1f} vs "
            f"{prec.threshold:.2f}; energy {min(en):.2f}-{max(en):.2f}x; by kind, largest/limit: "
            f"{kinds_line(prec.to_json())}); probe {t2 - t1:.1f} s, verdicts {t3 - t2:.1f} s",
            flush=True,
        )
        for line in ("" if rep is None else rep.failure, prec.failure):
            if line:
                print("    " + line[:300], flush=True)
        if a.json:  # after each variant: a run cut by a time limit keeps what it measured
            Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
