"""The drift and precision verdicts of the torch backend on each kernel path and with each
deliberate fault, in one process (the model and the judge built once): what `check --backend`'s
probe gives, path by path. On a GPU: the CUDA BF16 kernels with GEMV, Triton attention and fusion
each on and off; on a CPU: torch-cpu-bf16 (one path).

    python scripts/precision_paths.py --preset small [--reference jax] [--variants NAME,...] [--json PATH]

A variant is a path and an optional fault, e.g. `default`, `gemv0`, `gemv0+fp8_k`, `attn_scale=1.003`
(names: PATHS below; faults: kernels/options.py). Prints one line per variant: each verdict, the
largest precision z, the group energies' range, the drift estimate nearest its threshold.
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

    parts = variant.split("+")
    path = parts[0] if parts[0] in PATHS else "default"
    fault = "+".join(p for p in parts if p not in PATHS)
    opts = KernelOptions(**PATHS[path], fault=fault) if device == "cuda" else KernelOptions(fault=fault)
    return TorchBackend(device, dtype="bfloat16", name=f"torch-{device}-bf16 [{variant}]", kernel_options=opts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference", choices=("numpy", "jax"), default="numpy")
    p.add_argument("--variants", default=None, help="comma-separated (default: every correct path, then the faults)")
    p.add_argument("--device", default=None, help="cuda | cpu (default: cuda where torch sees one)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import numpy as np
    import torch
    from oracle.checkpoint import build_model
    from oracle.judge import drift, verdict

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    variants = a.variants.split(",") if a.variants else CORRECT + FAULTED
    if device == "cpu":
        variants = [v for v in variants if v.split("+")[0] in ("default",) or v.split("+")[0] not in PATHS]
    t0 = time.perf_counter()
    model = build_model(a.preset, a.seed)
    stats_fn = dirs = energy_fn = None
    if a.reference == "jax":
        from judge_jax.backend import make_jax_backend

        judge = make_jax_backend()
        if model.cfg.hidden_size >= drift.COARSE_HIDDEN:
            dirs = drift.coarse_directions(model.cfg.num_layers)
        stats_fn = judge.drift_stats_fn(
            model, "bfloat16", basis=None if dirs is None else np.stack([c for _, c in dirs])
        )
        energy_fn = judge.precision_energy_fn(model, "bfloat16")
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
            runs = drift.probe_runs(backend(v, device), model)
            t2 = time.perf_counter()
            rep, prec = verdict.probe_verdicts(
                model, runs, "bfloat16", stats_fn=stats_fn, dirs=dirs, energy_fn=energy_fn
            )
        except Exception as e:  # noqa: BLE001 -- recorded, the other variants go on
            out["variants"][v] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{v}: ERROR {type(e).__name__}: {e}", flush=True)
            continue
        t3 = time.perf_counter()
        near = max(rep.estimates, key=lambda e: abs(e.t))
        en = [g.energy for g in prec.groups]
        out["variants"][v] = {
            "drift": rep.to_json(),
            "precision": prec.to_json(),
            "probe_s": round(t2 - t1, 2),
            "verdicts_s": round(t3 - t2, 2),
        }
        print(
            f"{v}: drift {'ok' if rep.ok else 'FAIL'} (|z| max {abs(near.t):.1f} <= {rep.threshold:.2f}? "
            f"{near.label} {1 + near.drift:.4f}); precision {'ok' if prec.ok else 'FAIL'} (z max "
            f"{max(g.t for g in prec.groups):.1f} vs {prec.threshold:.2f}; energy {min(en):.2f}-{max(en):.2f}x); "
            f"probe {t2 - t1:.1f} s, verdicts {t3 - t2:.1f} s",
            flush=True,
        )
        for line in (rep.failure, prec.failure):
            if line:
                print("    " + line[:300], flush=True)
        if a.json:  # after each variant: a run cut by a time limit keeps what it measured
            Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
