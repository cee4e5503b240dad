"""Diff two runs of round traces (shared/DESIGN.md section 8).

Exact mode: everything bit for bit. Tolerance mode (a backend's dtype): KV and logits by
relative error from TOLERANCES; token decisions by the first-divergence rule (a token may
differ only where the reference's decision was within the backend's precision, and the
comparison of that request stops there). RNG events are compared exactly in both modes
(a device RNG is checked by replaying its uniforms on the reference).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .rng_trace import first_difference
from .sampling import SamplingParams, accepts, categorical, filtered_probs, greedy_token, residual

# The one tolerance table, keyed by dtype. kv, logits: relative error ||a - b|| / ||b||
# allowed per KV write and per logits vector. margin: how close the reference's decision
# must be to its threshold (top-two probabilities, a CDF boundary, u*q(x) vs p(x)) for a
# token divergence to be excused. bfloat16: on the random tiny/small models the FP32->BF16
# error grows with depth to ~2% (mean) at depth D-1 and ~4% on single vectors, and moves
# near-tie decisions by up to ~0.1 (measured on CPU and on an H200; docs/gpu_results.md).
# self_margin: a backend's decision must be the reference's rule applied to the backend's
# OWN logits and uniforms, except within this margin of the threshold (sampling runs in FP32
# on every backend, so the same for all dtypes; unexplained_decision below).
TOLERANCES = {
    "exact": {"kv": 0.0, "logits": 0.0, "margin": 0.0, "self_margin": 0.0},
    "float32": {"kv": 1e-5, "logits": 1e-5, "margin": 1e-5, "self_margin": 1e-5},
    "bfloat16": {"kv": 6e-2, "logits": 6e-2, "margin": 0.1, "self_margin": 1e-5},
    "float16": {"kv": 1e-2, "logits": 1e-2, "margin": 2e-2, "self_margin": 1e-5},
}


@dataclass(slots=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass(slots=True)
class Report:
    checks: list = field(default_factory=list)
    kv_writes_compared: int = 0
    logits_compared: int = 0
    rng_events_compared: int = 0
    tokens_compared: int = 0
    max_rel_err: dict = field(default_factory=lambda: {"kv": 0.0, "logits": 0.0})
    divergences: list = field(default_factory=list)    # excused token divergences

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _arrays(rep, name, A, B, tol, kind, describe, exact):
    if A.keys() != B.keys():
        only = sorted(set(A) ^ set(B), key=str)[:3]
        rep.checks.append(Check(name, False, f"different entries, e.g. {only} on one side only"))
        return False
    for key in A:
        a, b = A[key], B[key]
        if exact:
            same = a.shape == b.shape and np.array_equal(a, b)
            err = 0.0 if same else (rel_err(a, b) if a.shape == b.shape else float("inf"))
        else:
            err = rel_err(a, b)
            same = err <= tol
        rep.max_rel_err[kind] = max(rep.max_rel_err[kind], err)
        if not same:
            rep.checks.append(Check(name, False, f"{describe(key)} differs: relative error {err:.3g}"
                                    + ("" if exact else f" > tolerance {tol:g}")))
            return False
    return True


def _softmax(lg) -> np.ndarray:
    e = np.exp(np.asarray(lg, np.float64) - np.max(lg))
    return e / e.sum()


def greedy_margin(logits, x: int, y: int) -> float:
    """How near a tie the reference's choice x was against y: (p(x) - p(y)) / max p."""
    p = _softmax(logits)
    return float((p[x] - p[y]) / p.max())


def draw_margin(probs, y: int, u: float) -> float:
    """How far the draw's target u*total was from the CDF interval of token y (0 inside)."""
    cdf = np.cumsum(np.asarray(probs, np.float64))
    t, lo, hi = u * cdf[-1], (cdf[y - 1] if y > 0 else 0.0), cdf[y]
    return float(max(lo - t, t - hi, 0.0) / cdf[-1])


def _u(tr, rid, purpose, offset) -> float:
    return next(e.value for e in tr.rng_events if e.request == rid and e.purpose == purpose and e.offset == offset)


def first_divergence(a, b, rid, T: int):
    """The first differing decision of request rid in round traces a (reference) and b:
    (cut, what, margin) or None. Offsets 0..cut-1 saw identical tokens on both sides;
    margin is how close the reference's decision was to its threshold."""
    params = SamplingParams(**a.params[rid]) if rid in a.params else SamplingParams()
    K = T - 1
    for n in range(K):
        x, y = a.drafts[rid][n], b.drafts[rid][n]
        if x != y:
            lg = a.draft_logits[(rid, n)]
            m = greedy_margin(lg, x, y) if params.greedy else \
                draw_margin(filtered_probs(lg, params), y, _u(a, rid, "draft", n))
            return n + 1, f"draft token of offset {n + 1}: {x} vs {y}", m
    ar, br = a.accepted[rid], b.accepted[rid]
    if ar != br:
        o = min(ar, br)
        x, lg = a.drafts[rid][o], a.verify_logits[(rid, o)]
        if params.greedy:
            p = _softmax(lg)
            m = float(abs(p[x] - np.delete(p, x).max()) / p.max())
        else:
            p, q = filtered_probs(lg, params), filtered_probs(a.draft_logits[(rid, o)], params)
            m = float(abs(_u(a, rid, "accept", o) * q[x] - p[x]))
        return T, f"acceptance of the draft at offset {o}: accepted {ar} vs {br}", m
    x, y = a.emitted[rid][-1], b.emitted[rid][-1]
    if x != y:
        lg = a.verify_logits[(rid, ar)]
        if params.greedy:
            m = greedy_margin(lg, x, y)
        elif ar < K:
            dist = residual(filtered_probs(lg, params), filtered_probs(a.draft_logits[(rid, ar)], params))
            m = draw_margin(dist, y, _u(a, rid, "residual", ar))
        else:
            m = draw_margin(filtered_probs(lg, params), y, _u(a, rid, "bonus", K))
        return T, f"final token: {x} vs {y}", m
    return None


def redecide(tr, rid, T: int):
    """Trace tr with request rid's decisions re-made by the reference's rules from tr's OWN
    logits and recorded uniforms (tr's tokens as context). first_divergence(redecide(tr, ..),
    tr, ..) then names the first decision of tr that its own logits do not explain.
    A decision needing a uniform tr never drew (its path had already differed) is left
    as a placeholder that differs from tr's."""
    params = SamplingParams(**tr.params[rid]) if rid in tr.params else SamplingParams()
    K, drafts, a_tr = T - 1, tr.drafts[rid], tr.accepted[rid]
    probs = lambda lg: filtered_probs(lg, params)
    redrafts = [greedy_token(tr.draft_logits[(rid, n)]) if params.greedy else
                categorical(probs(tr.draft_logits[(rid, n)]), _u(tr, rid, "draft", n)) for n in range(K)]
    a = K
    for o in range(K):
        lg, x = tr.verify_logits[(rid, o)], drafts[o]
        if params.greedy:
            ok = greedy_token(lg) == x
        elif o > a_tr:                                  # no uniform: tr had rejected earlier
            break
        else:
            ok = accepts(_u(tr, rid, "accept", o), probs(lg)[x], probs(tr.draft_logits[(rid, o)])[x])
        if not ok:
            a = o
            break
    lg = tr.verify_logits[(rid, a)]
    if a != a_tr:                                       # the acceptance differs: the final is not compared
        final = tr.emitted[rid][-1]
    elif params.greedy:
        final = greedy_token(lg)
    elif a < K:
        final = categorical(residual(probs(lg), probs(tr.draft_logits[(rid, a)])), _u(tr, rid, "residual", a))
    else:
        final = categorical(probs(lg), _u(tr, rid, "bonus", K))
    return replace(tr, drafts={**tr.drafts, rid: redrafts}, accepted={**tr.accepted, rid: a},
                   emitted={**tr.emitted, rid: list(tr.emitted[rid][:-1]) + [final]})


def unexplained_decision(tr, rid, T: int, margin: float):
    """A decision of trace tr that the reference's rules, applied to tr's own logits and
    uniforms, do not make (beyond `margin` of the threshold, measured on tr's logits):
    a message, or None. This is what makes an excused divergence trustworthy: the backend
    decided as the reference would have from the logits it computed, and those logits are
    within tolerance, so the divergence comes from precision, not from decision logic."""
    div = first_divergence(redecide(tr, rid, T), tr, rid, T)
    if div is None or div[2] <= margin:
        return None
    return f"request {rid} {div[1]}: the reference's rules give the first value from the backend's own " \
           f"logits and uniforms (margin {div[2]:.3g} > {margin:g})"


def compare_runs(ref: list, other: list, dtype: str = "exact", reproduce: str = "") -> Report:
    """Compare round traces `other` against `ref` (same requests, rounds and inputs)."""
    tol = TOLERANCES[dtype]
    exact = dtype == "exact"
    rep = Report()
    suffix = f" (reproduce: {reproduce})" if reproduce else ""
    if len(ref) != len(other):
        rep.checks.append(Check("rounds", False, f"{len(ref)} rounds vs {len(other)}"))
        return rep
    stopped: set = set()               # requests past an excused divergence
    for a, b in zip(ref, other):
        r = a.round
        where = f"round {r}"
        if a.round != b.round or a.requests != b.requests or list(a.token_counts) != list(b.token_counts):
            rep.checks.append(Check("inputs", False, f"{where}: round index, requests or token counts differ "
                                    f"(round {b.round}, requests {b.requests}, counts {b.token_counts})"))
            return rep
        live = {rid for rid in a.requests if rid not in stopped}
        # RNG events first: the order contract
        ea = [e for e in a.rng_events if e.request in live]
        eb = [e for e in b.rng_events if e.request in live]
        diff = first_difference(ea, eb)
        rep.rng_events_compared += min(len(ea), len(eb))
        if diff:
            rep.checks.append(Check("rng_events", False, f"{where}: {diff}{suffix}"))
        # KV writes, draft and verification logits
        kva = {k: v[1:] for k, v in a.kv_writes.items() if k[0] in live}
        kvb = {k: v[1:] for k, v in b.kv_writes.items() if k[0] in live}
        KA = {k: np.stack(v) for k, v in kva.items()}
        KB = {k: np.stack(v) for k, v in kvb.items()}
        if _arrays(rep, "kv_writes", KA, KB, tol["kv"], "kv",
                   lambda k: f"{where}: KV write request {k[0]} position {k[1]} depth {k[2]} layer {k[3]}", exact):
            rep.kv_writes_compared += len(KA)
        for name, A, B in (("draft_logits", a.draft_logits, b.draft_logits),
                           ("verify_logits", a.verify_logits, b.verify_logits)):
            A = {k: v for k, v in A.items() if k[0] in live}
            B = {k: v for k, v in B.items() if k[0] in live}
            if _arrays(rep, name, A, B, tol["logits"], "logits",
                       lambda k, n=name: f"{where}: {n} of request {k[0]} offset {k[1]}", exact):
                rep.logits_compared += len(A)
        # token decisions: exact, or the first-divergence rule
        for rid, T in zip(a.requests, a.token_counts):
            if rid in stopped:
                continue
            rep.tokens_compared += len(a.emitted.get(rid, []))
            own = None if exact else unexplained_decision(b, rid, T, tol["self_margin"])
            if own:
                rep.checks.append(Check("decisions", False, f"{where}: {own}{suffix}"))
            same = (a.drafts.get(rid) == b.drafts.get(rid) and a.accepted.get(rid) == b.accepted.get(rid)
                    and a.emitted.get(rid) == b.emitted.get(rid))
            if same:
                continue
            div = first_divergence(a, b, rid, T) if not exact else None
            if div is not None and div[2] <= tol["margin"]:
                stopped.add(rid)
                rep.divergences.append(f"{where}: request {rid} {div[1]}, reference margin {div[2]:.2g} "
                                       f"<= {tol['margin']:g}; comparison of request {rid} stops")
                continue
            what = div[1] + f" (reference margin {div[2]:.3g})" if div else \
                f"drafts {a.drafts.get(rid)} / accepted {a.accepted.get(rid)} / emitted {a.emitted.get(rid)} vs " \
                f"{b.drafts.get(rid)} / {b.accepted.get(rid)} / {b.emitted.get(rid)}"
            rep.checks.append(Check("tokens", False, f"{where}: request {rid} {what}{suffix}"))
        # the stats both rounds must agree on
        for key in ("recurrent_calls", "drafted", "accepted", "draft_head_rows"):
            if not stopped and a.stats.get(key) != b.stats.get(key):
                rep.checks.append(Check("stats", False, f"{where}: {key} {a.stats.get(key)} vs {b.stats.get(key)}"))
        if not stopped and sum(a.stats.get("rows_per_call", [])) != sum(b.stats.get("rows_per_call", [])):
            rep.checks.append(Check("stats", False, f"{where}: total rows differ"))
    for name in ("rng_events", "kv_writes", "draft_logits", "verify_logits", "decisions", "tokens", "stats"):
        if not any(c.name == name for c in rep.checks):
            rep.checks.append(Check(name, True))
    return rep
