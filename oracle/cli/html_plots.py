"""The probe's pictures of `check --report` (oracle/cli/html_report.py): the error energy over the
noise twin per (kind, depth, layer) as a heatmap, and the drift estimates per direction against the
band a correct engine's rounding allows. Each takes matplotlib's Figure class and the verdict's JSON,
and returns a figure, or None where the verdict has nothing to draw."""

from __future__ import annotations

import math
import textwrap

RED, GREEN, GREY, BLUE = "#c62828", "#2e7d32", "#9e9e9e", "#1565c0"


def precision_plot(Figure, verdict: dict):
    """Heatmap: rows kind x layer, columns depth; colour log2(energy over the twin), centred on the
    energy a correct backend may show (rho); the cells whose z passes the threshold outlined."""
    prec = verdict.get("precision") or {}
    groups = prec.get("groups") or []
    cells, rows, depths = {}, [], set()
    for g in groups:
        if g.get("kind") is None or g.get("depth") is None:
            continue
        row = g["kind"] + (f" · layer {g['layer']}" if g.get("layer") is not None else "")
        if row not in rows:
            rows.append(row)
        d = int(g["depth"])
        depths.add(d)
        cells[(row, d)] = g
    if not cells:
        return None
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    cols = sorted(depths)
    rho = float(prec.get("rho") or 2.0)
    thr = prec.get("threshold")
    grid = np.full((len(rows), len(cols)), np.nan)
    for (row, d), g in cells.items():
        grid[rows.index(row), cols.index(d)] = math.log2(max(float(g.get("energy", math.nan)), 1e-12))
    finite = grid[np.isfinite(grid)]
    centre = math.log2(rho)
    lo = min(float(finite.min()) if finite.size else 0.0, centre - 1.5)
    hi = max(float(finite.max()) if finite.size else 0.0, centre + 1.5)
    fig = Figure(figsize=(min(3.0 + 1.5 * len(cols), 11.0), 1.4 + 0.42 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    cmap = _cmap("RdYlGn_r").with_extremes(bad="#eeeeee")
    norm = TwoSlopeNorm(centre, lo, hi)
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
    for (row, d), g in cells.items():
        i, j = rows.index(row), cols.index(d)
        past = thr is not None and float(g.get("z", -math.inf)) > float(thr)
        bits = g.get("bits")
        text = f"{float(g.get('energy', math.nan)):.2f}x" + (f"\n{float(bits):.1f} b" if bits is not None else "")
        ax.text(
            j,
            i,
            text,
            ha="center",
            va="center",
            fontsize=8,
            linespacing=1.0,
            fontweight="bold" if past else "normal",
            color="white" if not 0.12 < float(norm(grid[i, j])) < 0.85 else "black",
        )
        if past:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=2.2))
    ax.set_xticks(range(len(cols)), [f"depth {d}" for d in cols], fontsize=9)
    ax.set_yticks(range(len(rows)), rows, fontsize=9)
    ax.tick_params(length=0)
    ax.set_xticks(np.arange(-0.5, len(cols)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(rows)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    dtype = prec.get("dtype") or verdict.get("dtype") or ""
    ax.set_title(
        f"error energy over the {dtype} noise twin (cell: energy, effective bits)"
        + (f"; outlined: z > {float(thr):.2f}, fails" if thr is not None else ""),
        fontsize=10,
        loc="left",
    )
    bar = fig.colorbar(im, ax=ax, shrink=0.9, pad=0.01)
    bar.add_lines([centre], colors=["black"], linewidths=[2.5])
    ticks = [t for t in range(math.ceil(lo), math.floor(hi) + 1)]
    bar.set_ticks(ticks, labels=[f"{2.0**t:g}x" for t in ticks], fontsize=8)
    bar.set_label(f"energy (log scale); centre: the largest limit, {rho:g}x", fontsize=8)
    return fig


def _cmap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]


def drift_plot(Figure, verdict: dict):
    """One row per direction: the estimate (scale - 1, in %) with threshold x se error bars, and the
    band a correct engine may drift into (between no and all of the weights' rounding drift,
    widened by the allowance). A row fails where |z| > threshold: its bar misses the band.
    (Over 80 lines: one matplotlib figure, its bands, bars and labels drawn in order.)"""
    drift = verdict.get("drift") or {}
    est = drift.get("estimates") or []
    if not est:
        return None
    thr = float(drift.get("threshold") or 0.0)
    n = len(est)
    fig = Figure(figsize=(11.0, 1.3 + 0.32 * n), layout="constrained")
    ax = fig.add_subplot()
    spans = []
    rows = []
    for e in est:
        x = (float(e.get("scale", math.nan)) - 1) * 100
        half = thr * float(e.get("se", 0.0)) * 100
        w = float(e.get("weights_alone", 1.0)) - 1
        a = e.get("allowance") or [0.0, 0.0]
        band = ((min(0.0, w) + float(a[0])) * 100, (max(0.0, w) + float(a[1])) * 100)
        bad = abs(float(e.get("z", 0.0))) > thr if thr else False
        rows.append((x, half, w * 100, band, bad))
        spans += [band[0], band[1]] + ([x - half, x + half] if math.isfinite(x) else [])
    # the axis covers the bands and every interval, unless one estimate lies so far out that the
    # others would shrink to a line: then it is drawn at the edge with its value
    core = [v for (x, h, _, b, _) in rows for v in (b[0], b[1])]
    width = max(core) - min(core) if core else 1.0
    left = min([v for v in spans if v >= min(core) - 8 * width] + [min(core)])
    right = max([v for v in spans if v <= max(core) + 8 * width] + [max(core)])
    pad = 0.06 * (right - left or 1.0)
    left, right = left - pad, right + pad
    for i, (x, half, w, band, bad) in enumerate(rows):
        y = n - 1 - i
        ax.add_patch(_band(band, y))
        ax.plot([w], [y], marker="|", color=BLUE, markersize=12, markeredgewidth=2)
        colour = RED if bad else "black"
        if math.isfinite(x) and left <= x <= right:
            ax.errorbar(
                [x],
                [y],
                xerr=[[min(half, x - left)], [min(half, right - x)]],
                fmt="o",
                color=colour,
                markersize=4,
                capsize=3,
                linewidth=1.4,
            )
        elif math.isfinite(x):
            edge = right if x > right else left
            ax.annotate(
                f"{x:+.3g}%",
                (edge, y),
                xytext=(-40 if x > right else 40, 0),
                textcoords="offset points",
                ha="center",
                va="center",
                color=colour,
                fontsize=8,
                arrowprops={"arrowstyle": "->", "color": colour},
            )
    ax.set_xlim(left, right)
    ax.set_ylim(-0.6, n - 0.4)
    ax.axvline(0.0, color=GREY, linewidth=0.8, linestyle="--")
    labels = [short(str(e.get("parameter", "?")), 64) for e in est]
    ax.set_yticks(range(n), labels[::-1], fontsize=8)
    ax.tick_params(axis="y", length=0)
    right_axis = ax.twinx()  # each direction's z on the right (inside the layout)
    right_axis.set_ylim(ax.get_ylim())
    right_axis.set_yticks(range(n), [f"z = {float(e.get('z', 0.0)):.1f}" for e in est][::-1], fontsize=8)
    right_axis.tick_params(length=0)
    for labels_of in (ax, right_axis):
        for label, (*_, bad) in zip(labels_of.get_yticklabels(), rows[::-1]):
            if bad:
                label.set_color(RED)
                label.set_fontweight("bold")
    ax.set_xlabel("drift: scale - 1 (%)", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(
        f"drift estimates: dot ± {thr:.2f} se; |z| > {thr:.2f} fails (the bar misses the band)\n"
        "green band: the drift rounding may give; blue tick: the weights rounded to the dtype alone",
        fontsize=9,
        loc="left",
    )
    return fig


def _band(band, y):
    from matplotlib.patches import Rectangle

    return Rectangle(
        (band[0], y - 0.32), band[1] - band[0], 0.64, facecolor="#c8e6c9", edgecolor="#81c784", linewidth=0.6
    )


def short(label: str, width: int = 52) -> str:
    """A direction's name on at most two lines."""
    lines = textwrap.wrap(label, width)
    return "\n".join(lines[:2]) + ("…" if len(lines) > 2 else "")
