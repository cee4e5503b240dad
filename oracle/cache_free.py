"""The cache-free check: every draft and verification logit of a round equals a
from-scratch forward of the request's whole prefix (no KV cache) within FP32 tolerance."""
from __future__ import annotations

from .compare import Check, TOLERANCES, rel_err


def cache_free_check(model, traces, tol: float = TOLERANCES["float32"]["logits"]) -> tuple[Check, int]:
    """Returns (check, number of logits vectors compared)."""
    n, worst = 0, 0.0
    for tr in traces:
        for rid, (d, D) in zip(tr.requests, tr.request_depths()):
            prefix = tr.prefix[rid]
            start = len(prefix) - 1                                   # position of offset 0
            full = model.forward_full(prefix + tr.drafts[rid], D)     # per loop: [T, V]
            for what, logits, depth in (("verification", tr.verify_logits, D - 1),
                                        ("draft", tr.draft_logits, d - 1)):
                for (r, o), lg in logits.items():
                    if r != rid:
                        continue
                    err = rel_err(lg, full[depth][start + o])
                    worst, n = max(worst, err), n + 1
                    if err > tol:
                        return Check("cache_free", False, f"round {tr.round}: {what} logits of request {rid} "
                                     f"offset {o} differ from the cache-free forward by {err:.3g}"), n
    return Check("cache_free", True, f"{n} logits vectors, max relative error {worst:.2g}"), n
