"""Register rows against tensor-core tiles for recurrent calls of 2..8 rows (kernels/gemv.py), at
the ouro-1.4b shape on a GPU: c(M) of each variant (graph replay, median), in the order A B C ..
repeated --passes times in one process, and each variant's call against variant A's on the same
inputs (relative error of the output).

A variant is a set of GEMV tile overrides (KernelOptions.gemv_config); "tc" is none (every call of
2..16 rows on the 16-row tensor-core tiles). "rowN" gives register rows at B = 2, 4, 8 with
BLOCK_N = N * B / 2 weight rows per program (qkv and gate_up: half, they read two rows per column),
so each row of the input loaded from L2 serves N * B / 2 weight rows.

    python scripts/gpu_register_rows.py --json out/register_rows.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.calls import measure_c_table  # noqa: E402
from kernels.kvplanes import KVPlanes  # noqa: E402
from kernels.model import PackedModel  # noqa: E402
from kernels.options import KernelOptions  # noqa: E402
from kernels.triton_attention import span_bucket  # noqa: E402
from kernels.weights import TorchWeights  # noqa: E402
from oracle.config import preset  # noqa: E402


def register_tiles(per_row: int, bk: dict, warps: int = 4, stages: int = 3) -> dict:
    """{name/B: tiles} for B = 2, 4, 8: BLOCK_N = per_row * B / 2 (halved for the paired kernels)."""
    out = {}
    for B in (2, 4, 8):
        n = max(1, per_row * B // 2)
        for name in ("qkv", "o", "gate_up", "down"):
            bn = max(2, n // 2) if name in ("qkv", "gate_up") else max(2, n)
            out[f"{name}/{B}"] = (bn, bk[B], warps, stages)
    return out


VARIANTS = {
    "tc": {},
    "row2": register_tiles(2, {2: 1024, 4: 1024, 8: 512}),
    "row4": register_tiles(4, {2: 1024, 4: 512, 8: 256}),
    "row8": register_tiles(8, {2: 512, 4: 256, 8: 256}),
}


def accuracy(rows, ctx: int, variants: dict) -> dict:
    """Each variant's call output against the first variant's, same weights, KV and inputs."""
    cfg, dev = preset("ouro-1.4b"), torch.device("cuda")
    w = TorchWeights.random(cfg, dev, torch.bfloat16, 0)
    kv = KVPlanes(cfg, 1, max(rows), ctx + 1, dev, torch.bfloat16)
    g = torch.Generator(device=dev).manual_seed(5)
    kv.k.copy_(torch.randn(kv.k.shape, generator=g, device=dev) * 0.5)
    kv.v.copy_(torch.randn(kv.v.shape, generator=g, device=dev) * 0.5)
    span = span_bucket(ctx + 1, ctx + 1)
    out = {}
    for M in rows:
        r = torch.arange(M, device=dev)
        h = torch.randn(M, cfg.hidden_size, generator=g, device=dev).to(torch.bfloat16)
        pos = torch.full((M,), ctx, device=dev)
        ys = {}
        for name, tiles in variants.items():
            m = PackedModel(w, kv, KernelOptions(gemv_config=tiles))
            ys[name] = m.recurrent_call(h.clone(), pos, r, r, r, 1, span).float()
        ref = ys[next(iter(variants))]
        out[str(M)] = {k: round(((y - ref).norm() / ref.norm()).item(), 6) for k, y in ys.items()}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="1,2,3,4,6,8,16")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json")
    args = p.parse_args(argv)
    rows = [int(x) for x in args.rows.split(",")]
    names = args.variants.split(",")
    res = {"rows": rows, "context": args.context, "variants": {n: VARIANTS[n] for n in names}, "c_ms": {}}
    res["accuracy_vs_" + names[0]] = accuracy([m for m in rows if 1 < m <= 8], args.context, res["variants"])
    print(json.dumps(res["accuracy_vs_" + names[0]]), flush=True)
    for k in range(args.passes):
        for n in names:
            t = measure_c_table(
                "ouro-1.4b",
                rows,
                args.context,
                repeats=args.repeats,
                kernel_options=KernelOptions(gemv_config=VARIANTS[n]),
            )["c_ms"]
            res["c_ms"].setdefault(n, []).append(t)
            print(f"pass {k} {n}: {t}", flush=True)
    base = names[0]
    res["median_ms"] = {n: {str(M): statistics.median(t[str(M)] for t in res["c_ms"][n]) for M in rows} for n in names}
    pairs = lambda n, M: [a[str(M)] / b[str(M)] for a, b in zip(res["c_ms"][n], res["c_ms"][base])]  # noqa: E731
    ratio = {n: {str(M): round(statistics.median(pairs(n, M)), 4) for M in rows} for n in names}
    res["paired_ratio_vs_" + base] = ratio
    print(json.dumps({k: res[k] for k in ("median_ms", "paired_ratio_vs_" + base)}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
