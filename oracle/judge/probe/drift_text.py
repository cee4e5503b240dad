"""The drift verdict's text in `check --backend`'s output, rendered from its JSON (DriftReport.to_json)."""

from __future__ import annotations

from .calibration import DRIFT_FLOOR


def drift_lines(drift: dict) -> list[str]:
    """The drift section of `check --backend`'s text output: the answer first, then every estimate
    with its interval and its rounding allowance, then the terms explained."""
    est = drift["estimates"]
    answer = (
        "no systematic drift" if drift["ok"] else "SYSTEMATIC DRIFT: " + drift["failure"].split(": a systematic")[0]
    )
    head = (
        f"  drift: {answer} ({len(est)} directions fitted over {drift['requests']} probe requests, "
        f"{drift['values']} values, {drift['seconds']} s; |z| > {drift['threshold']:.2f} fails, family-wise "
        f"false-alarm rate {drift['family_alpha']:g})"
    )
    rows = []
    for e in est:
        lo, hi = e.get("allowance", (-DRIFT_FLOOR, DRIFT_FLOOR))
        why = "; within the rounding allowance" if e["z"] == 0 else ""
        rows.append(
            f"    {e['parameter']} {e['scale']:.4f} ± {e['se']:.4f} (z = {e['z']:.1f}{why}; weights rounded "
            f"to the dtype alone: {e['weights_alone']:.4f}; rounding allowance beyond them "
            f"{lo:+.4f}..{hi:+.4f})"
        )
    notes = [
        "    terms: z is the distance past the rounding allowance (what the noise twin's rounding alone "
        "drifts, widened by the floor for the model's hidden size) in standard errors over requests, 0 "
        "inside it; 'A = B' is one direction under two names (their effects on every observed value are proportional)"
    ]
    if drift["invisible"]:
        rows.append(f"    not observable: {', '.join(drift['invisible'])}")
        notes[0] += (
            "; 'not observable': a scale no observed value depends on (a scale just before an RMSNorm cancels in it)"
        )
    return [head] + rows + notes
