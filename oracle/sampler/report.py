"""The sampler judge's output: text lines for the terminal (`text_lines`) and one HTML page
(`write_report`, `--report DIR`), of a run.Run: per case its verdict, reproduce line, and for each
distribution test a plot of expected against observed outcome frequencies, the observed ones
with their Wilson intervals at the per-test level (outcomes sorted by expected probability; past
MAX_BARS the rest is one bar). matplotlib is the `plots` extra (`require_plots`)."""

from __future__ import annotations

import base64
import datetime
import html
import io
import os
from collections import Counter

import numpy as np

from ..errors import OracleError
from . import stats

INSTALL = 'sampler --report needs matplotlib, the plots extra: pip install -e ".[plots]"'
MAX_BARS = 30


def require_plots() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise OracleError(INSTALL) from None


def detectable_summary(run) -> str:
    """What the run's distribution tests detect, in one line."""
    st = run.settings
    tvs = [t.detects_tv for r in run.results for t in r.tests if t.detects_tv is not None]
    if st.exact:
        return "exact mode: every decision compared value by value with the reference's on the same uniforms"
    worst = max(tvs, default=None)
    if worst is None:
        return "no distribution test ran"
    stated = f"TV >= {worst:.3g}" if worst > st.delta * (1 + 1e-6) else f"TV >= {st.delta:g}"
    return (
        f"each of the {len(tvs)} distribution tests (of more than one outcome) detects a sampler at {stated} "
        f"from the exact distribution with probability >= {st.power:g}, at family-wise false-alarm rate {st.alpha:g} "
        f"(Bonferroni over {st.family}: {st.alpha / st.family:.3g} per test)"
    )


def _size(case) -> str:
    r = case.requests
    return f"{len(r)} req, V={r[0].V}, K={'/'.join(str(x.K) for x in r)}"


def text_lines(run) -> list[str]:
    st = run.settings
    mode = "exact" if st.exact else "distribution"
    out = [f"sampler {run.sampler}: {mode} mode, {run.planned} case(s), seed {run.seed}"]
    for r in run.results:
        state = "skipped" if r.skipped else "ok" if r.ok else "FAIL"
        extra = f" ({r.skipped})" if r.skipped else f", {r.draws} draws, {r.seconds:.1f} s"
        extra += f"; refused {'; '.join(r.refused)}" if r.refused and not r.skipped else ""
        out.append(f"  {r.case.name:8} {state:7} {_size(r.case)}{extra}")
    for r in run.results:
        for t in r.tests:
            if not t.ok:
                out.append(f"FAIL {r.case.name}, request {t.request} ({t.kind}, {t.mode}): {t.message}")
        if not r.ok:
            out.append(f"  reproduce: {run.reproduce(r.case)}")
        if r.shrunk:
            s = r.shrunk
            part = ", partial: the shrink budget ran out" if s["partial"] else ""
            out.append(f"  shrunk {s['from']} -> {s['to']} ({s['tried']} candidates, {s['seconds']:.1f} s{part}):")
            out.append(f"  reproduce: {run.reproduce(s['case'])}")
    if run.stopped:
        out.append(f"stopped: {run.stopped}")
    tags = Counter(t for r in run.results if not r.skipped for t in r.case.tags if not t.startswith("V="))
    if tags:
        out.append("coverage: " + ", ".join(f"{k} {v}" for k, v in sorted(tags.items())))
    tests = sum(len(r.tests) for r in run.results)
    judged = sum(1 for r in run.results if not r.skipped)
    head = "OK" if run.ok else "FAILED"
    if not tests:
        out.append(f"FAILED: nothing judged (every case refused or skipped) in {run.seconds:.1f} s")
        return out
    out.append(f"{head}: {judged} case(s), {tests} test(s) in {run.seconds:.1f} s; {detectable_summary(run)}")
    return out


def _plot(test, alpha: float) -> str:
    """A PNG (base64) of one distribution test: expected bars, observed points with intervals."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    exp, obs = test.expected.ravel(), test.observed.ravel()
    n, V = int(obs.sum()), test.expected.shape[1]
    idx = [i for i in np.argsort(-exp, kind="stable") if exp[i] > 0 or obs[i] > 0]
    shown, rest = idx[:MAX_BARS], idx[MAX_BARS:]
    labels = [f"{i // V},{i % V}" for i in shown]
    e, o = list(exp[shown]), list(obs[shown])
    if rest:
        labels.append("rest")
        e.append(float(exp[rest].sum()))
        o.append(float(obs[rest].sum()))
    ci = np.array([stats.wilson(int(k), n, alpha) for k in o])
    f = np.array(o) / n
    fig = Figure(figsize=(max(4.0, 0.32 * len(labels) + 1.5), 2.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    ax.bar(x, e, color="#c8d7ea", label="expected")
    err = np.clip([f - ci[:, 0], ci[:, 1] - f], 0, None)  # a bound may round past the point
    ax.errorbar(x, f, yerr=err, fmt="o", ms=3, color="#b03030", label="observed")
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.set_xlabel("outcome: accepted drafts a, final token", fontsize=8)
    ax.set_ylabel("probability", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return base64.b64encode(buf.getvalue()).decode()


def write_report(run, directory: str) -> str:
    """DIR/index.html (plots inline); returns its path."""
    os.makedirs(directory, exist_ok=True)
    st, esc = run.settings, html.escape
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!doctype html><meta charset=utf-8><title>sampler judge</title>",
        "<style>body{font:14px sans-serif;max-width:1100px;margin:auto}code{font-size:12px;word-break:break-all}"
        ".fail{color:#b03030}</style>",
        f"<h1>{'OK' if run.ok else '<span class=fail>FAILED</span>'}: sampler {esc(run.sampler)}</h1>",
        f"<p>{'exact' if st.exact else 'distribution'} mode, {run.planned} case(s), seed {run.seed}, "
        f"{run.seconds:.1f} s, written {when}.<br>{esc(detectable_summary(run))}</p>",
    ]
    if run.stopped:
        parts.append(f"<p>Stopped: {esc(run.stopped)}</p>")
    for r in run.results:
        state = "skipped" if r.skipped else "ok" if r.ok else "<span class=fail>FAIL</span>"
        parts.append(f"<h2>{esc(r.case.name)}: {state}</h2><p>{esc(_size(r.case))}; {esc(', '.join(r.case.tags))}")
        parts.append(f"; {r.draws} draws, {r.seconds:.1f} s</p>" if not r.skipped else f" ({esc(r.skipped)})</p>")
        if not r.ok:
            parts.append(f"<p>reproduce: <code>{esc(run.reproduce(r.case))}</code></p>")
        if r.shrunk:
            parts.append(f"<p>shrunk to {esc(r.shrunk['to'])}: <code>{esc(run.reproduce(r.shrunk['case']))}</code></p>")
        for t in r.tests:
            line = f"request {t.request} ({t.kind}, {t.mode}): " + ("ok" if t.ok else f"FAIL: {t.message}")
            if t.fit is not None and t.fit.df:
                line += f"; chi-square {t.fit.stat:.2f}, df {t.fit.df}, p = {t.fit.p_value:.3g}"
            parts.append(f"<p{'' if t.ok else ' class=fail'}>{esc(line)}</p>")
            if t.fit is not None:
                img = _plot(t, st.alpha / st.family)
                parts.append(f'<img alt="{esc(r.case.name)} request {t.request}" src="data:image/png;base64,{img}">')
    path = os.path.join(directory, "index.html")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")
    return path
