"""Backend-vs-reference comparison for reduced precision (shared/DESIGN.md section 8).

KV writes and logits by relative error (oracle.compare.TOLERANCES, keyed by dtype); token
decisions by the first-divergence rule applied to EVERY kind of decision, in the order
the round makes them: draft draws (greedy argmax or categorical), acceptance tests,
the final residual/bonus draw. A divergence is excused only where the reference's own
decision was within `margin` of its threshold:
  greedy choice    (p_max - p[chosen by backend]) / p_max      (top-two probabilities)
  categorical draw distance of u*total to the backend token's CDF interval, / total
  sampled accept   |u * q(x) - p(x)|
After an excused divergence the request is no longer compared (its state differs);
within that round, KV and logits are compared for the offsets before the divergent token.
Every backend decision must also be the reference's rule applied to the backend's OWN
logits and uniforms (oracle.compare.unexplained_decision): an excused divergence is then
explained by logits that are within tolerance, never by the backend's decision logic.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from oracle.compare import TOLERANCES, first_divergence, rel_err, unexplained_decision  # the one rule and table


@dataclass
class Parity:
    failures: list = field(default_factory=list)
    divergences: list = field(default_factory=list)     # excused ones
    compared: dict = field(default_factory=lambda: {"kv": 0, "logits": 0, "events": 0, "requests": 0})
    max_err: dict = field(default_factory=lambda: {"kv": 0.0, "logits": 0.0})

    @property
    def ok(self) -> bool:
        return not self.failures


def compare_traces(ref: list, got: list, dtype: str, schedule: bool = True, tolerances: dict | None = None) -> Parity:
    """schedule=False: the two sides ran different round modes (calls and KV call ids differ).
    tolerances: a table keyed by dtype (default oracle.compare.TOLERANCES)."""
    tol = (tolerances or TOLERANCES)[dtype]
    rep = Parity()
    stopped = set()
    if len(ref) != len(got):
        rep.failures.append(f"{len(ref)} rounds vs {len(got)}")
        return rep
    for a, b in zip(ref, got):
        where = f"round {a.round}"
        if a.requests != b.requests or list(a.token_counts) != list(b.token_counts) or \
                (schedule and a.calls != b.calls):
            rep.failures.append(f"{where}: requests, token counts or schedule differ")
            return rep
        for rid, T in zip(a.requests, a.token_counts):
            if rid in stopped:
                continue
            rep.compared["requests"] += 1
            own = unexplained_decision(b, rid, T, tol["self_margin"])
            if own:                                  # decision logic, independent of precision
                rep.failures.append(f"{where}: {own}")
            div = first_divergence(a, b, rid, T)
            cut = T if div is None else div[0]
            ea = [e for e in a.rng_events if e.request == rid]
            eb = [e for e in b.rng_events if e.request == rid]
            if div is not None:                      # only the draft draws precede every decision
                ea, eb = [e for e in ea if e.purpose == "draft"], [e for e in eb if e.purpose == "draft"]
            rep.compared["events"] += len(ea)
            if ea != eb:
                rep.failures.append(f"{where}: RNG events of request {rid} differ: {ea} vs {eb}")
            start = len(a.prefix[rid]) - 1
            arrays = [(f"verification logits offset {o}", a.verify_logits[(rid, o)], b.verify_logits.get((rid, o)), "logits")
                      for o in range(cut)]
            arrays += [(f"draft logits offset {o}", a.draft_logits[(rid, o)], b.draft_logits.get((rid, o)), "logits")
                       for o in range(min(cut, T - 1))]
            arrays += [(f"KV {k}", va[1:], b.kv_writes[k][1:] if k in b.kv_writes else None, "kv")
                       for k, va in a.kv_writes.items() if k[0] == rid and k[1] - start < cut]
            wrong_call = [k for k, va in a.kv_writes.items() if schedule and k[0] == rid and k in b.kv_writes
                          and b.kv_writes[k][0] != va[0]]
            if wrong_call:
                rep.failures.append(f"{where}: KV write {wrong_call[0]} made by call {b.kv_writes[wrong_call[0]][0]}, "
                                    f"reference call {a.kv_writes[wrong_call[0]][0]}")
            for name, x, y, kind in arrays:
                err = float("inf") if y is None else rel_err(np.stack(y) if kind == "kv" else y,
                                                               np.stack(x) if kind == "kv" else x)
                rep.compared[kind] += 1
                rep.max_err[kind] = max(rep.max_err[kind], err)
                if err > tol[kind]:
                    rep.failures.append(f"{where}: request {rid} {name}: relative error {err:.3g} > {tol[kind]:g}")
            if div is not None:
                _, what, m = div
                msg = f"{where}: request {rid} {what} (reference margin {m:.3g}, allowed {tol['margin']:g})"
                (rep.divergences if m <= tol["margin"] else rep.failures).append(msg)
                stopped.add(rid)
    return rep
