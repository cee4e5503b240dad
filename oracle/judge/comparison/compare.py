"""The one judge: round traces of a backend against the reference's (docs/DESIGN.md, "The judge").

`compare_runs(ref, other, dtype)` is the only comparison of round traces in the project: `check`,
`check --backend`, `trace diff`, the property suite, gpu_tests and scripts/gpu_parity_full.py
all call it.

* dtype "exact": everything bit for bit (KV writes, logits, RNG events, decisions, stats).
* a reduced-precision dtype: KV writes and logits by relative error from TOLERANCES; token
  decisions by the first-divergence rule, PER REQUEST: where a request's decision differs at
  a reference near-tie (margin <= tol["margin"]), only what precedes that decision is
  compared (KV writes and logits of earlier offsets, the RNG events drawn before it), and the
  request is not compared in later rounds. Every other request's rows still are. A
  divergence where the reference's own decision is not what its rule gives from its own
  logits and uniforms (decisions.contradicted_decision: a margin below zero) is never excused.
  Every decision of the backend must also be what the reference's rules give from the
  backend's OWN logits and uniforms (decisions.unexplained_decision), in every round.
* Either way: a backend round paired in full whose calls are not compared with the reference's
  (the two ran different modes, or one side records no calls) is checked against its own mode's plan
  (schedule.schedule_violation: its calls, its call counts, the call each KV write names);
  the KV write addresses, the logits' keys and the counts-derived stats do not
  depend on tokens, so they are compared in full; a trace that cannot be a round's output
  (token ids outside the vocabulary, q(x) = 0 drafts, missing logits) is a failed check.

A failed check holds its first difference as a record (report.Failure: case, mode, round,
request, offset, position, depth, layer, the two sides' values, the error and its bound), the
reproduce line with it. The two sides are named by `sides`: ("backend", "reference") by default,
("loop", "block") for a backend's block run against its loop run, ("B", "A") for trace diff.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .decisions import contradicted_decision, first_divergence, self_consistent, trace_problem, unexplained_decision
from .report import Failure, Report, largest_difference, rel_err, whose
from ...errors import OracleError
from ...rng_trace import first_difference
from ...schedule import schedule_violation
from ...tolerances import TOLERANCES
from ...traces import depths_of

# The one tolerance table, keyed by dtype: TOLERANCES, in oracle/tolerances.py (load_backend
# checks a backend's dtype against it too).


def allowed(tol: dict, kind: str, depth: int) -> float:
    """The relative error a row of the table allows for a `kind` value computed at `depth`."""
    return tol[kind] * tol["growth"] ** depth


def typical_norms(tr) -> dict:
    """RMS norm of the reference's vectors in a round: per (depth, layer) for KV writes (k and v
    together), and per kind for logits; the floor of rel_err."""
    acc: dict = {}
    for (_, _, j, l), (_, k, v) in tr.kv_writes.items():
        acc.setdefault(("kv", j, l), []).append(
            float(np.sum(np.square(k, dtype=np.float64)) + np.sum(np.square(v, dtype=np.float64)))
        )
    for kind, logits in (("draft_logits", tr.draft_logits), ("verify_logits", tr.verify_logits)):
        for lg in logits.values():
            try:
                lg = np.asarray(lg, np.float64)
            except (TypeError, ValueError):  # not numbers: the malformed check names it
                continue
            fin = lg[np.isfinite(lg)]
            acc.setdefault((kind,), []).append(float(np.sum(fin * fin)))
    return {k: float(np.sqrt(np.mean(v))) for k, v in acc.items()}


def _differ(rep, kind, ref, got, bound, exact, floor=0.0) -> tuple[bool, float]:
    """Whether the backend's arrays `got` differ from the reference's `ref` (relative to ref)."""
    shapes = all(np.shape(x) == np.shape(y) for x, y in zip(ref, got))
    err = rel_err(np.stack(got), np.stack(ref), floor) if shapes else float("inf")
    same = all(np.array_equal(x, y) for x, y in zip(ref, got)) if exact and shapes else err <= bound
    rep.max_rel_err[kind] = max(rep.max_rel_err[kind], err)
    return not same, err


def _events_before(events, div):
    """The RNG events a request draws whatever its diverged decision: all drafts (their count
    is K under both policies), and the accept uniforms up to the diverged acceptance."""
    if div is None or div.kind == "final":
        return events
    return [
        e
        for e in events
        if e.purpose == "draft" or (div.kind == "accept" and e.purpose == "accept" and e.offset <= div.offset)
    ]


@dataclass(slots=True)
class RoundPair:
    """A reference round, the backend's round paired with it, and what judging each of its
    requests shares."""

    rep: Report
    ref: object  # the reference's RoundTrace
    got: object  # the backend's RoundTrace
    tol: dict  # the dtype's row of TOLERANCES
    exact: bool  # dtype "exact": bit for bit
    stopped: set  # requests past a divergence (a diverging request joins it)
    same_calls: bool  # both ran the same calls: a KV write's call is compared too
    norms: dict  # typical_norms(ref): the floors of rel_err
    bounds: object = None  # the noise twin's bounds (oracle/judge/probe/noise.py), or None
    where: dict = field(default_factory=dict)  # the Failure fields every failure here shares (case, mode, sides)
    by_request: dict = field(default_factory=dict)  # id(trace) -> rid -> its KV writes

    def writes(self, tr, rid) -> dict:
        """The KV writes of request rid in round trace tr (grouped once per trace)."""
        groups = self.by_request.get(id(tr))
        if groups is None:
            groups = self.by_request[id(tr)] = {}
            for k, v in tr.kv_writes.items():
                groups.setdefault(k[0], {})[k] = v
        return groups.get(rid, {})


def _judge_request(pair: RoundPair, rid, T: int) -> None:
    """Request rid (T tokens) of one round pair; a request whose decisions diverged joins
    `pair.stopped`. Longer than 80 lines: the comparison's order (RNG, KV, logits, tokens) is the
    contract's, read top to bottom."""
    rep, a, b, tol, exact = pair.rep, pair.ref, pair.got, pair.tol, pair.exact
    stopped, same_calls, norms, bounds = pair.stopped, pair.same_calls, pair.norms, pair.bounds
    at = dict(pair.where, round=a.round, request=rid)
    got_side, want_side = at["sides"]
    V = len(next(iter(a.verify_logits.values())))
    bad = trace_problem(b, rid, T, V)
    if bad:
        rep.fail(Failure("malformed", bad, **at))
        stopped.add(rid)
        return
    if not exact:
        own = unexplained_decision(b, rid, T, tol["self_margin"])
        if own:
            rep.fail(Failure("decisions", own, **at))
    if rid in stopped:
        return
    rep.request_rounds += 1
    div = first_divergence(a, b, rid, T, labels=(want_side, got_side))
    cut = T if div is None else div.cut
    # RNG events first: the order contract (a misplaced draw is the cause of what follows)
    ea = _events_before([e for e in a.rng_events if e.request == rid], None if exact else div)
    eb = _events_before([e for e in b.rng_events if e.request == rid], None if exact else div)
    diff = first_difference(ea, eb)
    rep.rng_events_compared += min(len(ea), len(eb))
    if diff:
        rep.fail(Failure("rng_events", diff, **at))
    rep.tokens_compared += len(a.emitted[rid]) if div is None else div.offset
    # KV writes: every address exactly; values at offsets that ran on identical tokens
    start = len(a.prefix[rid]) - 1
    KA, KB = pair.writes(a, rid), pair.writes(b, rid)
    kv = lambda k: dict(at, offset=k[1] - start, position=k[1], depth=k[2], layer=k[3])
    name = lambda k: f"KV write of offset {k[1] - start} (position {k[1]}) depth {k[2]} layer {k[3]}"
    odd = sorted(KA.keys() ^ KB.keys(), key=str)
    for k in odd:  # the map of errors marks every write one side lacks; the check names the first
        rep.error(rep.kv_errors, (k[2], k[3], k[1]), float("inf"), allowed(tol, "kv", k[2]))
    for k in odd[:1]:
        lack = f"{'missing from' if k in KA else 'extra in'} {whose(got_side)} trace"
        rep.fail(Failure("kv_writes", f"{name(k)} is {lack}", **kv(k)))
    keys = [k for k in sorted(KA.keys() & KB.keys()) if k[1] - start < cut]
    batch = _kv_batch(KA, KB, keys)
    for i, k in enumerate(keys):
        (ca, ka, va), (cb, kb, vb) = KA[k], KB[k]
        if same_calls and ca != cb:
            rep.fail(Failure("kv_writes", f"{name(k)} made by call {cb}, {whose(want_side)} by call {ca}", **kv(k)))
        bound, floor = allowed(tol, "kv", k[2]), norms.get(("kv", k[2], k[3]), 0.0)
        if batch is not None and batch[0][i]:  # finite and stacked: this write's errors are computed
            ref_norm, diff, same = batch[1][i], batch[2][i], batch[3][i]
            err = diff / max(ref_norm, floor, 1e-30)
            if bounds is not None:  # the noise twin's bound for this write (oracle/judge/probe/noise.py)
                bound = bounds.kv_allowed(a.round, k, max(ref_norm, floor)) or bound
            differs = not same if exact else not err <= bound
            rep.max_rel_err["kv"] = max(rep.max_rel_err["kv"], err)
        else:
            if bounds is not None:
                bound = bounds.kv_allowed(a.round, k, max(_norm(ka, va), floor)) or bound
            differs, err = _differ(rep, "kv", [ka, va], [kb, vb], bound, exact, floor)
        rep.kv_writes_compared += 1
        rep.error(rep.kv_errors, (k[2], k[3], k[1]), err, 0.0 if exact else bound)
        rep.value("kv_writes", kv(k), err, bound)
        if differs:
            big = largest_difference(("k", "v"), [ka, va], [kb, vb])
            rep.fail(Failure("kv_writes", f"{name(k)} differs", **kv(k), error=err, bound=bound * (not exact), **big))
    # draft and verification logits (offset o's logits ran on offsets 0..o's tokens)
    d, D = depths_of(a, rid)
    for check, A, B, n, depth in (
        ("draft_logits", a.draft_logits, b.draft_logits, T - 1, d - 1),
        ("verify_logits", a.verify_logits, b.verify_logits, T, D - 1),
    ):
        extra = sorted(k for k in B if k[0] == rid and k not in A)
        if extra:
            text = f"extra {check} at offset {extra[0][1]} in {whose(got_side)} trace"
            rep.fail(Failure(check, text, **at, offset=extra[0][1], depth=depth))
        bound = allowed(tol, "logits", depth)
        for o in range(min(n, cut)):
            allow = (
                bound
                if bounds is None
                else bounds.logits_allowed(a.round, check, rid, o, max(_norm(A[(rid, o)]), norms.get((check,), 0.0)))
                or bound
            )
            differs, err = _differ(rep, "logits", [A[(rid, o)]], [B[(rid, o)]], allow, exact, norms.get((check,), 0.0))
            rep.logits_compared += 1
            rep.error(rep.logits_errors, (check, o), err, 0.0 if exact else allow)
            rep.value(check, dict(at, offset=o, depth=depth), err, allow)
            if differs:
                big = largest_difference(("",), [A[(rid, o)]], [B[(rid, o)]])
                text = f"{check} of offset {o} differ"
                rep.fail(Failure(check, text, **at, offset=o, depth=depth, error=err, bound=allow * (not exact), **big))
    # the token decision last: a KV or logits difference above is its cause, reported first
    if div is not None:
        _judge_divergence(pair, rid, T, div, at)


def _judge_divergence(pair: RoundPair, rid, T: int, div, at: dict) -> None:
    """A request's first differing decision: a failure, or excused as a reference near-tie (by the
    fixed margin or the noise twin's); the request is compared no further."""
    rep, a, b, tol, exact, bounds = pair.rep, pair.ref, pair.got, pair.tol, pair.exact, pair.bounds
    pair.stopped.add(rid)
    # a reference decision that contradicts its own rule (margin below zero) is never excused
    own = None if exact else contradicted_decision(a, rid, T, tol["self_margin"])
    if own:
        rep.fail(Failure("tokens", own, **at, margin=div.margin))
        return
    margin = tol["margin"]
    off = div.offset + 1 if div.kind == "draft" else div.offset  # the offset whose token differs
    f = Failure("tokens", div.name, **at, offset=off, got=div.got, want=div.want, margin=div.margin)
    excused = not exact and div.margin <= margin
    if not exact:
        f.bound = margin
    rule = "" if exact else f" {'<=' if excused else '>'} allowed {margin:.3g}"
    f.note = f"{f.sides[1]} margin {div.margin:.3g}{rule}"  # the margin of the side judged against
    twin = bounds.excuse(a, b, rid, T, div) if bounds is not None and not exact else None
    if twin is not None:  # the noise twin's verdict (oracle/judge/probe/noise.py): z noise scales of its limit
        excused, f.error, f.bound, part = twin
        f.note = (
            f"{f.sides[1]} margin {div.margin:.3g}; its {part} is {f.error:.2g} noise scales of the twin "
            f"{'<=' if excused else '>'} {f.bound:g}"
        )
    if not excused:
        rep.fail(f)
    else:
        f.note += f"; request {rid} is compared up to offset {div.cut - 1} and not after"
        rep.excuse(f)


def _kv_batch(KA, KB, keys):
    """Every KV write of `keys` at once (k and v together, FP64): (finite [n] bool, the reference's
    norm [n], ||got - ref|| [n], bit-equal [n]); None where the writes cannot be stacked (shapes
    differ). A write that is not finite on either side is judged alone (_differ: -inf, NaN)."""
    if not keys:
        return None
    try:
        r = [np.stack([KA[k][i] for k in keys]) for i in (1, 2)]
        g = [np.stack([KB[k][i] for k in keys]) for i in (1, 2)]
    except ValueError:
        return None
    if r[0].shape != g[0].shape or r[1].shape != g[1].shape:
        return None
    n = len(keys)
    r = np.concatenate([x.reshape(n, -1) for x in r], axis=1).astype(np.float64)
    g = np.concatenate([x.reshape(n, -1) for x in g], axis=1).astype(np.float64)
    finite = np.isfinite(r).all(axis=1) & np.isfinite(g).all(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        d = g - r
        return (
            finite,
            np.sqrt(np.einsum("ij,ij->i", r, r)).tolist(),
            np.sqrt(np.einsum("ij,ij->i", d, d)).tolist(),
            (r == g).all(axis=1).tolist(),
        )


def _norm(*xs) -> float:
    """The norm of the finite entries of the arrays together (masked logits are -inf)."""
    return float(np.sqrt(sum(np.sum(np.square(np.where(np.isfinite(x), x, 0.0), dtype=np.float64)) for x in xs)))


def _calls(tr) -> list:
    return [(sorted(map(tuple, c["rows"])), sorted(map(tuple, c.get("draft_head", [])))) for c in tr.calls]


def _judge_stats(rep, a, b, where: dict, same_calls, diverged) -> None:
    sa, sb = a.stats or {}, b.stats or {}
    shared = len({depths_of(a, r) for r in a.requests}) == 1  # ragged d_i: the modes' call counts differ
    keys = (
        ["drafted", "draft_head_rows"]
        + (["recurrent_calls"] if same_calls or shared else [])
        + (["rows_per_call"] if same_calls else [])
    )
    keys += [] if diverged else ["accepted"]
    for key in keys:
        if key in sa and key in sb and sa[key] != sb[key]:
            rep.fail(Failure("stats", f"stats {key}", **where, got=sb[key], want=sa[key]))
    if "accepted" in sb and sb["accepted"] != sum(b.accepted.values()):
        text = f"stats accepted {sb['accepted']} != the sum of accepted counts {sum(b.accepted.values())}"
        rep.fail(Failure("stats", text, **where))
    if "kv_writes" in sb and sb["kv_writes"] != len(b.kv_writes):
        n, side = sb["kv_writes"], where["sides"][0]
        text = f"{side} made {n} KV writes to {len(b.kv_writes)} addresses (a duplicate write)"
        rep.fail(Failure("kv_writes", text, **where))


def _live(tr, stopped) -> list:
    return [(r, t) for r, t in zip(tr.requests, tr.token_counts) if r not in stopped]


def compare_runs(
    ref: list,
    other: list,
    dtype: str = "exact",
    reproduce: str = "",
    case: str = "",
    bounds=None,
    ref_norms: list | None = None,
    mode: str = "",
    sides: tuple = ("backend", "reference"),
    values: bool = False,
) -> Report:
    """Judge round traces `other` against `ref` (same requests, rounds and inputs). dtype:
    "exact" or a row of TOLERANCES (a backend's dtype). case, mode: the comparison's name, in every
    failure (case "CASE", mode "loop": "CASE [loop]"); sides: the names of other's side and ref's.
    After a request diverged (reduced precision) its rounds may differ in number and members
    (a stop token one side drew and the other did not): rounds are paired on the requests
    still compared, and a round holding only diverged requests on one side is not paired.
    bounds: the noise twin's per-value bounds and margins of `ref` (oracle/judge/probe/noise.py), which replace
    the fixed row's for the values they cover; None: the row of TOLERANCES. ref_norms:
    [typical_norms(t) for t in ref], made before (with the reference's side, in the background).
    values: keep every compared KV write's and logits vector's error and bound (Report.values).
    Longer than 80 lines: the pairing of rounds is one loop, read top to bottom."""
    if dtype not in TOLERANCES:
        raise OracleError(f"no tolerance row for dtype {dtype!r} (known: {', '.join(TOLERANCES)})")
    tol, exact = TOLERANCES[dtype], dtype == "exact"
    rep = Report(reproduce=reproduce, case=case, mode=mode, values=[] if values else None)
    base = {"case": case, "mode": mode, "sides": tuple(sides)}
    got_side, want_side = sides
    stopped: set = set()  # requests past a divergence
    i = j = 0
    while i < len(ref) or j < len(other):
        a, b = (ref[i] if i < len(ref) else None), (other[j] if j < len(other) else None)
        if a is not None and stopped and not _live(a, stopped):
            i += 1  # only diverged requests: nothing to pair
            continue
        if b is not None and stopped and not _live(b, stopped):
            self_consistent(rep, b, tol, exact, dict(base, round=b.round))
            j += 1
            continue
        if a is None or b is None:
            text = f"{len(ref)} rounds in {whose(want_side)} trace, {len(other)} in {whose(got_side)}"
            rep.fail(Failure("rounds", text, **base))
            break
        where = dict(base, round=a.round)
        full = list(a.requests) == list(b.requests) and list(a.token_counts) == list(b.token_counts)
        if not full and (not stopped or _live(a, stopped) != _live(b, stopped)):
            text = (
                f"requests or token counts differ ({got_side}: round {b.round}, requests {b.requests}, counts "
                f"{b.token_counts}; {want_side}: {a.requests}, {a.token_counts})"
            )
            rep.fail(Failure("rounds", text, **where))
            break
        same_calls = full and a.mode == b.mode and bool(a.calls) and bool(b.calls)
        if same_calls and _calls(a) != _calls(b):
            n = next(
                (n for n, (x, y) in enumerate(zip(_calls(a), _calls(b))) if x != y), min(len(a.calls), len(b.calls))
            )
            text = f"call {n} of {whose(got_side)} {b.mode} round differs from {whose(want_side)}"
            rep.fail(Failure("schedule", text + f" ({len(b.calls)} calls vs {len(a.calls)})", **where))
        elif full and b.token_counts and not same_calls and b.mode in ("block", "loop"):  # its own plan instead
            try:
                problem = schedule_violation(b, b.mode)
            except (OracleError, KeyError, IndexError, ValueError, TypeError, AttributeError) as e:
                problem = f"its calls cannot be planned ({type(e).__name__}: {e})"
            if problem:
                text = f"{whose(got_side)} {b.mode} round departs from its plan: {problem}"
                rep.fail(Failure("schedule", text, **where))
        norms = {} if exact else typical_norms(a) if ref_norms is None else ref_norms[i]
        pair = RoundPair(rep, a, b, tol, exact, stopped, same_calls, norms, bounds, base)
        live = dict(_live(a, stopped)) if not full else dict(zip(a.requests, a.token_counts))
        for rid, T in zip(b.requests, b.token_counts):
            try:
                if rid in live:
                    _judge_request(pair, rid, T)
                elif not exact:  # diverged earlier: its own decisions still
                    own = unexplained_decision(b, rid, T, tol["self_margin"])
                    if own:
                        rep.fail(Failure("decisions", own, **where, request=rid))
            except (OracleError, KeyError, IndexError, ValueError, TypeError, AttributeError) as e:
                text = f"{whose(got_side)} trace cannot be judged ({type(e).__name__}: {e})"
                rep.fail(Failure("malformed", text, **where, request=rid))
                stopped.add(rid)
        if full:
            _judge_stats(rep, a, b, where, same_calls, diverged=bool(stopped & set(a.requests)))
        i, j = i + 1, j + 1
    return rep.finish()
