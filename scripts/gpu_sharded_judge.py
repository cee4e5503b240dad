"""The JAX FP32 judge tensor-parallel over N GPUs (jax.sharding, axis "tp") at the ouro-1.4b
shape: the same logits, KV and tokens as on one GPU, its round time, its memory per device,
and a backend (default the BF16 torch-cuda) judged by the sharded judge with the one judge.

    python scripts/gpu_sharded_judge.py [--devices 2] [--json out.json]

Needs >= --devices devices visible to JAX (on a CPU: XLA_FLAGS=--xla_force_host_platform_device_count=2
JAX_PLATFORMS=cpu ... --preset tiny --backend torch-cpu-bf16). Random weights (seed 0).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

from gpu_parity_full import time_judge  # noqa: E402
from judge_jax.backend import make_jax_backend  # noqa: E402
from judge_jax.sharding import make_mesh  # noqa: E402
from oracle.backends import load_backend  # noqa: E402
from oracle.judge.scenario import Case  # noqa: E402
from oracle.judge.cases import judge_mode, run  # noqa: E402
from oracle.judge.compare import rel_err  # noqa: E402
from oracle.model import build_model  # noqa: E402
from oracle.sampling import SamplingParams as SP  # noqa: E402

ROUNDS = [{0: 9, 1: 5, 2: 1, 3: 3, 4: 7, 5: 2, 6: 4, 7: 6}, {0: 3, 1: 9, 2: 5, 3: 1, 4: 2, 5: 8, 6: 6, 7: 4}]


def diff(a, b) -> dict:
    """Max relative difference of b's traces against a's over logits and KV; tokens equal."""
    out = {"logits": 0.0, "kv": 0.0, "tokens_equal": True}
    for ta, tb in zip(a, b):
        out["tokens_equal"] &= ta.emitted == tb.emitted
        for attr in ("verify_logits", "draft_logits"):
            for key, lg in getattr(ta, attr).items():
                out["logits"] = max(out["logits"], rel_err(getattr(tb, attr)[key], lg))
        for key, (_, k, v) in ta.kv_writes.items():
            _, k2, v2 = tb.kv_writes[key]
            out["kv"] = max(out["kv"], rel_err(k2, k), rel_err(v2, v))
    return out


def peak_gib() -> list:
    return [round((dev.memory_stats() or {}).get("peak_bytes_in_use", 0) / 2**30, 2) for dev in jax.local_devices()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--preset", default="ouro-1.4b")
    p.add_argument("--backend", default="torch-cuda", help="the backend judged by the sharded judge")
    p.add_argument("--json")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    print("jax devices:", jax.devices(), flush=True)
    model = build_model(args.preset, seed=0)
    rng = np.random.default_rng(1)
    prompts = [list(map(int, rng.integers(0, model.cfg.vocab_size, n))) for n in (1024, 1, 300, 77, 512, 5, 900, 64)]
    params = [SP(), SP(1.0, top_k=50, seed=1), SP(0.8, top_p=0.9, seed=2), SP(seed=3),
              SP(1.2, top_k=200, top_p=0.95, seed=4), SP(0.7, seed=5), SP(seed=6), SP(1.0, seed=7)]
    case = Case("sharded", prompts, params, ROUNDS, 2, 4)
    size = {"max_requests": len(prompts), "max_len": max(map(len, prompts)) + 9 * len(ROUNDS) + 1}
    one, tp = make_jax_backend(), make_jax_backend(mesh=make_mesh(args.devices))
    out = {"preset": args.preset, "devices": args.devices, "modes": {}}
    for mode in ("block", "loop"):
        out["modes"][mode] = diff(run(one, model, case, mode, **size).traces, run(tp, model, case, mode, **size).traces)
        print(mode, "1 device vs", args.devices, "devices:", out["modes"][mode], flush=True)
    out["peak_gib_per_device_after_parity"] = peak_gib()
    out["round_ms_C16_ctx1024"] = {f"{n}dev_{mode}": ms for n, bk in ((1, one), (args.devices, tp))
                                   for mode, ms in time_judge(bk, model).items()}
    print("round ms:", out["round_ms_C16_ctx1024"], flush=True)
    rep, _ = judge_mode(load_backend(args.backend), model, case, "loop", "scripts/gpu_sharded_judge.py", "sharded",
                        tp, **size)
    bad = [f"{c.name}: {c.detail}" for c in rep.checks if not c.ok]
    out["backend_vs_sharded_judge"] = {"ok": not bad, "failures": bad[:5], "max_rel_err": rep.max_rel_err,
                                       "excused": len(rep.divergences)}
    print(args.backend, "vs sharded judge:", out["backend_vs_sharded_judge"], flush=True)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    ok = not bad and all(m["tokens_equal"] and m["logits"] <= 1e-5 and m["kv"] <= 1e-5 for m in out["modes"].values())
    print(("OK" if ok else "FAILED"), "in", out["wall_s"], "s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
