"""The verdict's renderings, apart from judging: text (`check` with and without --backend, `trace
diff`), JSON (`Verdict.to_json`, one schema for every entry) and the HTML page (html_report). The
verdict is oracle/judge/plans/verdict.py's value, rendered here without importing the judge; nothing
here judges."""

from __future__ import annotations

from ..judge.comparison.report import Failure, describe


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def backend_text(v, judge_name: str = "") -> list[str]:
    """`check --backend`'s text: the verdict first, then the failures, the cases, the counts, the
    drift and precision reports."""
    judge_name = judge_name or ("the FP32 reference" if v.judge == "reference" else f"the {v.judge} judge")
    head = (
        f"loopspec-oracle check: backend {v.backend} ({v.dtype}, exact={v.exact}) against "
        f"{judge_name}, tolerance row {v.tolerance_row!r}"
    )
    lines = [head] + [f"  [{'PASS' if c['ok'] else 'FAIL'}] {c['name']}" for c in v.cases]
    lines += folded(v.failed)
    lines += [f"  skipped: {s}" for s in v.skipped]
    lines += [f"  excused: {d}" for d in v.excused[:10]]
    if len(v.excused) > 10:
        lines.append(f"  excused: ... {len(v.excused) - 10} more")
    explained = not any(not c["ok"] and c["name"].endswith(": decisions") for c in v.checks)
    n = v.counters
    lines.append(
        f"  compared: {plural(n['request_rounds'], 'request-round')}, {plural(n['kv_writes_compared'], 'KV write')}, "
        f"{plural(n['logits_compared'], 'logits vector')}, {plural(n['rng_events_compared'], 'RNG event')}, "
        f"{plural(n['tokens_compared'], 'token')}; max relative error KV {v.max_rel_err['kv']:.3g}, logits "
        f"{v.max_rel_err['logits']:.3g}; {len(v.excused)} excused near-tie divergences; every "
        f"decision explained by the backend's own logits: {'yes' if explained else 'NO'}"
    )
    lines += v.probe_lines()
    lines += invariance_lines(v.info.get("invariance"))
    lines.append(f"  {'OK' if v.ok else 'FAILED'} in {round(v.seconds, 2)} s")
    return lines


def invariance_lines(info: dict | None) -> list[str]:
    """The exactness tier in one line (a batch-invariant backend's; oracle/judge/plans/invariance.py)."""
    if not info:
        return []
    claims = info["claims"]
    if all(claims.values()):
        return [f"  exactness: block = loop = plain decoding = alone, bitwise: {info['values']:,} values"]
    held = [c for c, ok in claims.items() if ok]
    broken = [c for c, ok in claims.items() if not ok]
    return [
        f"  exactness: NOT bitwise: {', '.join(broken)} failed"
        + (f" ({', '.join(held)} held)" if held else "")
        + f"; {info['values']:,} values compared"
    ]


def folded(failed: list) -> list[str]:
    """`FAIL [class] ...` lines, one per class: its first failure's text, how many more checks failed
    alike and in which cases and comparisons, then its reproduce line (repeated failures of one
    kind, a KV bug seen in every case and mode, read as one)."""
    groups: dict = {}
    for c in failed:
        groups.setdefault(c["name"].rsplit(": ", 1)[-1], []).append(c)
    lines = []
    for cls, checks in groups.items():
        first = checks[0].get("failure")
        text, repro = (checks[0]["detail"], "") if first is None else (describe(Failure.from_json(first), False), "")
        if first is not None and first.get("reproduce"):
            repro = f" (reproduce: {first['reproduce']})"
        if len(checks) > 1:
            recs = [c.get("failure") or {} for c in checks]
            cases = {r.get("case") for r in recs if r.get("case")}
            modes = list(dict.fromkeys(r.get("mode") for r in recs if r.get("mode")))
            where = ", ".join(([plural(len(cases), "case")] if cases else []) + modes)
            text += f" [+{len(checks) - 1} more alike{': ' + where if where else ''}]"
        lines.append(f"  FAIL [{cls}] {text}{repro}")
    return lines


def reference_text(v, model_name: str) -> list[str]:
    """`check`'s text without --backend: block vs loop on the reference, case by case."""
    lines = [f"loopspec-oracle check: block round vs loop round on the reference ({model_name}, FP32)"]
    for c in v.cases:
        mark = "PASS" if c["ok"] else "FAIL"
        lines.append(
            f"  [{mark}] {c['name']}  ({plural(c['requests'], 'request')}, {plural(c['rounds'], 'round')}, "
            f"policy {c['policy']})"
        )
        for chk in v.checks:
            if chk["name"].startswith(c["name"] + ":") and (not chk["ok"] or chk["name"].endswith("cache_free")):
                tag = "ok  " if chk["ok"] else "FAIL"
                lines.append(f"         {tag} {chk['name'][len(c['name']) + 2 :]}: {chk['detail']}")
    lines += [f"  FAIL [{c['name']}] {c['detail']}" for c in v.failed if c["name"] == "nothing compared"]
    n = v.counters
    lines.append(
        f"  compared bit for bit: {plural(n['kv_writes_compared'], 'KV write')}, "
        f"{plural(n['logits_compared'], 'logits vector')}, {plural(n['rng_events_compared'], 'RNG event')}, "
        f"{plural(n['tokens_compared'], 'emitted token')} ({plural(v.layers, 'layer')})"
    )
    lines.append(f"  {'OK' if v.ok else 'FAILED'} in {round(v.seconds, 2)} s")
    return lines


def write_report(v, directory: str) -> str:
    """The HTML rendering: DIR/index.html with its plots (html_report; matplotlib). Returns the page's path."""
    from .html_report import write_report as write

    return write({**v.to_json(), "maps": v.error_maps()}, directory)


# trace diff: a check whose counter stayed 0 compared nothing (e.g. after the rounds' token counts differed)
COUNTED = {
    "kv_writes": "kv_writes_compared",
    "draft_logits": "logits_compared",
    "verify_logits": "logits_compared",
    "rng_events": "rng_events_compared",
    "tokens": "tokens_compared",
}
ORDER = ["rng_events", "kv_writes", "draft_logits", "verify_logits", "tokens", "stats"]


def _diff_checks(v) -> list[tuple[str, bool, bool, str, dict | None]]:
    """(name, ok, compared, detail, failure record) of trace diff's checks, RNG events first."""
    out = []
    for c in v.checks:
        name = c["name"].rsplit(": ", 1)[-1]
        made = not (c["ok"] and name in COUNTED and v.counters[COUNTED[name]] == 0)
        out.append((name, c["ok"], made, c["detail"], c.get("failure")))
    return sorted(out, key=lambda c: ORDER.index(c[0]) if c[0] in ORDER else len(ORDER))


def diff_json(v, why: str = "") -> dict:
    return {
        "ok": v.ok,
        "tolerance_row": v.dtype,
        "bounds": v.info["bounds"] + (f" ({why})" if why else ""),
        "checks": [
            {"name": n, "ok": ok, "compared": made, "detail": d, "failure": f} for n, ok, made, d, f in _diff_checks(v)
        ],
        **{k: v.counters[k] for k in ("kv_writes_compared", "logits_compared", "rng_events_compared")},
    }


def diff_text(v, why: str = "", recorded: bool = True) -> list[str]:
    """trace diff's text: B judged against A, a line per check, the answer last."""
    row = v.dtype
    lines = [
        f"{v.backend} judged against {v.judge} by tolerance row {row!r}"
        + (" (recorded with B)" if recorded else "")
        + ("" if row == "exact" else f", by the {v.info['bounds']}" + (f" ({why})" if why else ""))
    ]
    for name, ok, made, detail, _ in _diff_checks(v):
        if not made:
            lines.append(f"--   {name}: not compared (nothing of it was reached)")
        else:
            lines.append(f"{'ok  ' if ok else 'DIFF'} {name}{': ' + detail if detail else ''}")
    lines.append(
        ("identical" if row == "exact" else f"equal within tolerance row {row!r}") if v.ok else "traces differ"
    )
    return lines
