"""Diff two runs of round traces (shared/DESIGN.md section 8).

Exact mode: everything bit for bit. Tolerance mode (a backend's dtype): KV and logits by
relative error from TOLERANCES; token decisions by the first-divergence rule (a token may
differ only where the reference's decision was within the backend's precision, and the
comparison of that request stops there). RNG events are compared exactly in both modes
(a device RNG is checked by replaying its uniforms on the reference).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .rng_trace import first_difference
from .sampling import SamplingParams, filtered_probs

# relative error ||a - b|| / ||b|| allowed per KV write and per logits vector; `margin`: how
# close a reference decision must be to its threshold for a token divergence to be excused
TOLERANCES = {
    "exact": {"kv": 0.0, "logits": 0.0, "margin": 0.0},
    "float32": {"kv": 1e-5, "logits": 1e-5, "margin": 1e-5},
    "bfloat16": {"kv": 2e-2, "logits": 2e-2, "margin": 3e-2},
    "float16": {"kv": 5e-3, "logits": 5e-3, "margin": 1e-2},
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


def _margin(tr, rid, offset, token_a, token_b, tol) -> float | None:
    """How close the reference's target distribution at (rid, offset) is to choosing
    between token_a and token_b: |p(a) - p(b)| / max(p) (None if unknown)."""
    lg = tr.verify_logits.get((rid, offset))
    if lg is None:
        return None
    params = SamplingParams(**tr.params[rid]) if rid in tr.params else SamplingParams()
    p = filtered_probs(lg, params) if not params.greedy else np.exp(lg - lg.max())
    return float(abs(p[token_a] - p[token_b]) / p.max())


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
        if a.requests != b.requests or list(a.token_counts) != list(b.token_counts):
            rep.checks.append(Check("inputs", False, f"{where}: requests or token counts differ"))
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
        # token decisions
        for rid in a.requests:
            if rid in stopped:
                continue
            da, db = a.drafts.get(rid, []), b.drafts.get(rid, [])
            oa, ob = a.emitted.get(rid, []), b.emitted.get(rid, [])
            seq_a, seq_b = da + ["|"] + oa, db + ["|"] + ob
            rep.tokens_compared += len(oa)
            if seq_a == seq_b and a.accepted.get(rid) == b.accepted.get(rid):
                continue
            n = next((n for n, (x, y) in enumerate(zip(seq_a, seq_b)) if x != y), min(len(seq_a), len(seq_b)))
            what = (f"draft token of offset {n + 1}" if n < len(da) else f"emitted token #{n - len(da)}")
            ta = seq_a[n] if n < len(seq_a) else None
            tb = seq_b[n] if n < len(seq_b) else None
            offset = n if n < len(da) else a.accepted.get(rid, 0)
            m = None if exact or not isinstance(ta, int) or not isinstance(tb, int) else _margin(a, rid, offset, ta, tb, tol)
            if m is not None and m <= tol["margin"]:
                stopped.add(rid)
                rep.divergences.append(f"{where}: request {rid} {what}: {ta} vs {tb}, reference margin {m:.2g} "
                                       f"<= {tol['margin']:g}; comparison of request {rid} stops")
                continue
            rep.checks.append(Check("tokens", False, f"{where}: request {rid} {what}: {ta} vs {tb}"
                                    + (f" (reference margin {m:.3g})" if m is not None else "") + suffix))
        # the stats both rounds must agree on
        for key in ("recurrent_calls", "drafted", "accepted", "draft_head_rows"):
            if not stopped and a.stats.get(key) != b.stats.get(key):
                rep.checks.append(Check("stats", False, f"{where}: {key} {a.stats.get(key)} vs {b.stats.get(key)}"))
        if not stopped and sum(a.stats.get("rows_per_call", [])) != sum(b.stats.get("rows_per_call", [])):
            rep.checks.append(Check("stats", False, f"{where}: total rows differ"))
    for name in ("rng_events", "kv_writes", "draft_logits", "verify_logits", "tokens", "stats"):
        if not any(c.name == name for c in rep.checks):
            rep.checks.append(Check(name, True))
    return rep
