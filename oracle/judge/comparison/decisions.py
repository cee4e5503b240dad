"""Token decisions of a round, as the judge sees them (docs/DESIGN.md, "The judge").

* `trace_problem`: what in a backend's trace of one request cannot be a round's output at
  all (token ids outside the vocabulary, a wrong number of drafts, emitted tokens that break
  the commit rule, missing or NaN logits). Such a trace is a failed check, never an abort.
* `first_divergence`: the first decision where two traces of one request differ, and how
  close the reference's decision was to its threshold (the first-divergence rule).
* `redecide` / `unexplained_decision`: a backend's decisions re-made by the reference's rules
  from the backend's OWN logits and uniforms; a decision they do not give is a failed check.

Margins (how near its threshold a decision was):
  greedy choice     (p(x) - p(y)) / max p              (top-two probabilities)
  categorical draw  distance of u*total to token y's CDF interval, / total
  sampled accept    |u * q(x) - p(x)|
For sampled decisions the margin is scaled by min(T, 1) (`temper`: tempered probabilities move
1/T times as fast as logits), and is the smaller of that and `filter_margin` of the
distributions involved: where top-k/top-p were near changing their kept set, the support
itself moves with precision (top_k=1 turns a draw into a greedy choice).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from .report import Failure
from ...errors import OracleError
from ...filters import Margins, temper
from ...rng_trace import round_layout
from ...traces import seen_in
from ...sampling import Seen, accepts, categorical, filtered_probs, greedy_token, processed_logits, residual, stop_cut
from ...sampling_params import CHAIN, SamplingParams


class Divergence(NamedTuple):
    cut: int  # offsets 0..cut-1 ran on identical tokens on both sides
    what: str
    margin: float  # how close the reference's decision was to its threshold
    kind: str  # "draft" | "accept" | "final"
    offset: int  # the offset whose decision differs
    parts: tuple = ()  # the margins whose smallest is `margin`: the decision's own, then each filter's
    name: str = ""  # the decision, without its values: "draft token of offset 2"
    got: int | None = None  # b's value (a token id, or an accepted count)
    want: int | None = None  # a's value


def params_of(tr, rid) -> SamplingParams:
    return SamplingParams(**tr.params[rid]) if rid in tr.params else SamplingParams()


def _softmax(lg) -> np.ndarray:
    lg = np.asarray(lg, np.float64)
    e = np.exp(lg - np.max(lg))
    return e / e.sum()


def token_index(x, V: int) -> int:
    """x as an index into a [V] vector; an id outside [0, V) (a -1 placeholder) is refused, never
    read as p[-1]."""
    if not _is_token(x, V):
        raise OracleError(f"token {x!r} is not a token id in [0, {V})")
    return int(x)


def greedy_margin(logits, x: int, y: int) -> float:
    """How near a tie the reference's choice x was against y: (p(x) - p(y)) / max p."""
    p = _softmax(logits)
    x, y = token_index(x, len(p)), token_index(y, len(p))
    return float((p[x] - p[y]) / p.max())


def draw_margin(probs, y: int, u: float) -> float:
    """How far the draw's target u*total was from the CDF interval of token y (0 inside)."""
    cdf = np.cumsum(np.asarray(probs, np.float64))
    y = token_index(y, len(cdf))
    t, lo, hi = u * cdf[-1], (cdf[y - 1] if y > 0 else 0.0), cdf[y]
    return float(max(lo - t, t - hi, 0.0) / cdf[-1])


def filter_margin(logits, params: SamplingParams, seen: Seen | None = None) -> float:
    """How close the filters' kept set was to changing (inf when no filter cuts): the smallest
    margin of the filter steps of CHAIN (each `Step.margin`, oracle/filters.py: top_k=1, or a
    top-p that keeps one token, gives the greedy margin). A draw near such a boundary can land
    elsewhere in another precision even though its uniform sits far inside a CDF interval."""
    m = Margins.of(processed_logits(logits, params, seen), params)
    for step in CHAIN.named("filter"):
        if step.margin is not None:
            step.margin(m)
        m.x = step.apply(m.x, params)
    return m.best


def _u(tr, rid, purpose, offset) -> float:
    for e in tr.rng_events:
        if e.request == rid and e.purpose == purpose and e.offset == offset:
            return e.value
    raise OracleError(f"request {rid} has no {purpose} RNG event at offset {offset}")


def _is_token(x, V: int) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x < V


def trace_problem(tr, rid, T: int, V: int, params=None) -> str | None:
    """Why request rid's part of round trace tr is not a well-formed round output, or None.
    params: the request's SamplingParams (None: those the trace records)."""
    K = T - 1
    drafts, a, emitted = tr.drafts.get(rid), tr.accepted.get(rid), tr.emitted.get(rid)
    if drafts is None or a is None or emitted is None:
        return "drafts, accepted count or emitted tokens are missing"
    if len(drafts) != K:
        return f"{len(drafts)} draft tokens for K = {K}"
    for what, toks, first in (("draft", drafts, 1), ("emitted", emitted, 0)):
        bad = [(o, x) for o, x in enumerate(toks, first) if not _is_token(x, V)]
        if bad:
            return f"{what} token at offset {bad[0][0]} is {bad[0][1]!r}, not a token id in [0, {V})"
    if not (isinstance(a, (int, np.integer)) and 0 <= a <= K):
        return f"accepted count {a!r} is outside 0..{K}"
    if len(emitted) != a + 1 or list(emitted[:a]) != list(drafts[:a]):
        return f"emitted {list(emitted)} is not the {a} accepted drafts {list(drafts[:a])} plus one token"
    if getattr(tr, "committed", {}).get(rid) is not None:
        problem = commit_problem(tr, rid, params_of(tr, rid) if params is None else params)
        if problem:
            return problem
    for name, logits, n in (("verification", tr.verify_logits, T), ("draft", tr.draft_logits, K)):
        for o in range(n):
            lg = logits.get((rid, o))
            if lg is None:
                return f"{name} logits of offset {o} are missing"
            lg = np.asarray(lg)
            if lg.dtype.kind not in "fiu":
                return f"{name} logits of offset {o} are of type {lg.dtype}, not numbers"
            if lg.shape != (V,):
                return f"{name} logits of offset {o} have shape {list(lg.shape)}, expected [{V}]"
            if np.isnan(lg).any() or np.isposinf(lg).any() or not np.isfinite(lg).any():
                return f"{name} logits of offset {o} hold NaN or +inf, or no finite value"
    return None


def commit_problem(tr, rid, params) -> str | None:
    """The round must commit emitted[:n] with n = sampling.stop_cut(emitted, params, generated),
    and finish the request exactly when the cut says so (committed missing: all emitted)."""
    emitted = list(tr.emitted.get(rid, []))
    generated = getattr(tr, "generated", {}).get(rid, 0)
    n, why = stop_cut(emitted, params, generated)
    kept, finished = list(tr.committed.get(rid, emitted)), tr.finished.get(rid)
    if kept != emitted[:n] or finished != why:
        return (
            f"emitted {emitted} with stops {list(params.stop_token_ids)}, max_tokens {params.max_tokens} "
            f"({generated} generated before): committed {kept} ({finished}), the cut is {emitted[:n]} ({why})"
        )
    return None


def policy_problem(tr, params: dict, policy: str) -> str | None:
    """The first request of round trace tr whose part is not a well-formed round output
    (trace_problem, its stop cut by params[rid]: commit_problem) or whose RNG events are not its
    policy's layout (a greedy request draws none), or None."""
    V = len(next(iter(tr.verify_logits.values()))) if tr.verify_logits else 0
    for rid, T in zip(tr.requests, tr.token_counts):
        K, a = T - 1, tr.accepted.get(rid)
        where = f"round {tr.round} request {rid} (K={K}, accepted {a}, policy {policy})"
        problem = trace_problem(tr, rid, T, V, params[rid]) or commit_problem(tr, rid, params[rid])
        if problem:
            return f"{where}: {problem}"
        ev = [e for e in tr.rng_events if e.request == rid]
        if params[rid].greedy:
            if ev:
                return f"{where}: greedy request drew {len(ev)} uniform(s), first {ev[0]}"
            continue
        got = [(e.purpose, e.offset, e.used) for e in ev]
        want = [(d.purpose, d.offset, d.used) for d in round_layout(policy, K, a)]
        if got != want:
            n = next((n for n, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            return (
                f"{where}: RNG event #{n} is {got[n] if n < len(got) else 'missing'}, the policy requires "
                f"{want[n] if n < len(want) else 'nothing more'} (events {got})"
            )
        if [e.seq for e in ev] != list(range(len(ev))) or any(e.round != tr.round for e in ev):
            return (
                f"{where}: event seq/round numbering {[(e.round, e.seq) for e in ev]} is not 0..n-1 of round {tr.round}"
            )
    return None


def stream_problem(events: list, seed: int, rid) -> str | None:
    """A request's event values since it joined must be its seeded stream (PCG64(seed)), in order."""
    g = np.random.Generator(np.random.PCG64(seed))
    want = [float(g.random()) for _ in events]
    for n, (e, u) in enumerate(zip(events, want)):
        if e.value != u:
            pos = want.index(e.value) if e.value in want else None
            return (
                f"request {rid}: RNG event #{n} ({e.purpose} offset {e.offset}, round {e.round}) has "
                f"value {e.value!r}, but draw #{n} of PCG64({seed}) is {u!r}"
                + (f" (that value is draw #{pos}: drawn out of order)" if pos is not None else "")
            )
    return None


def first_divergence(a, b, rid, T: int, labels=("reference", "backend")) -> Divergence | None:
    """The first differing decision of request rid in round traces a (reference) and b; `what`
    names b's value first, then a's, each by its label ("backend 7 vs reference 9")."""
    la, lb = labels
    params, K = params_of(a, rid), T - 1
    seen = lambda o: seen_in(a, rid, o, a.drafts[rid])  # both sides ran on these tokens up to o
    for n in range(K):
        x, y = a.drafts[rid][n], b.drafts[rid][n]
        if x != y:
            lg, sn = a.draft_logits[(rid, n)], seen(n)
            parts = (
                (greedy_margin(processed_logits(lg, params, sn), x, y),)
                if params.greedy
                else (
                    temper(params) * draw_margin(filtered_probs(lg, params, sn), y, _u(a, rid, "draft", n)),
                    filter_margin(lg, params, sn),
                )
            )
            name = f"draft token of offset {n + 1}"
            return Divergence(n + 1, f"{name}: {lb} {y} vs {la} {x}", min(parts), "draft", n, parts, name, y, x)
    ar, br = a.accepted[rid], b.accepted[rid]
    if ar != br:
        o = min(ar, br)
        x, lg, sn = a.drafts[rid][o], a.verify_logits[(rid, o)], seen(o)
        x = token_index(x, len(lg))
        if params.greedy:
            p = _softmax(processed_logits(lg, params, sn))
            parts = (float(abs(p[x] - np.delete(p, x).max()) / p.max()),)
        else:
            dl = a.draft_logits[(rid, o)]
            p, q = filtered_probs(lg, params, sn), filtered_probs(dl, params, sn)
            parts = (
                temper(params) * float(abs(_u(a, rid, "accept", o) * q[x] - p[x])),
                filter_margin(lg, params, sn),
                filter_margin(dl, params, sn),
            )
        name = f"acceptance of the draft at offset {o}"
        return Divergence(T, f"{name}: accepted {lb} {br} vs {la} {ar}", min(parts), "accept", o, parts, name, br, ar)
    x, y = a.emitted[rid][-1], b.emitted[rid][-1]
    if x != y:
        lg, sn = a.verify_logits[(rid, ar)], seen(ar)
        if params.greedy:
            parts = (greedy_margin(processed_logits(lg, params, sn), x, y),)
        elif ar < K:
            dl = a.draft_logits[(rid, ar)]
            dist = residual(filtered_probs(lg, params, sn), filtered_probs(dl, params, sn))
            parts = (
                temper(params) * draw_margin(dist, y, _u(a, rid, "residual", ar)),
                filter_margin(lg, params, sn),
                filter_margin(dl, params, sn),
            )
        else:
            parts = (
                temper(params) * draw_margin(filtered_probs(lg, params, sn), y, _u(a, rid, "bonus", K)),
                filter_margin(lg, params, sn),
            )
        name = f"final token (offset {ar})"
        return Divergence(T, f"{name}: {lb} {y} vs {la} {x}", min(parts), "final", ar, parts, name, y, x)
    return None


def redecide(tr, rid, T: int):
    """Trace tr with request rid's decisions re-made by the reference's rules from tr's OWN
    logits and recorded uniforms (tr's tokens as context). A decision that needs a uniform
    tr never drew (its path had already differed) keeps tr's value."""
    params, K = params_of(tr, rid), T - 1
    drafts, a_tr = tr.drafts[rid], tr.accepted[rid]
    seen = lambda o: seen_in(tr, rid, o, drafts)
    probs = lambda lg, o: filtered_probs(lg, params, seen(o))
    redrafts = [
        greedy_token(tr.draft_logits[(rid, n)], params, seen(n))
        if params.greedy
        else categorical(probs(tr.draft_logits[(rid, n)], n), _u(tr, rid, "draft", n))
        for n in range(K)
    ]
    if redrafts != list(drafts):  # later decisions would need other uniforms
        return replace(tr, drafts={**tr.drafts, rid: redrafts})
    a = K
    for o in range(K):
        lg = tr.verify_logits[(rid, o)]
        x = token_index(drafts[o], len(lg))
        if params.greedy:
            ok = greedy_token(lg, params, seen(o)) == x
        elif o > a_tr:  # no uniform: tr had rejected earlier
            break
        else:
            ok = accepts(_u(tr, rid, "accept", o), probs(lg, o)[x], probs(tr.draft_logits[(rid, o)], o)[x])
        if not ok:
            a = o
            break
    lg = tr.verify_logits[(rid, a)]
    if a != a_tr:  # the acceptance differs: the final is not compared
        final = tr.emitted[rid][-1]
    elif params.greedy:
        final = greedy_token(lg, params, seen(a))
    elif a < K:
        final = categorical(residual(probs(lg, a), probs(tr.draft_logits[(rid, a)], a)), _u(tr, rid, "residual", a))
    else:
        final = categorical(probs(lg, K), _u(tr, rid, "bonus", K))
    return replace(
        tr, accepted={**tr.accepted, rid: a}, emitted={**tr.emitted, rid: list(tr.emitted[rid][:-1]) + [final]}
    )


def unexplained_decision(tr, rid, T: int, margin: float) -> str | None:
    """A decision of trace tr that the reference's rules, applied to tr's own logits and
    uniforms, do not make (beyond `margin` of the threshold, measured on tr's logits): a
    message, or None. An excused divergence is then explained by logits that are within
    tolerance, never by the backend's sampling or acceptance logic."""
    try:
        div = first_divergence(redecide(tr, rid, T), tr, rid, T, ("the reference's rules", "backend"))
    except OracleError as e:  # e.g. a draft with q(x) = 0, a uniform outside [0, 1)
        return (
            f"request {rid}: the reference's rules cannot reach this trace's decisions from its own "
            f"logits and uniforms: {e}"
        )
    if div is None or div.margin <= margin:
        return None
    return (
        f"request {rid} {div.what}: the reference's rules give their value from the backend's own "
        f"logits and uniforms (margin {div.margin:.3g} > {margin:g})"
    )


def contradicted_decision(tr, rid, T: int, margin: float) -> str | None:
    """A decision of the JUDGE'S side tr that its own rule, applied to its own logits and uniforms,
    does not make (beyond `margin`): a message naming the decision and the reference's margin,
    which is below zero (its choice is not what its rule picks), or None. The judge fails such a
    divergence before any excuse (fixed row or twin): a near-tie excuse assumes the reference's
    decision is right, and a negative margin would always count as near."""
    try:
        div = first_divergence(redecide(tr, rid, T), tr, rid, T, ("its rule", "reference"))
    except OracleError as e:  # e.g. a draft with q(x) = 0 on the reference's own side
        return (
            f"the reference's rules cannot reach the reference's own decisions from its logits and "
            f"uniforms ({e}); never excused"
        )
    if div is None or div.margin <= margin:
        return None
    return (
        f"{div.what}: the reference's own decision is not what its rule gives from its own logits and "
        f"uniforms: reference margin {-div.margin:.3g} < 0, never excused"
    )


def self_consistent(rep, b, tol, exact, where: dict) -> None:
    """A backend round of requests no longer compared (past their divergence): its decisions must
    still be explained by its own logits and uniforms."""
    if exact:
        return
    for rid, T in zip(b.requests, b.token_counts):
        try:
            own = unexplained_decision(b, rid, T, tol["self_margin"])
        except (OracleError, KeyError, IndexError, ValueError, TypeError) as e:
            own = f"cannot be judged ({type(e).__name__}: {e})"
        if own:
            rep.fail(Failure("decisions", f"past its divergence: {own}", **where, request=rid))
