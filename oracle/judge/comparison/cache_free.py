"""The cache-free check: every draft and verification logit of a round equals a forward of
the request's tokens computed from the tokens alone (no KV cache) within FP32 tolerance.

Per request, the keys/values of its committed prefix are computed by `forward_full` itself,
each position once, and extended as the request commits tokens; each round then forwards
only [last prefix token] + drafts against them. The work is linear in the rounds (attention
over the context, as in decoding), not a whole-sequence forward per round.
"""

from __future__ import annotations

from .report import Check, rel_err
from ...tolerances import TOLERANCES


def cache_free_check(model, traces, tol: float = TOLERANCES["float32"]["logits"]) -> tuple[Check, int]:
    """Returns (check, number of logits vectors compared)."""
    n, worst = 0, 0.0
    past = {}  # rid -> (tokens, kv): the forward's own K/V of those tokens
    for tr in traces:
        for rid, (d, D) in zip(tr.requests, tr.request_depths()):
            prefix = tr.prefix[rid]
            done, kv = past.get(rid, ([], None))
            if prefix[: len(done)] != done or len(done) >= len(prefix) or (kv is not None and len(kv) < D):
                done, kv = [], None  # not an extension: start over
            if len(done) < len(prefix) - 1:  # every prefix token but the last
                _, kv = model.forward_full(prefix[len(done) : -1], D, past=kv, keep=True)
                done = prefix[:-1]
            past[rid] = (done, kv)
            full = model.forward_full(prefix[-1:] + tr.drafts[rid], D, past=kv)  # per loop: [T, V]
            for what, logits, depth in (("verification", tr.verify_logits, D - 1), ("draft", tr.draft_logits, d - 1)):
                for (r, o), lg in logits.items():
                    if r != rid:
                        continue
                    err = rel_err(lg, full[depth][o])
                    worst, n = max(worst, err), n + 1
                    if err > tol:
                        return Check(
                            "cache_free",
                            False,
                            f"round {tr.round}: {what} logits of request {rid} "
                            f"offset {o} differ from the cache-free forward by {err:.3g}",
                        ), n
    return Check("cache_free", True, f"{n} logits vectors, max relative error {worst:.2g}"), n
