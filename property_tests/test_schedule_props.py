"""Schedule invariants (DESIGN.md section 4) for any ragged counts, d and D: both plans pass
oracle.schedule.check_schedule, have (max(T)-1)*d + D calls and the same rows; and the checker
itself rejects broken plans (a row dropped or repeated, a draft head one call late)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from oracle.errors import OracleError
from oracle.schedule import Call, block_calls, check_schedule, expected_calls, loop_waves

from .harness import examples
from .strategies import depths, ragged_counts, request_depths


@settings(max_examples=examples(300))
@given(counts=ragged_counts(max_requests=16), depth=depths())
def test_both_schedules_satisfy_the_invariants(counts, depth):
    d, D = depth
    block, loop = block_calls(counts, d, D), loop_waves(counts, d, D)
    check_schedule(block)
    check_schedule(loop)
    calls = (max(counts) - 1) * d + D
    assert len(block.calls) == len(loop.calls) == calls
    assert sum(block.row_counts()) == sum(loop.row_counts()) == sum(counts) * D
    rows = lambda s: sorted(r for c in s.calls for r in c.rows)
    heads = lambda s: sorted(h for c in s.calls for h in c.draft_head)
    assert rows(block) == rows(loop)
    assert heads(block) == heads(loop) == sorted((i, o) for i, t in enumerate(counts) for o in range(t - 1))
    for w, c in enumerate(loop.calls):  # wave w holds j = w - o*d
        assert all(j == w - o * d for _, o, j in c.rows)
    for c in block.calls:  # a block call runs one depth
        assert len({j for _, _, j in c.rows}) == 1
    assert block.verify_head == loop.verify_head
    event(f"{len(counts)} requests" if len(counts) < 4 else ">= 4 requests")


@st.composite
def ragged_rounds(draw, max_requests: int = 16):
    """(counts, d per request, D per request)."""
    counts = draw(ragged_counts(max_requests=max_requests))
    dep = [draw(request_depths(6)) for _ in counts]
    return counts, [a for a, _ in dep], [b for _, b in dep]


@settings(max_examples=examples(200))
@given(case=ragged_rounds())
def test_ragged_depth_schedules_satisfy_the_invariants(case):
    """Per-request (d_i, D_i): both plans pass the checker, cover every (i, o, j < D_i) once,
    draft-head (i, o) at depth d_i - 1 in wave o*d_i + d_i - 1, run as many rows, and the
    block round runs one depth per call; with equal depths they are today's plans."""
    counts, d, D = case
    block, loop = block_calls(counts, d, D), loop_waves(counts, d, D)
    check_schedule(block)
    check_schedule(loop)
    rows = lambda s: sorted(r for c in s.calls for r in c.rows)
    assert (
        rows(block)
        == rows(loop)
        == sorted((i, o, j) for i, t in enumerate(counts) for o in range(t) for j in range(D[i]))
    )
    assert len(block.calls) == expected_calls("block", counts, d, D)
    assert (
        len(loop.calls) == expected_calls("loop", counts, d, D) == max((t - 1) * a + b for t, a, b in zip(counts, d, D))
    )
    for w, c in enumerate(loop.calls):
        assert all(j == w - o * d[i] for i, o, j in c.rows)
        assert all(w == o * d[i] + d[i] - 1 for i, o in c.draft_head)
    for c in block.calls:
        assert len({j for _, _, j in c.rows}) == 1 and c.rows
    if len(set(zip(d, D))) == 1:
        assert block == block_calls(counts, d[0], D[0]) and loop == loop_waves(counts, d[0], D[0])
        event("depths shared")
    else:
        assert block.d is None and loop.D is None
        event("ragged depths")


@settings(max_examples=examples(100))
@given(case=ragged_rounds(max_requests=8), mode=st.sampled_from(["block", "loop"]))
def test_checker_rejects_broken_ragged_schedules(case, mode):
    s = (block_calls if mode == "block" else loop_waves)(*case)
    for name, broken in _mutations(s):
        event(f"mutation: {name}")
        with pytest.raises(OracleError):
            check_schedule(broken)


def _mutations(s):
    """Broken variants of a valid schedule: (name, schedule)."""
    calls = list(s.calls)
    out = []
    big = max(range(len(calls)), key=lambda c: len(calls[c].rows))
    c = calls[big]
    if len(c.rows) > 1:
        dropped = Call(c.rows[1:], tuple(h for h in c.draft_head if h != c.rows[0][:2]))
        out.append(("row dropped", calls[:big] + [dropped] + calls[big + 1 :]))
    if big + 1 < len(calls):
        out.append(
            (
                "row repeated",
                calls[: big + 1]
                + [Call(calls[big + 1].rows + c.rows[:1], calls[big + 1].draft_head)]
                + calls[big + 2 :],
            )
        )
    for n, c in enumerate(calls[:-1]):
        if c.draft_head:  # the draft head one call late
            nxt = calls[n + 1]
            late = [Call(c.rows, ()), Call(nxt.rows, nxt.draft_head + c.draft_head)]
            out.append(("draft head one call late", calls[:n] + late + calls[n + 2 :]))
            break
    return [(name, dataclasses.replace(s, calls=tuple(cs))) for name, cs in out]


@settings(max_examples=examples(200))
@given(counts=ragged_counts(max_requests=8), depth=depths(), mode=st.sampled_from(["block", "loop"]))
def test_checker_rejects_broken_schedules(counts, depth, mode):
    s = (block_calls if mode == "block" else loop_waves)(counts, *depth)
    for name, broken in _mutations(s):
        event(f"mutation: {name}")
        with pytest.raises(OracleError):
            check_schedule(broken)
