"""Plots of a `bench sweep` (its c-table against the shared linear-layers table, and predicted
vs measured block/loop ratio per C), written to the folder given by --out, nowhere else.

    python scripts/plot_results.py --sweep sweep.json --out plots/
    python scripts/plot_results.py --sweep docs/results/sweep_planes_inflight1.json \\
        --sweep docs/results/sweep_planes_inflight2.json --out docs     # the figures under docs/

Writes OUT/c_table.png and OUT/ratio_pred_vs_measured.png. A sweep file is the JSON that
`python -m oracle bench sweep ... --out sweep.json` writes. Needs matplotlib, the `plots`
extra: pip install -e ".[plots]". Bad input: one `error: ...` line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

LINEAR = Path(__file__).resolve().parent.parent / "oracle" / "data" / "h200_ouro1.4b_linear_c_ms.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Plot a bench sweep: c(M) and predicted vs measured block/loop ratio.")
    p.add_argument(
        "--sweep",
        action="append",
        required=True,
        metavar="FILE",
        help="a sweep JSON written by `python -m oracle bench sweep --out FILE` (repeat for several)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write the two PNG files into (must exist)")
    p.add_argument(
        "--linear",
        default=str(LINEAR),
        metavar="FILE",
        help="a c-table drawn beside the sweeps' (default: the shipped H200 linear-layer table)",
    )
    return p.parse_args(argv)


def read_json(path: str, what: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {what} {path}: cannot read it as JSON ({e})")
    return data


def read_sweep(path: str) -> dict:
    s = read_json(path, "--sweep")
    rows = s.get("rows") if isinstance(s, dict) else None
    if (
        not isinstance(rows, list)
        or not rows
        or not isinstance(s.get("ctable"), dict)
        or not all(
            isinstance(r, dict) and {"batch", "ratio_median", "ratio_ci95", "predicted_ratio"} <= set(r) for r in rows
        )
    ):
        raise SystemExit(
            f'error: --sweep {path}: not a `bench sweep` result (needs "ctable" and "rows" with '
            f"batch, ratio_median, ratio_ci95, predicted_ratio)"
        )
    return s


def tag(s: dict) -> str:
    return f"{s['in_flight']} in flight" if s.get("in_flight", 1) > 1 else "synchronous"


def plot_ctable(plt, sweeps, linear, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for s in sweeps:
        c = {int(k): v for k, v in s["ctable"]["c_ms"].items()}
        ax.plot(sorted(c), [c[m] for m in sorted(c)], "o-", label=f"one recurrent call ({tag(s)} sweep)")
    if linear is not None:
        lin = {int(k): v for k, v in linear["c_ms"].items()}
        ax.plot(sorted(lin), [lin[m] for m in sorted(lin)], "s--", label="shared table: linear layers only")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows M")
    ax.set_ylabel("c(M) ms")
    ax.set_title(f"{sweeps[0].get('preset', '')}, context {sweeps[0].get('context_len', '?')}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "c_table.png"
    fig.savefig(path, dpi=120)
    return path


def plot_ratios(plt, sweeps, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for s in sweeps:
        rows = s["rows"]
        C = [r["batch"] for r in rows]
        ax.errorbar(
            C,
            [r["ratio_median"] for r in rows],
            yerr=[
                [r["ratio_median"] - r["ratio_ci95"][0] for r in rows],
                [r["ratio_ci95"][1] - r["ratio_median"] for r in rows],
            ],
            fmt="o-",
            capsize=3,
            label=f"measured, {tag(s)} (median paired ratio, 95% CI)",
        )
        ax.plot(
            C, [r["predicted_ratio"] for r in rows], "s--", label=f"predicted, {tag(s)} (this run's c-table + heads)"
        )
        if "predicted_ratio_one_row_per_plane" in rows[0]:
            ax.plot(
                C,
                [r["predicted_ratio_one_row_per_plane"] for r in rows],
                "x:",
                label=f"predicted, {tag(s)}, every row on its own KV plane",
            )
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    s0 = sweeps[0]
    ax.set_xlabel(f"concurrency C (K={s0.get('K', '?')}, d={s0.get('d', '?')}, D={s0.get('D', '?')})")
    ax.set_ylabel("block / loop ms per round (> 1: loop faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "ratio_pred_vs_measured.png"
    fig.savefig(path, dpi=120)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if not out.is_dir():
        raise SystemExit(f"error: --out {out}: not an existing folder")
    sweeps = [read_sweep(f) for f in args.sweep]
    linear = read_json(args.linear, "--linear") if args.linear else None
    try:
        import matplotlib
    except ImportError:
        raise SystemExit('error: matplotlib is not installed (pip install -e ".[plots]")') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    print("wrote", plot_ctable(plt, sweeps, linear, out), plot_ratios(plt, sweeps, out))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            sys.exit(2)
        raise
