"""The cache-free check: every draft and verification logit of a round equals a
from-scratch forward of the request's whole prefix (no KV cache) within FP32 tolerance."""
from __future__ import annotations

from .compare import Check, TOLERANCES, rel_err


def cache_free_check(model, traces, tol: float = TOLERANCES["float32"]["logits"]) -> tuple[Check, int]:
    """Returns (check, number of logits vectors compared)."""
    n, worst = 0, 0.0
    for tr in traces:
        for rid in tr.requests:
            prefix = tr.prefix[rid]
            start = len(prefix) - 1                                   # position of offset 0
            full = model.forward_full(prefix + tr.drafts[rid], tr.D)  # per loop: [T, V]
            for (r, o), lg in tr.verify_logits.items():
                if r == rid:
                    worst = max(worst, err := rel_err(lg, full[tr.D - 1][start + o]))
                    n += 1
                    if err > tol:
                        return Check("cache_free", False, f"round {tr.round}: verification logits of request "
                                     f"{rid} offset {o} differ from the cache-free forward by {err:.3g}"), n
            for (r, o), lg in tr.draft_logits.items():
                if r == rid:
                    worst = max(worst, err := rel_err(lg, full[tr.d - 1][start + o]))
                    n += 1
                    if err > tol:
                        return Check("cache_free", False, f"round {tr.round}: draft logits of request "
                                     f"{rid} offset {o} differ from the cache-free forward by {err:.3g}"), n
    return Check("cache_free", True, f"{n} logits vectors, max relative error {worst:.2g}"), n
