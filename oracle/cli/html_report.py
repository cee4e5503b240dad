"""`check --report DIR`: one HTML page of a `check --backend` verdict, the page a kernel engineer
opens first.

    write_report(verdict, directory) -> path of DIR/index.html

`verdict` is the JSON object `python -m oracle check --backend NAME --json` prints (or the same
dict from a Verdict's to_json()), with "maps" (Verdict.error_maps: the comparisons' errors per
value) where the pictures of the comparisons are wanted. The page holds, in this order:

* the headline: OK or FAILED, backend, dtype, judge, tolerance row, run time, when written;
* the failed checks, each with its detail and its reproduce line (one card per check failing alike
  in a case's block and loop runs);
* a picture per failure class of the comparisons (oracle/cli/html_errors.py): the KV writes'
  error over (depth, layer) x position, the logits' error over the offset, the first divergence
  of each request, one mark per comparison;
* the probe's pictures (oracle/cli/html_plots.py): the error energy over the noise twin per
  (kind, depth, layer), and the drift estimates per direction against the band rounding allows;
* the cases, the counts, the skipped cases and the directions the probe cannot observe.

Each picture is also written as a PNG beside the page (kv.png, logits.png, divergences.png,
precision.png, drift.png); the page carries them inline, so index.html alone is the whole report.
A section with nothing to draw says so in a line. Every part of a failure is read from its record
(report.Failure's JSON), never from its text. matplotlib is the optional `plots` extra: without it,
an OracleError says how to install it.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import os

from . import html_errors, html_plots
from ..errors import OracleError

INSTALL = 'check --report needs matplotlib, the plots extra: pip install -e ".[plots]"'
COUNTERS = ("request_rounds", "tokens_compared", "logits_compared", "kv_writes_compared", "rng_events_compared")
MAX_FAILED_OPEN = 6  # failed checks shown open; the rest behind a <details> fold
PLOTS = (
    ("kv", html_errors.kv_plot),
    ("logits", html_errors.logits_plot),
    ("divergences", html_errors.divergence_plot),
    ("precision", html_plots.precision_plot),
    ("drift", html_plots.drift_plot),
)


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
    """Write DIR/index.html (and the plots as PNG files beside it), each whole or not at all
    (oracle/atomic.py: a failed or cancelled write leaves the folder as it was); return the page's path."""
    from ..atomic import replacing

    Figure, Canvas = _figure_module()
    os.makedirs(directory, exist_ok=True)
    pngs = {}  # name -> the PNG's bytes
    for name, draw in PLOTS:
        fig = draw(Figure, verdict)
        if fig is not None:
            Canvas(fig)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=100)
            pngs[name] = buf.getvalue()
    page = os.path.join(directory, "index.html")
    paths = [os.path.join(directory, f"{name}.png") for name in pngs]
    html = _page(verdict, {name: base64.b64encode(data).decode("ascii") for name, data in pngs.items()})
    with replacing(*paths, page) as temps:
        for tmp, data in zip(temps, [*pngs.values(), html.encode("utf-8")]):
            with open(tmp, "wb") as f:
                f.write(data)
    for name, _ in PLOTS:  # a stale plot of an earlier report in the same folder
        stale = os.path.join(directory, f"{name}.png")
        if name not in pngs and os.path.exists(stale):
            os.remove(stale)
    return page


# ---------------------------------------------------------------------------------------------
# reading the verdict


def _failed(verdict: dict) -> list[dict]:
    return [c for c in verdict.get("checks") or [] if not c.get("ok", True)]


def _counters(verdict: dict) -> dict:
    src = verdict.get("counters") if isinstance(verdict.get("counters"), dict) else verdict
    return {k: src[k] for k in COUNTERS if k in src}


def _text(f: dict) -> str:
    """A failure record's text without its place's case and mode (the card names them; with "keep":
    with them) nor its reproduce line (the card shows it apart): report.describe of the record."""
    from ..judge.comparison.report import Failure, describe

    keep = f.get("keep")  # the whole place: the card names no case
    return describe(Failure.from_json(f if keep else {**f, "case": "", "mode": ""}), reproduce=False)


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
    sections = {
        "kv": _errors_section("KV writes: error by depth, layer and position", plots.get("kv"), "No KV write differs."),
        "logits": _errors_section("Logits: error by offset", plots.get("logits"), "No logits vector differs."),
        "tokens": _divergence_section(v, plots.get("divergences")),
    }
    for part in _order(failed):
        out += sections[part]
    out += html_errors.invariance_section(v, _e)
    out += _precision_section(v, plots.get("precision"))
    out += _drift_section(v, plots.get("drift"))
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
    """The failed checks folded per class, as the text folds them (render.folded): {name, detail,
    reproduce} per class, in the order of its first check. One case: "CASE [block, loop]: class"
    and the first failure's place past the case; more: "class: N checks in M cases [modes]" and the
    first failure's whole place. Read from the records (report.describe), never from the text."""
    groups: dict = {}
    out = []
    for c in failed:
        if c.get("failure") is None:  # a check without a record (the drift probe's): its own card
            out.append({"name": str(c.get("name", "?")), "detail": str(c.get("detail", "")), "reproduce": ""})
            continue
        cls = str(c.get("name", "?")).rsplit(": ", 1)[-1]
        if cls not in groups:
            groups[cls] = []
            out.append({"cls": cls})
        groups[cls].append(c["failure"])
    for card in out:
        recs = groups.get(card.pop("cls", None))
        if recs is None:
            continue
        f, cases = recs[0], list(dict.fromkeys(r.get("case") or "" for r in recs))
        modes = ", ".join(dict.fromkeys(r.get("mode") for r in recs if r.get("mode")))
        cls = recs[0]["cls"]
        if len(cases) == 1:
            card["name"] = f"{cases[0]} [{modes}]: {cls}" if modes else (f"{cases[0]}: {cls}" if cases[0] else cls)
            card["detail"] = _text(f)
        else:
            card["name"] = f"{cls}: {len(recs)} checks in {len(cases)} cases [{modes}]"
            card["detail"] = "first: " + _text({**f, "keep": True})
        card["reproduce"] = f.get("reproduce") or ""
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
    return [f'<div class="check">{_e(failure)}</div>']


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


def _order(failed: list) -> list[str]:
    """The comparisons' pictures in the order of the first failure of their class: the picture that
    locates the first failure comes first."""
    part = {"kv_writes": "kv", "draft_logits": "logits", "verify_logits": "logits", "tokens": "tokens"}
    names = [part.get(str(c.get("name", "")).rsplit(": ", 1)[-1]) for c in failed]
    return list(dict.fromkeys([n for n in names if n] + ["kv", "logits", "tokens"]))


def _errors_section(title: str, png: str | None, none: str) -> list[str]:
    return [f"<h2>{title}</h2>", _img(png, title) if png else f"<p class='muted'>{none}</p>"]


def _divergence_section(v: dict, png: str | None) -> list[str]:
    rows = html_errors.divergences(v)
    out = ["<h2>First divergences</h2>"]
    if not rows:
        return out + ["<p class='muted'>No token diverged from the reference's.</p>"]
    return out + ([_img(png, "first divergences")] if png else []) + html_errors.divergence_tables(rows)


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
