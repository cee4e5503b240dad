"""The comparisons' pictures of `check --report` (oracle/cli/html_report.py), one per failure class:

* KV writes: the relative error over (depth, layer) x position, one panel per comparison of the first
  failing case (block vs reference, loop vs reference, loop vs block);
* logits: the relative error over the offset, per comparison and check (draft, verification);
* tokens: the first divergence of each request, by round, one mark per comparison.

They read the verdict's "maps" (Verdict.error_maps: per comparison its errors by (depth, layer,
position) and by offset, and its token failures' records) and "excused_records"; never its text.
Each returns a figure, or None where there is nothing of its class to draw."""

from __future__ import annotations

import html
import math

RED, GREY, BLUE, ORANGE = "#c62828", "#9e9e9e", "#1565c0", "#ef6c00"
MAX_FAILED = 40  # rows of the failed token checks' table
MAX_EXCUSED = 12  # excused divergences listed before the <details> fold
MAX_PANELS = 3  # comparisons drawn side by side: a case's block, loop and block-vs-loop
MAX_ROWS = 30  # requests in the divergence plot
# a comparison's mode -> (marker, face, edge, legend): what each mark of the divergence plot is
MARKS = {
    "block": ("o", BLUE, BLUE, "block run vs the reference"),
    "loop": ("s", ORANGE, ORANGE, "loop run vs the reference"),
    "block vs loop": ("D", "white", "black", "loop run vs the block run (the backend against itself)"),
    "": ("o", RED, RED, "the backend vs the reference"),
}


def _inf(x) -> float:
    return math.inf if x == "inf" else float(x)


def panels(verdict: dict, kind: str) -> list[dict]:
    """The comparisons to draw for `kind` ("kv" or "logits"): those of the first failing case that
    hold errors of that kind (the first comparison where none failed), at most MAX_PANELS; none
    where every value of that kind is equal bit for bit (an all-white picture says nothing)."""
    maps = [m for m in verdict.get("maps") or [] if any(_inf(cell[-2]) > 0 for cell in m.get(kind) or [])]
    bad = [m for m in maps if not m.get("ok", True)]
    if not bad:
        return maps[:1]
    case = bad[0].get("case", "")
    return [m for m in maps if m.get("case", "") == case and not m.get("ok", True)][:MAX_PANELS]


def _title(m: dict) -> str:
    mode = m.get("mode") or ""
    what = MARKS.get(mode, MARKS[""])[3]
    return f"{m.get('case') or m.get('label', '')}\n{what}"


def kv_plot(Figure, verdict: dict):
    """Heatmaps of the KV writes' relative error, rows (depth, layer), columns position (the largest
    over rounds and requests); colour: the error over its tolerance where there is one, else the
    error itself (exact); black x: a write one side lacks; white: equal bit for bit."""
    shown = panels(verdict, "kv")
    if not shown:
        return None
    import numpy as np
    from matplotlib.colors import LogNorm

    grids = []
    for m in shown:
        rows = sorted({(d, lay) for d, lay, *_ in m["kv"]})
        cols = sorted({p for _, _, p, *_ in m["kv"]})
        grid = np.full((len(rows), len(cols)), np.nan)
        for d, lay, p, err, bound in m["kv"]:
            err = _inf(err)
            grid[rows.index((d, lay)), cols.index(p)] = err / bound if bound and math.isfinite(err) else err
        grids.append((m, rows, cols, grid, any(b for *_, b in m["kv"])))
    finite = np.concatenate([g[np.isfinite(g) & (g > 0)] for _, _, _, g, _ in grids])
    lo = max(float(finite.min()), 1e-12) if finite.size else 1e-8
    hi = max(float(finite.max()), lo * 10) if finite.size else 1.0
    height = 1.6 + 0.3 * max(len(r) for _, r, _, _, _ in grids)
    fig = Figure(figsize=(11.0, min(height * len(grids), 13.0)), layout="constrained")
    axes = fig.subplots(len(grids), 1, squeeze=False)[:, 0]
    cmap = _cmap("inferno_r").with_extremes(bad="white")
    for ax, (m, rows, cols, grid, ratio) in zip(axes, grids):
        shown_grid = np.where(np.isfinite(grid) & (grid > 0), grid, np.nan)
        im = ax.imshow(np.ma.masked_invalid(shown_grid), cmap=cmap, norm=LogNorm(lo, hi), aspect="auto")
        ys, xs = np.nonzero(np.isinf(grid))
        ax.scatter(xs, ys, marker="x", color="black", s=30, linewidths=1.6, label="a write one side lacks")
        if ratio:  # the tolerance: cells past it outlined
            ys, xs = np.nonzero(np.isfinite(grid) & (grid > 1))
            ax.scatter(xs, ys, marker="s", facecolors="none", edgecolors=RED, s=60, linewidths=1.2)
        ax.set_yticks(range(len(rows)), [f"depth {d} · layer {lay}" for d, lay in rows], fontsize=8)
        step = max(1, len(cols) // 24)
        ax.set_xticks(range(0, len(cols), step), [str(p) for p in cols[::step]], fontsize=7)
        ax.set_xlabel("position", fontsize=8)
        ax.set_title(_title(m), fontsize=9, loc="left")
        bar = fig.colorbar(im, ax=ax, shrink=0.9, pad=0.01)
        bar.set_label("error / tolerance" if ratio else "relative error", fontsize=8)
    fig.suptitle(
        "KV writes: relative error per (depth, layer) and position, the largest over rounds and requests\n"
        "white: equal; black x: a write one side lacks; red square: past the tolerance",
        fontsize=10,
        x=0.01,
        ha="left",
    )
    return fig


def logits_plot(Figure, verdict: dict):
    """The logits' relative error over the offset (the largest over rounds and requests): one mark per
    comparison and check, side by side at each offset; a short bar: the tolerance (none for an exact
    backend); the grey line: equal bit for bit (a log axis has no 0)."""
    shown = panels(verdict, "logits")
    if not shown:
        return None
    fig = Figure(figsize=(11.0, 3.8), layout="constrained")
    ax = fig.add_subplot()
    colours = [BLUE, ORANGE, "black"]
    floor = 1e-12
    width = 0.7 / (2 * len(shown))
    offsets = set()
    for n, m in enumerate(shown):
        for k, (check, marker) in enumerate((("draft_logits", "^"), ("verify_logits", "o"))):
            pts = sorted((o, max(_inf(e), floor), b) for c, o, e, b in m["logits"] if c == check)
            if not pts:
                continue
            dx = (2 * n + k + 0.5) * width - 0.35
            offsets |= {p[0] for p in pts}
            name = MARKS.get(m.get("mode") or "", MARKS[""])[3]
            ax.scatter([p[0] + dx for p in pts], [min(p[1], 1e6) for p in pts], marker=marker, s=36,
                       color=colours[n % 3], label=f"{check.replace('_', ' ')}: {name}", zorder=3)  # fmt: skip
            for o, _, b in pts:
                if b:
                    ax.plot([o + dx - width / 2, o + dx + width / 2], [b, b], color=RED, linewidth=1.5)
    ys = [max(_inf(e), floor) for m in shown for _, _, e, _ in m["logits"]]
    if min(ys) <= floor:  # some vector equal bit for bit: the line it is drawn on
        ax.axhline(floor, color=GREY, linewidth=1.0)
    ax.set_yscale("log")
    ax.set_ylim(bottom=min(ys) / 10, top=max(ax.get_ylim()[1], min(ys) * 1e3))
    ax.set_xticks(sorted(offsets))
    ax.set_xlabel("offset in the round", fontsize=9)
    ax.set_ylabel("relative error", fontsize=9)
    ax.grid(color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    fig.legend(fontsize=7, loc="outside right center", frameon=False)
    case = shown[0].get("case") or shown[0].get("label", "")
    ax.set_title(
        f"logits of {case}: relative error by offset, the largest over rounds and requests\n"
        f"triangle: draft logits, circle: verification logits; red bar: the tolerance; on the grey line "
        f"({floor:g}): equal bit for bit",
        fontsize=9,
        loc="left",
    )
    return fig


def divergences(verdict: dict) -> list[dict]:
    """Every failed token check's first divergence per request (the maps' records) and every excused
    one, as records (report.Failure.to_json), failed first."""
    rows = [r for m in verdict.get("maps") or [] for r in m.get("tokens") or []]
    return rows + [dict(r, excused=True) for r in verdict.get("excused_records") or []]


def divergence_plot(Figure, verdict: dict):
    """The first divergence of each request (one row per case and request), by round: one mark per
    comparison in which it diverged (MARKS), the excused ones grey; the label is the offset."""
    rows = divergences(verdict)
    if not rows:
        return None
    keys = list(dict.fromkeys((r.get("case") or "", r.get("request")) for r in rows))[:MAX_ROWS]
    n = len(keys)
    fig = Figure(figsize=(11.0, 1.7 + 0.3 * n), layout="constrained")
    ax = fig.add_subplot()
    shift = {"block": -0.22, "loop": 0.0, "block vs loop": 0.22, "": 0.0}
    seen = set()
    for r in rows:
        key = (r.get("case") or "", r.get("request"))
        if key not in keys:
            continue
        mode = r.get("mode") or ""
        marker, face, edge, name = MARKS.get(mode, MARKS[""])
        if r.get("excused"):
            face, edge, name = GREY, GREY, f"excused near-tie ({name})"
        x, y = (r.get("round") or 0) + shift.get(mode, 0.0), n - 1 - keys.index(key)
        counted = mode in ("block", "loop", "block vs loop") and not r.get("excused")  # in the legend below
        ax.scatter([x], [y], marker=marker, s=60, facecolors=face, edgecolors=edge, linewidths=1.3, zorder=3,
                   label=None if name in seen or counted else name)  # fmt: skip
        seen.add(name)
        ax.annotate(f"{r.get('offset')}", (x, y), xytext=(0, 6), textcoords="offset points", ha="center", fontsize=7)
    rounds = [r.get("round") or 0 for r in rows]
    ax.set_xlim(min(rounds) - 0.6, max(rounds) + 0.6)
    ax.set_xticks(range(min(rounds), max(rounds) + 1))
    ax.set_xlabel("round (the number above a mark: the offset whose token differs)", fontsize=9)
    labels = [f"{_cut(c, 48)} · request {q}" for c, q in keys]
    ax.set_yticks(range(n), labels[::-1], fontsize=8)
    ax.set_ylim(-0.7, n - 0.3)
    ax.grid(color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    for mode in ("block", "loop", "block vs loop"):  # every kind of mark in the legend, drawn or not
        marker, face, edge, name = MARKS[mode]
        count = sum(1 for r in rows if (r.get("mode") or "") == mode and not r.get("excused"))
        ax.scatter([], [], marker=marker, s=60, facecolors=face, edgecolors=edge, label=f"{name}: {count}")
    fig.legend(fontsize=8, loc="outside lower center", ncols=2, frameon=False)
    ax.set_title(
        "the first divergence of each request's tokens, one mark per comparison it diverged in\n"
        "no mark of a comparison: that run's tokens agree (a loop-only bug: no blue circle)",
        fontsize=9,
        loc="left",
    )
    return fig


def divergence_tables(rows: list) -> list[str]:
    """The divergences as HTML: a table of the failed ones (each side's value by its name), a list
    of the excused ones."""
    _e = lambda x: html.escape(str(x))
    out, bad, ok = [], [r for r in rows if not r.get("excused")], [r for r in rows if r.get("excused")]
    if bad:
        out.append(
            f"<p><b>Failed token checks ({len(bad)})</b>: the first divergence of each request.</p><table>"
            "<tr><th>comparison</th><th>round</th><th>request</th><th>where</th><th>value</th>"
            "<th>against</th><th>margin</th></tr>"
        )
        for r in bad[:MAX_FAILED]:
            got, want = r.get("sides") or ("backend", "reference")
            margin = "" if r.get("margin") is None else f"{float(r['margin']):.3g}"
            out.append(
                f"<tr><td>{_e(r.get('case') or '')} [{_e(r.get('mode') or '')}]</td><td>{r.get('round')}</td>"
                f"<td>{r.get('request')}</td><td>{_e(r.get('text'))}</td><td class='fail'>{_e(got)} "
                f"{_e(r.get('got'))}</td><td>{_e(want)} {_e(r.get('want'))}</td><td>{margin}</td></tr>"
            )
        out.append("</table>")
    if ok:
        from ..judge.comparison.report import Failure, describe

        out.append(
            f"<p><b>Excused divergences ({len(ok)})</b>: reference near-ties, compared up to the "
            "divergence and not after.</p>"
        )
        items = [f"<li>{_e(describe(Failure.from_json(r), reproduce=False))}</li>" for r in ok]
        out.append("<ul class='small'>" + "".join(items[:MAX_EXCUSED]) + "</ul>")
        if len(items) > MAX_EXCUSED:
            out.append(
                f"<details><summary class='small'>{len(items) - MAX_EXCUSED} more</summary>"
                "<ul class='small'>" + "".join(items[MAX_EXCUSED:]) + "</ul></details>"
            )
    return out


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _cmap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]


def invariance_section(v: dict, esc) -> list[str]:
    """The exactness tier (a batch-invariant backend's): each claim's result per case, and for each
    claim that failed the localizer's answer: where the two runs part and the first differing
    operation (its layer, depth and the two calls' row counts). [] where the tier did not run."""
    tier = v.get("invariance")
    if not tier:
        return []
    out = ["<h2>Exactness: block = loop = plain decoding = alone, bitwise</h2>"]
    rows = tier.get("results", [])
    out.append(
        "<table><tr><th></th><th>case</th><th>claim</th><th>values compared</th></tr>"
        + "".join(
            f"<tr><td>{'ok' if r['ok'] else '<b>parts</b>'}</td><td>{esc(r['case'])}</td><td>{esc(r['claim'])}</td>"
            f"<td>{r['values']:,}</td></tr>"
            for r in rows
        )
        + "</table>"
    )
    bad = [
        c["failure"]
        for c in v.get("checks", [])
        if not c.get("ok") and (c.get("failure") or {}).get("cls") == "invariance"
    ]
    if not bad:
        return out
    head = "<tr><th>case</th><th>claim</th><th>request</th><th>round</th><th>position</th><th>depth</th><th>layer</th>"
    out.append("<h3>The localizer: the first operation where the two runs part</h3>")
    out.append(
        "<table>"
        + head
        + "<th>first differing operation</th></tr>"
        + "".join(
            "<tr>"
            + "".join(f"<td>{esc('' if f.get(k) is None else f[k])}</td>" for k in ("case", "mode", "request", "round"))
            + "".join(f"<td>{esc('' if f.get(k) is None else f[k])}</td>" for k in ("position", "depth", "layer"))
            + f"<td>{esc(f.get('operation') or 'none named (see the failure above)')}</td></tr>"
            for f in bad
        )
        + "</table>"
    )
    return out
