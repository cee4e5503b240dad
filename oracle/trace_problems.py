"""What makes a round's trace impossible (docs/cli_inputs.md, "Trace files"): `request_problem`
(its per-request fields) and `input_problem` (its inputs and keys), each the first problem in one
line, or None. The trace file's reader (oracle/trace_file.py) and the judge's malformed-output
check (oracle/judge/comparison/malformed.py) read them.
"""

from __future__ import annotations

import numpy as np

from .rng_events import POLICIES, PURPOSES
from .traces import PER_REQUEST, RoundTrace

FINISH_REASONS = ("stop", "length")


def request_problem(t: RoundTrace) -> str | None:
    """What makes a round's per-request fields impossible, or None: duplicate or non-integer
    request ids, token counts that are not one positive integer per request, depths outside
    1 <= d < D, a field naming a request the round does not hold, committed tokens that are
    not a prefix of the emitted ones, an unknown finish reason."""
    reqs = t.requests
    if not _count(t.round, 0):
        return f"round number {t.round!r} is not an integer >= 0"
    if t.policy not in POLICIES:
        return f"policy {t.policy!r} is not an RNG policy ({', '.join(POLICIES)})"
    if not all(_count(r, 0) for r in reqs) or len(set(reqs)) != len(reqs):
        return f"requests {reqs} are not distinct integer ids >= 0"
    if len(t.token_counts) != len(reqs) or any(
        isinstance(T, bool) or not isinstance(T, int) or T < 1 for T in t.token_counts
    ):
        return f"token_counts {t.token_counts} are not one integer >= 1 per request {reqs}"
    for name in PER_REQUEST:
        extra = [r for r in getattr(t, name) if r not in reqs]
        if extra:
            return f"{name} names request {extra[0]!r}, which is not one of the round's requests {reqs}"
    pairs = [("d, D", (t.d, t.D))] if t.d is not None or t.D is not None else []
    pairs += [(f"depths of request {r}", tuple(x)) for r, x in t.depths.items()]
    for what, pair in pairs:
        if (
            len(pair) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) for x in pair)
            or not 1 <= pair[0] < pair[1]
        ):
            return f"{what} {list(pair)}: expected integers 1 <= d < D"
    if t.d is None and any(r not in t.depths for r in reqs):
        return "d and D are null but not every request has its own depths"
    problem = input_problem(t)
    if problem:
        return problem
    for r, kept in t.committed.items():
        if list(kept) != list(t.emitted.get(r, []))[: len(kept)]:
            return f"request {r}: committed {list(kept)} is not a prefix of emitted {t.emitted.get(r)}"
    for r, why in t.finished.items():
        if why not in FINISH_REASONS:
            return f"request {r}: finish reason {why!r} (known: {', '.join(FINISH_REASONS)})"
    return None


def _count(x, low: int) -> bool:
    """An integer >= low (not a bool)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= low


def _key_problem(key, n: int, counts: dict, depth_of: dict) -> str | None:
    """Why a row or key of a round is impossible, or None: n = 2 (request, offset), 3 (request,
    offset, depth: a call's row) or 4 (request, position, depth, layer: a KV write)."""
    if not isinstance(key, (list, tuple)) or len(key) != n or not all(_count(x, 0) for x in key[1:]):
        return f"is not {n} integers >= 0 after the request id"
    rid = key[0]
    if rid not in counts:
        return f"names request {rid!r}, not one of the round's requests"
    if n < 4 and key[1] >= counts[rid]:
        return f"has offset {key[1]}, outside request {rid}'s 0..{counts[rid] - 1}"
    if n >= 3 and key[2] >= depth_of[rid][1]:
        return f"has depth {key[2]}, outside request {rid}'s 0..{depth_of[rid][1] - 1}"
    return None


def input_problem(t: RoundTrace) -> str | None:
    """What in a round's inputs and keys is impossible, as the same value on the command line would
    be: tokens before the round that are not token ids >= 0, a generated count outside
    0..len(prefix), calls, logits and KV writes naming a request the round does not hold or an
    offset or depth outside the request's, and RNG events that are not events of this round (a
    request it holds, its round number, a known purpose, an offset below the request's token
    count, a uniform in [0, 1))."""
    counts = dict(zip(t.requests, t.token_counts))
    for r, toks in t.prefix.items():
        bad = [x for x in toks if not _count(x, 0)]
        if bad:
            return f"request {r}: prefix token {bad[0]!r} is not a token id >= 0"
    for r, n in t.generated.items():
        if not _count(n, 0) or n > len(t.prefix.get(r, ())):
            return f"request {r}: generated {n!r} is not a count in 0..{len(t.prefix.get(r, ()))} (its prefix)"
    depth_of = dict(zip(t.requests, t.request_depths()))
    for k, call in enumerate(t.calls):
        rows, heads = (call.get("rows"), call.get("draft_head")) if isinstance(call, dict) else (None, None)
        if not isinstance(rows, (list, tuple)) or not isinstance(heads, (list, tuple)):
            return f"call {k} is not an object of rows and draft_head lists"
        for row in rows:
            why = _key_problem(row, 3, counts, depth_of)
            if why:
                return f"call {k}: row {row!r} {why}"
        for row in heads:
            why = _key_problem(row, 2, counts, depth_of)
            if why:
                return f"call {k}: draft-head row {row!r} {why}"
    for name in ("draft_logits", "verify_logits"):
        for key in getattr(t, name):
            why = _key_problem(key, 2, counts, depth_of)
            if why:
                return f"{name} key {list(key)!r} {why}"
    for key in t.kv_writes:
        why = _key_problem(key, 4, counts, depth_of)
        if why:
            return f"KV write {list(key)!r} {why}"
    for k, e in enumerate(t.rng_events):
        what = f"RNG event {k}"
        if e.request not in counts:
            return f"{what} names request {e.request!r}, not one of the round's requests {t.requests}"
        if e.round != t.round or isinstance(e.round, bool):
            return f"{what}: round {e.round!r} in round {t.round}"
        if not _count(e.seq, 0):
            return f"{what}: seq {e.seq!r} is not an integer >= 0"
        if e.purpose not in PURPOSES:
            return f"{what}: purpose {e.purpose!r} is not one of {', '.join(PURPOSES)}"
        if not _count(e.offset, 0) or e.offset >= counts[e.request]:
            return f"{what}: offset {e.offset!r} is outside 0..{counts[e.request] - 1} (request {e.request}'s offsets)"
        v = e.value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            return f"{what}: value {v!r} is not a uniform in [0, 1)"
        if not isinstance(e.used, bool):
            return f"{what}: used {e.used!r} is not true or false"
    return None
