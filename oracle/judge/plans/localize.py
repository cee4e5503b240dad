"""The localizer: where two runs of one row part, to the operation. Given a `Part` (oracle/judge/
invariance.py: the first request, round, position and depth at which two runs differ) and the two
runs' recipes (case, mode, replay), it re-runs both with the row's capture armed (the session's
optional `capture(rid, position, depth)` / `captured()`, oracle/runtime/contract.py), takes the row's
intermediates of the round where it parted on each side (oracle/capture.py: norm outputs, q/k/v
after RoPE, scores, probabilities, attention output, o, residuals, gate/up, activation, down, the
final norm, the head) and names the first operation whose stored bits differ, with its layer, depth,
the two calls' row counts and the first differing element:

    o_proj, layer 1, depth 2: M = 1 vs M = 5, first at column 17 (block -0.0123 vs loop -0.0124)

A backend without capture gets the part's place (request, position, depth, layer) and no more. It
works on any backend, invariant or not: "where does block part from loop" has an answer on each.
"""

from __future__ import annotations

import numpy as np

from ...capture import END_OPS, OPS
from ...runtime.contract import session_capabilities
from .invariance import Part, bits, same_bits
from ..runner import run_scenario


def localize(bk, model, part: Part, sides, **options) -> tuple[str, str | None]:
    """(the first differing operation of part's row between the two sides, in a line; that
    operation with its layer and depth, e.g. "o_proj, layer 1, depth 2", or None where none is
    named). ("", None) where the part is a decision or an RNG event (no row to capture). sides:
    ((case, mode, replay), (case, mode, replay)), the recipes of the part's two runs. Where the
    row's first operation (layer 0's input norm) already differs at a depth above 0, its input
    came from the depth below: that row is localized in turn, and the earliest operation named."""
    if part.depth is None:
        return "", None
    line, op, depth = "", None, part.depth
    while depth >= 0:
        got = []
        for (case, mode, replay), rnd in zip(sides, part.rounds):
            rec = captured(bk, model, case, mode, replay, (part.rid, part.position, depth), rnd, **options)
            if rec is None:
                return f"none named: the backend offers no capture, so the localizer stops at {part.place()}", None
            got.append(rec)
        pair = first_pair(*got)
        if pair is None and line:  # the depth below agrees: the input norm itself differs
            return line, op
        if pair is None:
            return _no_pair(*got, part.labels), None
        line, op = _line(*pair, depth, part.labels), operation(pair[0], depth)
        if (pair[0].op, pair[0].layer) != ("norm_in", 0):
            return line, op
        depth -= 1
    return line, op


def captured(bk, model, case, mode: str, replay, row: tuple, rnd: int, **options) -> list | None:
    """The row's Captured records in round rnd of the case run on bk (None: its sessions offer no
    capture)."""
    box = {"armed": False, "rounds": [], "n": 0}

    def arm(session):
        if session_capabilities(session).capture:
            session.capture(*row)
            box["armed"] = True

    def after(session, trace):
        box["rounds"].append(list(session.captured()) if box["armed"] else [])

    run_scenario(bk, model, case, mode, replay=replay, on_session=arm, after_step=after, **options)
    if not box["armed"]:
        return None
    return box["rounds"][rnd] if 0 <= rnd < len(box["rounds"]) else []


def first_pair(a: list, b: list):
    """The first records, in the model's order, of one operation whose bits differ between two
    captures of one row: (a's, b's), or None."""
    ka, kb = {(c.op, c.layer): c for c in a}, {(c.op, c.layer): c for c in b}
    for key in sorted(set(ka) & set(kb), key=lambda k: (k[1], OPS.index(k[0]))):
        if not same_bits(ka[key].value, kb[key].value):
            return ka[key], kb[key]
    return None


def first_operation(a: list, b: list, depth: int, labels=("A", "B")) -> str:
    """The first operation whose bits differ between two captures of one row, in a line."""
    pair = first_pair(a, b)
    return _line(*pair, depth, labels) if pair is not None else _no_pair(a, b, labels)


def _no_pair(a: list, b: list, labels) -> str:
    common = {(c.op, c.layer) for c in a} & {(c.op, c.layer) for c in b}
    if not common:
        return f"none named: {labels[0]} captured {len(a)} operations of the row, {labels[1]} {len(b)}, none in common"
    return (
        f"none named: the {len(common)} captured operations of the row agree bit for bit, so the difference "
        "enters outside them"
    )


def operation(x, depth: int) -> str:
    """A captured record's operation with its place: "o_proj, layer 1, depth 2" ("head, depth 3")."""
    return f"{x.op}, depth {depth}" if x.op in END_OPS else f"{x.op}, layer {x.layer}, depth {depth}"


def _line(x, y, depth: int, labels) -> str:
    head = f"{operation(x, depth)}: M = {x.rows} vs M = {y.rows}"
    va, vb = np.asarray(x.value), np.asarray(y.value)
    if va.shape != vb.shape or va.dtype != vb.dtype:
        return f"{head}, shapes {va.dtype}{list(va.shape)} vs {vb.dtype}{list(vb.shape)}"
    flat = int(np.argmax(bits(va).reshape(-1) != bits(vb).reshape(-1)))
    at = np.unravel_index(flat, va.shape)
    place = f"column {at[-1]}" if va.ndim == 1 else ", ".join(f"{n} {i}" for n, i in zip(_axes(x.op, va.ndim), at))
    n = int(np.count_nonzero(bits(va) != bits(vb)))
    return (
        f"{head}, first at {place} ({labels[0]} {float(va.reshape(-1)[flat])!r} vs {labels[1]} "
        f"{float(vb.reshape(-1)[flat])!r}; {n} of {va.size} elements differ)"
    )


def _axes(op: str, ndim: int) -> tuple:
    return ("head", "key") if op in ("scores", "probs") and ndim == 2 else tuple(f"axis {i}" for i in range(ndim))
