"""Plots of the H200 sweep under docs/: c(M) (ours, all of a recurrent call, against the
shared linear-layers table) and predicted vs measured block/loop ratio per C.
    python scripts/plot_results.py   (reads docs/results/sweep_planes_inflight*.json, the current sweep)
Needs matplotlib, the `plots` extra: pip install -e ".[plots]"."""
import glob
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

docs = Path(__file__).resolve().parent.parent / "docs"
sweeps = [json.load(open(f)) for f in sorted(glob.glob(str(docs / "results" / "sweep_planes_inflight*.json")))]
linear = json.load(open(docs.parent / "oracle" / "data" / "h200_ouro1.4b_linear_c_ms.json"))["c_ms"]

fig, ax = plt.subplots(figsize=(6.4, 4.2))
for s in sweeps:
    c = {int(k): v for k, v in s["ctable"]["c_ms"].items()}
    ax.plot(sorted(c), [c[m] for m in sorted(c)], "o-", label=f"ours, one recurrent call ({'%d rounds in flight' % s['in_flight'] if s.get('in_flight', 1) > 1 else 'synchronous'} sweep)")
lin = {int(k): v for k, v in linear.items()}
ax.plot(sorted(lin), [lin[m] for m in sorted(lin)], "s--", label="shared table: linear layers only")
ax.set_xscale("log", base=2)
ax.set_xlabel("rows M")
ax.set_ylabel("c(M) ms")
ax.set_title("ouro-1.4b shape, BF16, CUDA graph replay, H200, context 256")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(docs / "c_table.png", dpi=120)

fig, ax = plt.subplots(figsize=(6.4, 4.2))
for s in sweeps:
    rows = s["rows"]
    C = [r["batch"] for r in rows]
    tag = f"{s['in_flight']} in flight" if s.get("in_flight", 1) > 1 else "synchronous"
    ax.errorbar(C, [r["ratio_median"] for r in rows],
                yerr=[[r["ratio_median"] - r["ratio_ci95"][0] for r in rows],
                      [r["ratio_ci95"][1] - r["ratio_median"] for r in rows]],
                fmt="o-", capsize=3, label=f"measured, {tag} (median paired ratio, 95% CI)")
    ax.plot(C, [r["predicted_ratio"] for r in rows], "s--", label=f"predicted, {tag} (this run's c-table + heads)")
    if "predicted_ratio_one_row_per_plane" in rows[0]:
        ax.plot(C, [r["predicted_ratio_one_row_per_plane"] for r in rows], "x:",
                label=f"predicted, {tag}, every row on its own KV plane")
ax.axhline(1.0, color="gray", lw=0.8)
ax.set_xscale("log", base=2)
ax.set_xlabel("concurrency C (K=4, d=2, D=4)")
ax.set_ylabel("block / loop ms per round (> 1: loop faster)")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(docs / "ratio_pred_vs_measured.png", dpi=120)
print("wrote", docs / "c_table.png", docs / "ratio_pred_vs_measured.png")
