"""Schedule planner for both speculative rounds (docs/DESIGN.md section 4).

Pure Python, no arrays. A row is (request, offset, depth); a call runs one loop of the
layer stack over its rows; after a call, the draft head runs on `draft_head` rows
(request, offset) and offset+1's draft token is drawn. The verification head then runs
once over every (request, offset). `check_schedule` checks a plan's invariants;
`schedule_violation` checks a round's trace (the calls it ran, its stats, the call each KV
write names) against its plan.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from .errors import OracleError

Row = tuple[int, int, int]  # (request, offset, depth)
HeadRow = tuple[int, int]  # (request, offset)


@dataclass(slots=True, frozen=True)
class Call:
    rows: tuple[Row, ...]
    draft_head: tuple[HeadRow, ...] = ()

    def to_json(self) -> dict:
        return {"rows": [list(r) for r in self.rows], "draft_head": [list(h) for h in self.draft_head]}


@dataclass(slots=True, frozen=True)
class Schedule:
    mode: str  # "block" | "loop"
    token_counts: tuple[int, ...]
    d: int | None  # the draft loops every request shares; None when they differ
    D: int | None  # the target loops every request shares; None when they differ
    calls: tuple[Call, ...]
    verify_head: tuple[HeadRow, ...]
    depths: tuple[tuple[int, int], ...] = ()  # (d_i, D_i) per request

    def row_counts(self) -> list[int]:
        return [len(c.rows) for c in self.calls]

    def draft_head_counts(self) -> list[int]:
        return [len(c.draft_head) for c in self.calls]

    def to_json(self) -> dict:
        out = {"calls": [c.to_json() for c in self.calls], "verify_head": [list(h) for h in self.verify_head]}
        if self.d is None:  # ragged depths: (d_i, D_i) per request
            out["depths"] = [list(x) for x in self.depths]
        return out


def _loops(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise OracleError(f"{what}={x!r}: must be an integer >= 1")
    return x


def validate(token_counts, d, D) -> tuple[int, ...]:
    """Check a round's inputs; return the counts as a tuple of ints. d and D are ints (every
    request) or one value per request."""
    counts = list(token_counts)
    if not counts:
        raise OracleError("token counts are empty: a round needs at least one request")
    for i, t in enumerate(counts):
        try:
            if isinstance(t, bool):
                raise TypeError
            counts[i] = t = operator.index(t)  # ints and numpy integers
        except TypeError:
            raise OracleError(f"token count of request {i} is {t!r}, not an integer") from None
        if t < 1:
            raise OracleError(f"token count of request {i} is {t}; it must be >= 1 (K_i = T_i - 1 >= 0)")
    request_depths(len(counts), d, D)
    return tuple(counts)


def request_depths(n: int, d, D) -> tuple[tuple[int, int], ...]:
    """(d_i, D_i) for each of n requests; d and D are ints (shared) or sequences of n ints."""
    per = []
    for x, name in ((d, "draft loops d"), (D, "target loops D")):
        if isinstance(x, (list, tuple)):
            if len(x) != n:
                raise OracleError(f"{name}: {len(x)} values for {n} requests (one per request)")
            per.append([_loops(v, f"{name} of request {i}") for i, v in enumerate(x)])
        else:
            per.append([_loops(x, name)] * n)
    for i, (di, Di) in enumerate(zip(*per)):
        if di >= Di:
            who = f" of request {i}" if isinstance(d, (list, tuple)) or isinstance(D, (list, tuple)) else ""
            raise OracleError(f"draft loops d={di}{who} must be < target loops D={Di}")
    return tuple(zip(*per))


def shared(depths) -> tuple[int | None, int | None]:
    """(d, D) when every request has the same depths, else (None, None)."""
    return depths[0] if len(set(depths)) == 1 else (None, None)


def _verify_head(counts) -> tuple[HeadRow, ...]:
    return tuple((i, o) for i, t in enumerate(counts) for o in range(t))


def block_calls(token_counts, d, D) -> Schedule:
    """Per offset o, depths 0..max(d_i)-1 over the rows with o < T_i and j < d_i (draft head
    after j = d_i - 1 where o + 1 < T_i); then depths min(d_i)..max(D_i)-1 over every
    (i, o, j) with d_i <= j < D_i. Calls without rows are skipped."""
    counts = validate(token_counts, d, D)
    dep = request_depths(len(counts), d, D)
    calls = []
    for o in range(max(counts)):
        for j in range(max(di for di, _ in dep)):
            rows = tuple((i, o, j) for i, t in enumerate(counts) if o < t and j < dep[i][0])
            head = tuple((i, o) for i, t in enumerate(counts) if o + 1 < t and j == dep[i][0] - 1)
            if rows:
                calls.append(Call(rows, head))
    for j in range(min(di for di, _ in dep), max(Di for _, Di in dep)):
        rows = tuple((i, o, j) for i, t in enumerate(counts) for o in range(t) if dep[i][0] <= j < dep[i][1])
        if rows:
            calls.append(Call(rows))
    return Schedule("block", counts, *shared(dep), tuple(calls), _verify_head(counts), dep)


def loop_waves(token_counts, d, D) -> Schedule:
    """Wave w holds (i, o, j) with j = w - o*d_i, 0 <= j < D_i, o < T_i; the draft head runs
    on (i, o) in the wave where j = d_i - 1 and o + 1 < T_i. max_i((T_i-1)*d_i + D_i) waves."""
    counts = validate(token_counts, d, D)
    dep = request_depths(len(counts), d, D)
    n_waves = max((t - 1) * di + Di for t, (di, Di) in zip(counts, dep))
    calls = []
    for w in range(n_waves):
        rows, head = [], []
        for i, t in enumerate(counts):
            di, Di = dep[i]
            for o in range(min(t - 1, w // di), -1, -1):  # offsets whose depth w - o*d_i is < D_i
                j = w - o * di
                if j >= Di:
                    break
                rows.append((i, o, j))
                if j == di - 1 and o + 1 < t:
                    head.append((i, o))
        calls.append(Call(tuple(sorted(rows)), tuple(sorted(head))))
    return Schedule("loop", counts, *shared(dep), tuple(calls), _verify_head(counts), dep)


def expected_calls(mode: str, token_counts, d, D) -> int:
    """Recurrent calls of a round: (max(T)-1)*d + D in both modes when the depths are shared.
    Ragged depths: block = sum over offsets of the deepest draft among the requests there,
    plus the depths some request verifies; loop = max_i((T_i-1)*d_i + D_i)."""
    counts = validate(token_counts, d, D)
    dep = request_depths(len(counts), d, D)
    if mode == "loop":
        return max((t - 1) * di + Di for t, (di, Di) in zip(counts, dep))
    draft = sum(max(di for t, (di, _) in zip(counts, dep) if o < t) for o in range(max(counts)))
    return draft + len({j for di, Di in dep for j in range(di, Di)})


def plan(mode: str, token_counts, d, D) -> Schedule:
    if mode == "block":
        return block_calls(token_counts, d, D)
    if mode == "loop":
        return loop_waves(token_counts, d, D)
    raise OracleError(f"unknown round mode {mode!r} (known: block, loop)")


def check_schedule(s: Schedule) -> None:
    """Raise OracleError naming the first violated invariant of DESIGN.md section 4."""
    counts = s.token_counts
    dep = s.depths or request_depths(len(counts), s.d, s.D)
    when: dict[Row, int] = {}
    head_at: dict[HeadRow, int] = {}
    for c, call in enumerate(s.calls):
        if not call.rows:
            raise OracleError(f"{s.mode} call {c} has no rows")
        for r in call.rows:
            if r in when:
                raise OracleError(f"{s.mode}: row {r} appears in call {when[r]} and call {c}")
            i, o, j = r
            if not (0 <= i < len(counts) and 0 <= o < counts[i] and 0 <= j < dep[i][1]):
                raise OracleError(f"{s.mode} call {c}: row {r} is outside the round")
            when[r] = c
        for h in call.draft_head:
            i, o = h
            if not 0 <= i < len(counts) or (i, o, dep[i][0] - 1) not in call.rows or o + 1 >= counts[i]:
                raise OracleError(f"{s.mode} call {c}: draft head on {h} is not a draft-ready row")
            if h in head_at:
                raise OracleError(f"{s.mode}: draft head on {h} runs twice")
            head_at[h] = c
    for i, t in enumerate(counts):
        for o in range(t):
            if o + 1 < t and (i, o) not in head_at:
                raise OracleError(f"{s.mode}: draft head never runs on (request {i}, offset {o})")
            for j in range(dep[i][1]):
                r = (i, o, j)
                if r not in when:
                    raise OracleError(f"{s.mode}: row {r} is missing")
                if j > 0 and when[(i, o, j - 1)] >= when[r]:
                    raise OracleError(f"{s.mode}: row {r} runs in call {when[r]}, not after depth {j - 1}")
                if o > 0 and when[(i, o - 1, j)] > when[r]:  # same call is fine: causal within a call
                    raise OracleError(f"{s.mode}: row {r} runs in call {when[r]}, before offset {o - 1}")
                if o > 0 and j == 0 and head_at[(i, o - 1)] >= when[r]:
                    raise OracleError(
                        f"{s.mode}: row {r} runs in call {when[r]}, before its draft token "
                        f"is drawn (draft head in call {head_at[(i, o - 1)]})"
                    )
    want = expected_calls(s.mode, counts, [x for x, _ in dep], [x for _, x in dep])
    if len(s.calls) != want:
        formula = "(max(T)-1)*d+D" if len(set(dep)) == 1 else "the ragged-depth count"
        raise OracleError(f"{s.mode}: {len(s.calls)} recurrent calls, expected {formula} = {want}")
    if sorted(s.verify_head) != sorted(_verify_head(counts)):
        raise OracleError(f"{s.mode}: verification head rows are not every (request, offset)")


def schedule_violation(tr, mode: str) -> str | None:
    """What in a round's trace departs from its planned schedule (the plan itself checked
    first), or None. Row order inside a call is free; a backend that records no calls is
    checked on its stats only."""
    dep = tr.request_depths()
    d, D = [x for x, _ in dep], [x for _, x in dep]
    s = plan(mode, tr.token_counts, d, D)
    check_schedule(s)
    want_calls = expected_calls(mode, tr.token_counts, d, D)
    formula = "(max(T)-1)*d+D" if len(set(dep)) == 1 else f"the {mode} plan's count for depths {dep}"
    stats = tr.stats or {}
    if "recurrent_calls" in stats and stats["recurrent_calls"] != want_calls:
        return f"round {tr.round}: {stats['recurrent_calls']} recurrent calls, expected {formula} = {want_calls}"
    if "rows_per_call" in stats and stats["rows_per_call"] != s.row_counts():
        return f"round {tr.round}: rows per call {stats['rows_per_call']}, the {mode} plan has {s.row_counts()}"
    if not tr.calls:  # the backend does not record its calls
        return None
    idx = {rid: i for i, rid in enumerate(tr.requests)}
    got = [
        {
            "rows": sorted([idx[r], o, j] for r, o, j in c["rows"]),
            "draft_head": sorted([idx[r], o] for r, o in c.get("draft_head", [])),
        }
        for c in tr.calls
    ]
    want = [
        {"rows": sorted(r), "draft_head": sorted(h)}
        for r, h in ((c["rows"], c["draft_head"]) for c in s.to_json()["calls"])
    ]
    for n, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"round {tr.round}: {mode} call {n} ran {g}, the plan has {w}"
    if len(got) != len(want):
        return f"round {tr.round}: {len(got)} calls, the {mode} plan has {len(want)}"
    return kv_call_violation(tr)


def kv_call_violation(tr) -> str | None:
    """A KV write whose recorded call is not the call that ran its row (request, offset, depth)."""
    ran = {(r, o, j): n for n, c in enumerate(tr.calls) for r, o, j in c["rows"]}
    for (rid, pos, j, layer), (call, _, _) in tr.kv_writes.items():
        o = pos - (len(tr.prefix[rid]) - 1)
        if ran.get((rid, o, j)) != call:
            return (
                f"round {tr.round}: the KV write of request {rid} offset {o} depth {j} layer {layer} names "
                f"call {call}; its row ran in call {ran.get((rid, o, j))}"
            )
    return None
