"""Cost model of a speculative round (docs/DESIGN.md section 10; docs/cost_model.md).

c(M) = measured ms of one recurrent call (one pass of the layer stack) over M rows, each on
its own KV plane (oracle/ctable.py); a round's predicted time is the sum of c(rows) over its
recurrent calls, plus, given a head table h(M), one head call per call that runs the draft
head and one verification head call over all rows.

A table that also measured calls with several rows per KV plane ("c_ms_shared") prices a
call of M rows on P planes at c(M; r = M/P) (CTable.call); its calls are then keyed (M, P)
everywhere below, and the deciding inequality reads c(M@P).

Block and loop rounds have the same number of recurrent calls and the same total rows, so
only the row counts that differ between them decide which is faster:
`deciding_row_counts` returns that multiset difference and `deciding_inequality` puts it in
the form "loop wins iff sum_block m*[c(M)-c(b)] > sum_loop m*[c(M)-c(b)]".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from functools import reduce

from .ctable import CTable
from .schedule import Schedule, plan, validate


def head_row_counts(s: Schedule) -> list[int]:
    """Rows of each head call: one per call that runs the draft head, then the verification head."""
    return [n for n in s.draft_head_counts() if n] + [len(s.verify_head)]


def planes(call) -> int:
    """KV planes a call's rows touch: one per (request, depth)."""
    return len({(i, j) for i, _, j in call.rows})


def call_keys(schedule: Schedule, by_planes: bool) -> list:
    """Each call's cost key: its row count M, or (M, P) with P its KV planes."""
    return [(len(c.rows), planes(c)) if by_planes else len(c.rows) for c in schedule.calls]


def key_cost(ctable: CTable):
    """The cost of a key of call_keys: c(M) or ctable.call(M, P)."""
    return lambda k: ctable.call(*k) if isinstance(k, tuple) else ctable.c(k)


def predict(schedule: Schedule, ctable: CTable, head_table: CTable | None = None) -> dict:
    """Predicted ms of one round: sum of c(rows) over calls (+ h(rows) over head calls); with
    a table that measured shared planes, c(M; r) of each call's rows per plane."""
    call_ms = [ctable.call(len(c.rows), planes(c)) for c in schedule.calls]
    head_rows = head_row_counts(schedule)
    # fsum: exactly rounded, so equal multisets of row counts give equal ms in either order
    head_ms = math.fsum(head_table.c(n) for n in head_rows) if head_table is not None else 0.0
    recurrent_ms = math.fsum(call_ms)
    return {
        "total_ms": recurrent_ms + head_ms,
        "recurrent_ms": recurrent_ms,
        "head_ms": head_ms,
        "calls": len(call_ms),
        "rows": schedule.row_counts(),
        "call_ms": call_ms,
        "head_calls": len(head_rows),
        "head_rows": head_rows,
    }


def multiset_difference(a, b) -> tuple[dict[int, int], dict[int, int]]:
    """(a - b, b - a) as {value: multiplicity}, sorted by value."""
    ca, cb = Counter(a), Counter(b)
    return dict(sorted((ca - cb).items())), dict(sorted((cb - ca).items()))


def deciding_row_counts(token_counts, d, D, by_planes: bool = False) -> tuple[dict, dict]:
    """Row counts of block calls not matched by a loop wave, and of loop waves not matched by
    a block call ({M: multiplicity}; by_planes: {(M, P): multiplicity}, P the call's KV
    planes). Both sides have as many rows, and as many calls when the requests share (d, D)
    (ragged depths: the block round may run more calls), and

        block_ms - loop_ms = sum_block m*c(M) - sum_loop m*c(M).

    Head calls are not included: both rounds run the same head calls (the draft head after
    offset o's depth d-1 over the same requests, then one verification head), so they cancel.
    """
    counts = validate(token_counts, d, D)
    block = call_keys(plan("block", counts, d, D), by_planes)
    loop = call_keys(plan("loop", counts, d, D), by_planes)
    return multiset_difference(block, loop)


@dataclass(frozen=True)
class Inequality:
    """Loop wins iff sum_block m*[c(M)-c(base)] > sum_loop m*[c(M)-c(base)].

    block/loop are {M: m} with the base row count removed and multiplicities divided by
    `scale`, so block_ms - loop_ms = scale * (block side - loop side). base None (ragged
    depths with unequal call counts): the sides are plain sums of m*c(M). Keyed by planes,
    M is (rows, planes) throughout and reads c(M@P)."""

    base: int | tuple | None
    block: dict
    loop: dict
    scale: int

    def sides(self, c) -> tuple[float, float]:
        """(block side, loop side) in ms for a cost function c of a key (cost.key_cost)."""

        def side(terms):
            return sum(m * (c(M) - (0.0 if self.base is None else c(self.base))) for M, m in terms.items())

        return side(self.block), side(self.loop)

    def side_text(self, terms: dict[int, int], unit: str = "") -> str:
        """'4*[c(2C)-c(C)]' with unit='C' (row counts per request), '4*[c(8)-c(4)]' without."""

        def rows(M):
            if isinstance(M, tuple):  # (rows, planes)
                return rows(M[0]) if M[0] == M[1] else f"{rows(M[0])}@{rows(M[1])}"
            return unit if unit and M == 1 else f"{M}{unit}"

        if self.base is None:
            return " + ".join(f"c({rows(M)})" if m == 1 else f"{m}*c({rows(M)})" for M, m in terms.items()) or "0"
        base = rows(self.base)
        bare = len(terms) == 1  # brackets only where a term is scaled or summed
        parts = [
            f"c({rows(M)})-c({base})"
            if m == 1 and bare
            else f"{m}*[c({rows(M)})-c({base})]"
            if m > 1
            else f"[c({rows(M)})-c({base})]"
            for M, m in terms.items()
        ]
        return " + ".join(parts) or "0"

    def block_text(self, unit: str = "") -> str:
        return self.side_text(self.block, unit)

    def loop_text(self, unit: str = "") -> str:
        return self.side_text(self.loop, unit)

    def text(self, unit: str = "") -> str:
        """e.g. 'c(5C)-c(C) > 4*[c(2C)-c(C)]': loop wins iff this holds."""
        return f"{self.block_text(unit)} > {self.loop_text(unit)}"


def deciding_inequality(token_counts, d, D, by_planes: bool = False) -> Inequality | None:
    """The deciding inequality, or None when both rounds run the same row counts (uniform K=0
    or K=1: same predicted time for any c).

    The base is the smallest differing row count: both sides have equally many terms, so
    subtracting c(base) from each leaves the comparison unchanged and drops the base terms.
    For uniform counts T=K+1 over C requests (K >= 2) the base is C and this is
    (D-d)*[c(T*C)-c(C)] > sum_w [c(n_w*C)-c(C)] over the loop waves w (n_w cells each)."""
    block, loop = deciding_row_counts(token_counts, d, D, by_planes)
    if not block and not loop:
        return None
    if sum(block.values()) != sum(loop.values()):  # ragged depths: no common base to subtract
        scale = reduce(math.gcd, list(block.values()) + list(loop.values()), 0) or 1
        return Inequality(
            None, {M: m // scale for M, m in block.items()}, {M: m // scale for M, m in loop.items()}, scale
        )
    base = min(min(block), min(loop))
    block = {M: m for M, m in block.items() if M != base}
    loop = {M: m for M, m in loop.items() if M != base}
    scale = reduce(math.gcd, list(block.values()) + list(loop.values()), 0) or 1
    return Inequality(base, {M: m // scale for M, m in block.items()}, {M: m // scale for M, m in loop.items()}, scale)


def compare_rounds(token_counts, d, D, ctable: CTable, head_table: CTable | None = None) -> dict:
    """Predicted block and loop ms for one round, their ratio block/loop (> 1: loop faster),
    and the deciding row counts with both sides of the inequality in ms."""
    counts = validate(token_counts, d, D)
    block = predict(plan("block", counts, d, D), ctable, head_table)
    loop = predict(plan("loop", counts, d, D), ctable, head_table)
    by_planes = bool(ctable.shared)
    block_extra, loop_extra = deciding_row_counts(counts, d, D, by_planes)
    ineq = deciding_inequality(counts, d, D, by_planes)
    block_side, loop_side = ineq.sides(key_cost(ctable)) if ineq else (0.0, 0.0)
    diff = block["total_ms"] - loop["total_ms"]
    tie = abs(diff) <= 1e-12 * (block["total_ms"] + loop["total_ms"])
    return {
        "counts": list(counts),
        "d": d,
        "D": D,
        "block_ms": block["total_ms"],
        "loop_ms": loop["total_ms"],
        "ratio": block["total_ms"] / loop["total_ms"],
        "faster": "tie" if tie else ("loop" if diff > 0 else "block"),
        "block": block,
        "loop": loop,
        "block_extra": block_extra,
        "loop_extra": loop_extra,
        "by_planes": by_planes,
        "inequality": ineq,
        "block_side_ms": block_side,
        "loop_side_ms": loop_side,
    }
