"""`check --report DIR`: one HTML page of a `check --backend` verdict, the page a kernel engineer
opens first.

    write_report(verdict, directory) -> path of DIR/index.html

`verdict` is the JSON object `python -m oracle check --backend NAME --json` prints (or the same
dict from a Verdict's to_json()). The page holds, in this order:

* the headline: OK or FAILED, backend, dtype, judge, tolerance row, run time, when written;
* the failed checks, each with its detail and its reproduce line;
* the error energy over the noise twin per (kind, depth, layer) as a heatmap (the precision
  groups: energy and effective bits per cell, the groups past the threshold outlined);
* the drift estimates, one row per direction: scale ± threshold x se against the band a
  correct engine's rounding allows (weights rounded to the dtype alone, widened by the allowance);
* the first divergences: every excused one (a reference near-tie) and the first of each failed
  request check, by the reference's decision margin;
* the cases, the counts, the skipped cases and the directions the probe cannot observe.

Each plot is also written as a PNG beside the page (precision.png, drift.png, divergences.png);
the page carries them inline, so index.html alone is the whole report. A missing section
(no drift or precision report, nothing diverged) is said in a line, not drawn. matplotlib is
the optional `plots` extra: without it, an OracleError says how to install it.
"""

from __future__ import annotations

import base64
import datetime
import html
import math
import os
import re
import textwrap

from ..errors import OracleError

INSTALL = 'check --report needs matplotlib, the plots extra: pip install -e ".[plots]"'
COUNTERS = ("request_rounds", "tokens_compared", "logits_compared", "kv_writes_compared", "rng_events_compared")
MAX_FAILED = 40  # rows of the failed request checks' table
MAX_FAILED_OPEN = 6  # failed checks shown open; the rest behind a <details> fold
MAX_EXCUSED = 12  # excused divergences listed before the <details> fold
NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf|nan)"
GROUP = re.compile(r"^(?P<kind>.*?), depth (?P<depth>\d+)(?:, layer (?P<layer>\d+))?$")
DIVERGENCE = re.compile(
    r"^(?:(?P<case>.*?): )?round (?P<round>\d+) request (?P<request>\d+): (?P<what>[^:]*?): "
    r"(?:accepted )?backend (?P<got>\S+) vs reference (?P<want>[^,;( ]+)"
)
MARGIN = re.compile(r"reference margin " + NUM)
SCALES = re.compile(r"is " + NUM + r" noise scales of the twin <= " + NUM)
REPRODUCE = re.compile(r"\s*\(reproduce: (.*)\)\s*$")


def _figure_module():
    """matplotlib's Figure and the Agg canvas (no pyplot: no global state, no display)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise OracleError(INSTALL) from None
    return Figure, FigureCanvasAgg


def require_plots() -> None:
    """Raise the one-line OracleError now if matplotlib is missing (a preflight, before a long run)."""
    _figure_module()


def write_report(verdict: dict, directory: str) -> str:
    """Write DIR/index.html (and the plots as PNG files beside it); return the page's path."""
    Figure, Canvas = _figure_module()
    os.makedirs(directory, exist_ok=True)
    plots = {}
    for name, draw in (("precision", _precision_plot), ("drift", _drift_plot), ("divergences", _divergence_plot)):
        fig = draw(Figure, verdict)
        path = os.path.join(directory, f"{name}.png")
        if fig is None:
            if os.path.exists(path):  # a stale plot of an earlier report in the same folder
                os.remove(path)
            continue
        Canvas(fig)
        fig.savefig(path, dpi=100)
        with open(path, "rb") as f:
            plots[name] = base64.b64encode(f.read()).decode("ascii")
    page = os.path.join(directory, "index.html")
    with open(page, "w", encoding="utf-8") as f:
        f.write(_page(verdict, plots))
    return page


# ---------------------------------------------------------------------------------------------
# reading the verdict


def _failed(verdict: dict) -> list[dict]:
    return [c for c in verdict.get("checks") or [] if not c.get("ok", True)]


def _split_reproduce(detail: str) -> tuple[str, str]:
    m = REPRODUCE.search(detail or "")
    return (detail[: m.start()], m.group(1)) if m else (detail or "", "")


def _counters(verdict: dict) -> dict:
    src = verdict.get("counters") if isinstance(verdict.get("counters"), dict) else verdict
    return {k: src[k] for k in COUNTERS if k in src}


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _divergences(verdict: dict) -> list[dict]:
    """Every excused divergence and the first divergence of every failed token or decision check:
    where (case, round, request), what, backend vs reference, the reference's margin and, for the
    excused ones, the margin in noise scales of the twin with its limit."""
    rows = []
    for line in verdict.get("excused_divergences") or []:
        m = DIVERGENCE.search(line)
        if not m:
            continue
        s = SCALES.search(line)
        rows.append(
            {
                **m.groupdict(),
                "excused": True,
                "line": line,
                "margin": _number(MARGIN.search(line).group(1)) if MARGIN.search(line) else math.nan,
                "scales": _number(s.group(1)) if s else math.nan,
                "limit": _number(s.group(2)) if s else math.nan,
            }
        )
    for c in _failed(verdict):
        if not str(c.get("name", "")).endswith((": tokens", ": decisions")):
            continue
        detail, _ = _split_reproduce(c.get("detail", ""))
        m = DIVERGENCE.search(detail)
        if not m:
            continue
        mm = MARGIN.search(detail)
        rows.append(
            {
                **m.groupdict(),
                "excused": False,
                "line": detail,
                "check": c.get("name", ""),
                "margin": _number(mm.group(1)) if mm else math.nan,
                "scales": math.nan,
                "limit": math.nan,
            }
        )
    for r in rows:
        r["case"] = r["case"] or ""
    return rows


# ---------------------------------------------------------------------------------------------
# the plots

RED, GREEN, GREY, BLUE = "#c62828", "#2e7d32", "#9e9e9e", "#1565c0"


def _precision_plot(Figure, verdict: dict):
    """Heatmap: rows kind x layer, columns depth; colour log2(energy over the twin), centred on the
    energy a correct backend may show (rho); the cells whose z passes the threshold outlined."""
    prec = verdict.get("precision") or {}
    groups = prec.get("groups") or []
    cells, rows, depths = {}, [], set()
    for g in groups:
        m = GROUP.match(str(g.get("group", "")))
        if not m:
            continue
        row = m["kind"] + (f" · layer {m['layer']}" if m["layer"] is not None else "")
        if row not in rows:
            rows.append(row)
        d = int(m["depth"])
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


def _drift_plot(Figure, verdict: dict):
    """One row per direction: the estimate (scale - 1, in %) with threshold x se error bars, and the
    band a correct engine may drift into (between no and all of the weights' rounding drift,
    widened by the allowance). A row fails where |z| > threshold: its bar misses the band."""
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
    labels = [_short(str(e.get("parameter", "?")), 64) for e in est]
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


def _short(label: str, width: int = 52) -> str:
    """A direction's name on at most two lines."""
    lines = textwrap.wrap(label, width)
    return "\n".join(lines[:2]) + ("…" if len(lines) > 2 else "")


def _divergence_plot(Figure, verdict: dict):
    """Every first divergence by the reference's decision margin (log scale): the excused ones
    (reference near-ties) and those of the failed request checks, one row per case, its block
    run above its loop run."""
    rows = [r for r in _divergences(verdict) if math.isfinite(r["margin"]) and r["margin"] > 0]
    if not rows:
        return None
    labels = []
    for r in rows:
        case, mode = _case_mode(r["case"])
        r["row"], r["mode"] = case, mode
        if case not in labels:
            labels.append(case)
    n = len(labels)
    fig = Figure(figsize=(11.0, 1.5 + 0.42 * n), layout="constrained")
    ax = fig.add_subplot()
    shift = {"block": 0.17, "loop": -0.17}
    for excused, colour, marker, name in (
        (True, GREY, "o", "excused (a reference near-tie)"),
        (False, RED, "X", "failed check"),
    ):
        for mode, face in (("block", colour), ("loop", "white"), ("", colour)):
            pts = [r for r in rows if r["excused"] is excused and (r["mode"] if r["mode"] in shift else "") == mode]
            if not pts:
                continue
            ys = [n - 1 - labels.index(r["row"]) + shift.get(mode, 0.0) for r in pts]
            ax.scatter(
                [r["margin"] for r in pts],
                ys,
                marker=marker,
                s=40 if excused else 64,
                facecolors=face,
                edgecolors=colour if excused else "black",
                linewidths=1.0,
                zorder=3,
                label=f"{name}{', ' + mode if mode else ''}: {len(pts)}",
            )
    ax.set_xscale("log")
    lo, hi = min(r["margin"] for r in rows), max(r["margin"] for r in rows)
    left, right = 10 ** math.floor(math.log10(lo) - 0.2), 10 ** math.ceil(math.log10(hi) + 0.2)
    ax.set_xlim(min(left, right / 1e3), right)  # at least three decades: never a sliver of one
    ax.set_yticks(range(n), [_short(s or "(no case)", 60) for s in labels][::-1], fontsize=8)
    ax.set_yticks([k + 0.5 for k in range(n - 1)], minor=True)
    ax.tick_params(axis="y", which="minor", length=0)
    ax.set_ylim(-0.5, n - 0.5)
    ax.set_xlabel("the reference's decision margin at the divergence (log scale; a near-tie is small)", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.grid(axis="y", which="minor", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(axis="y", which="major", length=0)
    fig.legend(fontsize=8, loc="outside lower center", ncols=4, frameon=False)
    ax.set_title(
        "the first divergence of each request from the reference's tokens (filled: block run, hollow: loop run)",
        fontsize=10,
        loc="left",
    )
    return fig


def _case_mode(label: str) -> tuple[str, str]:
    """'CASE [block]' -> ('CASE', 'block')."""
    m = re.match(r"^(.*) \[([^\]]+)\]$", label)
    return (m[1], m[2]) if m else (label, "")


# ---------------------------------------------------------------------------------------------
# the page

CSS = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; color: #212121; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 24px 40px; }
header { padding: 14px 24px; color: white; }
header.ok { background: #2e7d32; } header.failed { background: #c62828; }
header h1 { margin: 0 auto; max-width: 1180px; font-size: 26px; }
header p { margin: 4px auto 0; max-width: 1180px; font-size: 14px; opacity: 0.95; }
h2 { font-size: 18px; margin: 26px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 3px; }
.summary > span { display: inline-block; margin: 0 18px 4px 0; }
.pass { color: #2e7d32; font-weight: bold; } .fail { color: #c62828; font-weight: bold; }
.check { border-left: 4px solid #c62828; background: #fff5f5; padding: 6px 10px; margin: 8px 0; }
.check b { display: block; }
pre { background: #f4f4f4; padding: 4px 8px; margin: 4px 0 0; white-space: pre-wrap; word-break: break-all;
      font: 12px/1.35 Menlo, Consolas, monospace; }
img { max-width: 100%; display: block; margin: 6px 0; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 2px 12px 2px 0; text-align: left; vertical-align: top; }
ul { margin: 4px 0; padding-left: 20px; } li { margin: 2px 0; }
.muted { color: #757575; } .small { font-size: 12px; }
"""


def _e(x) -> str:
    return html.escape(str(x))


def _badge(ok) -> str:
    return '<span class="pass">PASS</span>' if ok else '<span class="fail">FAIL</span>'


def _page(v: dict, plots: dict) -> str:
    ok = bool(v.get("ok"))
    failed = _failed(v)
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    judge = v.get("judge", "?")
    judge = "the FP32 reference" if judge == "reference" else f"the {judge} judge"
    seconds = v.get("seconds")
    head = [
        f"backend <b>{_e(v.get('backend', '?'))}</b>",
        f"dtype <b>{_e(v.get('dtype', '?'))}</b>" + (" (exact)" if v.get("exact") else ""),
        f"judged against {_e(judge)}" + (f", tolerance row {_e(v['tolerance_row'])}" if v.get("tolerance_row") else ""),
        (f"ran {float(seconds):.1f} s" if seconds is not None else ""),
        f"written {_e(when)}",
    ]
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{'OK' if ok else 'FAILED'}: {_e(v.get('backend', 'check'))}</title>",
        f"<style>{CSS}</style></head><body>",
        f'<header class="{"ok" if ok else "failed"}"><h1>{"OK" if ok else "FAILED"}: '
        f"{_e(v.get('backend', '?'))}</h1><p>{' · '.join(h for h in head if h)}</p></header><main>",
    ]
    out += _shrunk_section(v.get("shrunk"))
    out += _summary(v, failed)
    out += _failed_section(failed)
    out += _precision_section(v, plots.get("precision"))
    out += _drift_section(v, plots.get("drift"))
    out += _divergence_section(v, plots.get("divergences"))
    out += _cases_section(v)
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"


def _summary(v: dict, failed: list) -> list[str]:
    cases = v.get("cases") or []
    checks = v.get("checks") or []
    passed = sum(1 for c in cases if c.get("ok"))
    tone = "pass" if passed == len(cases) else "fail"
    bits = [
        f"cases: <span class='{tone}'>{passed}/{len(cases)}</span> pass",
        f"checks: <span class='{'fail' if failed else 'pass'}'>{len(failed)}</span> of {len(checks)} failed",
    ]
    for name in ("drift", "precision"):
        sec = v.get(name)
        if isinstance(sec, dict):
            bits.append(f"{name}: {_badge(sec.get('ok'))}")
    err = v.get("max_rel_err") or {}
    if err:
        bits.append("max rel. error: " + ", ".join(f"{_e(k)} {float(x):.3g}" for k, x in err.items()))
    counts = _counters(v)
    line2 = " · ".join(f"{k.replace('_', ' ')}: {val}" for k, val in counts.items())
    excused = len(v.get("excused_divergences") or [])
    line2 += (" · " if line2 else "") + f"excused divergences: {excused}"
    return [
        '<div class="summary">' + "".join(f"<span>{b}</span>" for b in bits) + "</div>",
        f'<div class="summary muted small">{line2}</div>',
    ]


def _merged_failures(failed: list) -> list[dict]:
    """The failed checks with the runs of one case that failed alike (block and loop, say) as one:
    {name, detail, reproduce, checks} in the order of their first check."""
    out, seen = [], {}
    for c in failed:
        name = str(c.get("name", "?"))
        detail, reproduce = _split_reproduce(str(c.get("detail", "")))
        m = re.match(r"^(.*) \[([^\]]+)\]: ([^:]+)$", name)
        if m and detail.startswith(f"{m[1]} [{m[2]}]: "):
            detail = detail[len(f"{m[1]} [{m[2]}]: ") :]
        key = (m[1], m[3], detail, reproduce) if m else (name, "", detail, reproduce)
        if key in seen:
            seen[key]["modes"].append(m[2])
            seen[key]["checks"] += 1
            continue
        seen[key] = {
            "case": m[1] if m else "",
            "check": m[3] if m else name,
            "modes": [m[2]] if m else [],
            "detail": detail,
            "reproduce": reproduce,
            "checks": 1,
        }
        out.append(seen[key])
    for f in out:
        f["name"] = f"{f['case']} [{', '.join(f['modes'])}]: {f['check']}" if f["modes"] else f["check"]
    return out


def _failed_section(failed: list) -> list[str]:
    if not failed:
        return ["<h2>Failed checks</h2><p>None.</p>"]
    merged = _merged_failures(failed)
    out = [f"<h2>Failed checks ({len(failed)})</h2>"]
    cards = [
        f'<div class="check"><b>{_e(f["name"])}</b>{_e(f["detail"])}'
        + (f"<pre>{_e(f['reproduce'])}</pre>" if f["reproduce"] else "")
        + "</div>"
        for f in merged
    ]
    out += cards[:MAX_FAILED_OPEN]
    if len(cards) > MAX_FAILED_OPEN:
        out.append(
            f"<details><summary>{len(cards) - MAX_FAILED_OPEN} more</summary>"
            + "".join(cards[MAX_FAILED_OPEN:])
            + "</details>"
        )
    return out


def _shrunk_section(s) -> list[str]:
    """The failing check's smallest case (check --backend's `shrunk`, issue 44), first on the page."""
    if not isinstance(s, dict):
        return []
    how = f"{s.get('candidates', 0)} candidate runs in {float(s.get('seconds', 0)):.1f} s"
    if s.get("partial"):
        how += f"; partial: the budget of {s.get('budget_s')} s ran out"
    key = f" ({s['key']})" if s.get("key") else ""
    out = [f"<h2>Shrunk: the smallest case that still fails [{_e(s.get('class', '?'))}]{_e(key)}</h2>"]
    out.append(f'<p class="muted small">{_e(how)}</p>')
    for label, side in (("shrunk", s.get("shrunk")), ("original", s.get("original"))):
        if not isinstance(side, dict):
            out.append("<p>No smaller case failed the same way.</p>")
            continue
        out.append(
            f'<div class="check"><b>{label}: {_e(side.get("description", ""))}</b>{_e(side.get("failure", ""))}'
            + (f"<pre>{_e(side['reproduce'])}</pre>" if side.get("reproduce") else "")
            + "</div>"
        )
    return out


def _unless_listed(failure: str | None, v: dict) -> list[str]:
    """A section's failure line, unless a failed check above says it already."""
    if not failure or any(c.get("detail") == failure for c in _failed(v)):
        return []
    return [f'<div class="check">{_e(_split_reproduce(failure)[0])}</div>']


def _img(data: str, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _precision_section(v: dict, png: str | None) -> list[str]:
    prec = v.get("precision")
    out = ["<h2>Precision: error energy over the noise twin</h2>"]
    if not isinstance(prec, dict):
        return out + ["<p class='muted'>No precision report in this verdict.</p>"]
    thr, kinds = prec.get("threshold"), prec.get("kinds") or []
    limits = ", ".join(f"{_e(k['kind'])} {float(k['limit']):g}x" for k in kinds if k.get("limit") is not None)
    out.append(
        f"<p>{_badge(prec.get('ok'))} "
        + (
            f"{prec.get('requests', '?')} probe requests; a group fails where its energy exceeds its kind's "
            f"limit ({limits}) at z &gt; {float(thr):.2f} (family-wise false-alarm rate "
            f"{prec.get('family_alpha', '?')})."
            if thr is not None and limits
            else ""
        )
        + "</p>"
    )
    out += _unless_listed(prec.get("failure"), v)
    out.append(_img(png, "precision heatmap") if png else "<p class='muted'>No groups to draw.</p>")
    return out


def _drift_section(v: dict, png: str | None) -> list[str]:
    drift = v.get("drift")
    out = ["<h2>Drift: systematic scale errors per direction</h2>"]
    if not isinstance(drift, dict):
        return out + ["<p class='muted'>No drift report in this verdict.</p>"]
    est = drift.get("estimates") or []
    thr = drift.get("threshold")
    out.append(
        f"<p>{_badge(drift.get('ok'))} {len(est)} directions fitted over {drift.get('requests', '?')} "
        f"probe requests ({drift.get('values', '?')} values)"
        + (
            f"; |z| &gt; {float(thr):.2f} fails (family-wise false-alarm rate {drift.get('family_alpha', '?')})"
            if thr is not None
            else ""
        )
        + ".</p>"
    )
    out += _unless_listed(drift.get("failure"), v)
    out.append(_img(png, "drift estimates") if png else "<p class='muted'>No estimates to draw.</p>")
    if drift.get("invisible"):
        out.append(f"<p class='small muted'>Not observable by the probe: {_e(', '.join(drift['invisible']))}.</p>")
    return out


def _divergence_section(v: dict, png: str | None) -> list[str]:
    rows = _divergences(v)
    out = ["<h2>First divergences</h2>"]
    if not rows:
        return out + ["<p class='muted'>No token diverged from the reference's.</p>"]
    if png:
        out.append(_img(png, "first divergences"))
    bad = [r for r in rows if not r["excused"]]
    if bad:
        out.append(
            f"<p><b>Failed request checks ({len(bad)})</b>: the first divergence of each.</p><table>"
            "<tr><th>check</th><th>round</th><th>request</th><th>where</th><th>backend</th>"
            "<th>reference</th><th>ref. margin</th></tr>"
        )
        out += [
            f"<tr><td>{_e(r.get('check', ''))}</td><td>{r['round']}</td><td>{r['request']}</td>"
            f"<td>{_e(r['what'])}</td><td class='fail'>{_e(r['got'])}</td><td>{_e(r['want'])}</td>"
            f"<td>{r['margin']:.3g}</td></tr>"
            for r in bad[:MAX_FAILED]
        ]
        out.append("</table>")
    ok = [r for r in rows if r["excused"]]
    if ok:
        out.append(
            f"<p><b>Excused divergences ({len(ok)})</b>: reference near-ties, compared up to the "
            "divergence and not after.</p>"
        )
        items = [f"<li>{_e(r['line'])}</li>" for r in ok]
        out.append("<ul class='small'>" + "".join(items[:MAX_EXCUSED]) + "</ul>")
        if len(items) > MAX_EXCUSED:
            out.append(
                f"<details><summary class='small'>{len(items) - MAX_EXCUSED} more</summary>"
                "<ul class='small'>" + "".join(items[MAX_EXCUSED:]) + "</ul></details>"
            )
    return out


def _cases_section(v: dict) -> list[str]:
    out = ["<h2>Cases</h2>"]
    cases = v.get("cases") or []
    if cases:
        out.append(
            "<table>"
            + "".join(f"<tr><td>{_badge(c.get('ok'))}</td><td>{_e(c.get('name', '?'))}</td></tr>" for c in cases)
            + "</table>"
        )
    else:
        out.append("<p class='muted'>No cases.</p>")
    for s in v.get("skipped") or []:
        out.append(f"<p class='small muted'>skipped: {_e(s)}</p>")
    info = [f"{k}: {_e(v[k])}" for k in ("layers", "threads", "threads_from", "timeout_s") if k in v]
    if info:
        out.append(f"<p class='small muted'>{' · '.join(info)}</p>")
    return out
