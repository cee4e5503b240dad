"""Schedule planner for both speculative rounds (shared/DESIGN.md section 4).

Pure Python, no arrays. A row is (request, offset, depth); a call runs one loop of the
layer stack over its rows; after a call, the draft head runs on `draft_head` rows
(request, offset) and offset+1's draft token is drawn. The verification head then runs
once over every (request, offset).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

from .errors import OracleError

Row = tuple[int, int, int]   # (request, offset, depth)
HeadRow = tuple[int, int]    # (request, offset)


@dataclass(slots=True, frozen=True)
class Call:
    rows: tuple[Row, ...]
    draft_head: tuple[HeadRow, ...] = ()

    def to_json(self) -> dict:
        return {"rows": [list(r) for r in self.rows], "draft_head": [list(h) for h in self.draft_head]}


@dataclass(slots=True, frozen=True)
class Schedule:
    mode: str                      # "block" | "loop"
    token_counts: tuple[int, ...]
    d: int
    D: int
    calls: tuple[Call, ...]
    verify_head: tuple[HeadRow, ...]

    def row_counts(self) -> list[int]:
        return [len(c.rows) for c in self.calls]

    def draft_head_counts(self) -> list[int]:
        return [len(c.draft_head) for c in self.calls]

    def to_json(self) -> dict:
        return {"calls": [c.to_json() for c in self.calls],
                "verify_head": [list(h) for h in self.verify_head]}


def validate(token_counts, d: int, D: int) -> tuple[int, ...]:
    """Check a round's inputs; return the counts as a tuple of ints."""
    counts = list(token_counts)
    if not counts:
        raise OracleError("token counts are empty: a round needs at least one request")
    for i, t in enumerate(counts):
        try:
            if isinstance(t, bool):
                raise TypeError
            counts[i] = t = operator.index(t)          # ints and numpy integers
        except TypeError:
            raise OracleError(f"token count of request {i} is {t!r}, not an integer") from None
        if t < 1:
            raise OracleError(f"token count of request {i} is {t}; it must be >= 1 (K_i = T_i - 1 >= 0)")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise OracleError(f"draft loops d={d!r}: must be an integer >= 1")
    if isinstance(D, bool) or not isinstance(D, int) or D < 1:
        raise OracleError(f"target loops D={D!r}: must be an integer >= 1")
    if d >= D:
        raise OracleError(f"draft loops d={d} must be < target loops D={D}")
    return tuple(counts)


def _verify_head(counts) -> tuple[HeadRow, ...]:
    return tuple((i, o) for i, t in enumerate(counts) for o in range(t))


def block_calls(token_counts, d: int, D: int) -> Schedule:
    counts = validate(token_counts, d, D)
    calls = []
    for o in range(max(counts)):
        for depth in range(d):
            rows = tuple((i, o, depth) for i, t in enumerate(counts) if o < t)
            head = tuple((i, o) for i, t in enumerate(counts) if o + 1 < t) if depth == d - 1 else ()
            calls.append(Call(rows, head))
    for depth in range(d, D):
        calls.append(Call(tuple((i, o, depth) for i, t in enumerate(counts) for o in range(t))))
    return Schedule("block", counts, d, D, tuple(calls), _verify_head(counts))


def loop_waves(token_counts, d: int, D: int) -> Schedule:
    counts = validate(token_counts, d, D)
    n_waves = max((t - 1) * d + D for t in counts)
    calls = []
    for w in range(n_waves):
        rows, head = [], []
        for i, t in enumerate(counts):
            for o in range(min(t - 1, w // d), -1, -1):   # offsets whose depth w - o*d is < D
                j = w - o * d
                if j >= D:
                    break
                rows.append((i, o, j))
                if j == d - 1 and o + 1 < t:
                    head.append((i, o))
        calls.append(Call(tuple(sorted(rows)), tuple(sorted(head))))
    return Schedule("loop", counts, d, D, tuple(calls), _verify_head(counts))


def plan(mode: str, token_counts, d: int, D: int) -> Schedule:
    if mode == "block":
        return block_calls(token_counts, d, D)
    if mode == "loop":
        return loop_waves(token_counts, d, D)
    raise OracleError(f"unknown round mode {mode!r} (known: block, loop)")


def check_schedule(s: Schedule) -> None:
    """Raise OracleError naming the first violated invariant of DESIGN.md section 4."""
    counts, d, D = s.token_counts, s.d, s.D
    when: dict[Row, int] = {}
    head_at: dict[HeadRow, int] = {}
    for c, call in enumerate(s.calls):
        if not call.rows:
            raise OracleError(f"{s.mode} call {c} has no rows")
        for r in call.rows:
            if r in when:
                raise OracleError(f"{s.mode}: row {r} appears in call {when[r]} and call {c}")
            i, o, j = r
            if not (0 <= i < len(counts) and 0 <= o < counts[i] and 0 <= j < D):
                raise OracleError(f"{s.mode} call {c}: row {r} is outside the round")
            when[r] = c
        for h in call.draft_head:
            i, o = h
            if (i, o, d - 1) not in call.rows or o + 1 >= counts[i]:
                raise OracleError(f"{s.mode} call {c}: draft head on {h} is not a draft-ready row")
            if h in head_at:
                raise OracleError(f"{s.mode}: draft head on {h} runs twice")
            head_at[h] = c
    for i, t in enumerate(counts):
        for o in range(t):
            if o + 1 < t and (i, o) not in head_at:
                raise OracleError(f"{s.mode}: draft head never runs on (request {i}, offset {o})")
            for j in range(D):
                r = (i, o, j)
                if r not in when:
                    raise OracleError(f"{s.mode}: row {r} is missing")
                if j > 0 and when[(i, o, j - 1)] >= when[r]:
                    raise OracleError(f"{s.mode}: row {r} runs in call {when[r]}, not after depth {j - 1}")
                if o > 0 and when[(i, o - 1, j)] > when[r]:   # same call is fine: causal within a call
                    raise OracleError(f"{s.mode}: row {r} runs in call {when[r]}, before offset {o - 1}")
                if o > 0 and j == 0 and head_at[(i, o - 1)] >= when[r]:
                    raise OracleError(f"{s.mode}: row {r} runs in call {when[r]}, before its draft token "
                                      f"is drawn (draft head in call {head_at[(i, o - 1)]})")
    expected_calls = (max(counts) - 1) * d + D
    if len(s.calls) != expected_calls:
        raise OracleError(f"{s.mode}: {len(s.calls)} recurrent calls, expected (max(T)-1)*d+D = {expected_calls}")
    if sorted(s.verify_head) != sorted(_verify_head(counts)):
        raise OracleError(f"{s.mode}: verification head rows are not every (request, offset)")
