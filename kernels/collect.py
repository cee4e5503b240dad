"""Host side of a round: the request and round-handle records; at collection, check the
device results, record RNG events with the exact stream values the device used, and
assemble the RoundTrace in the reference's structure (oracle/phases.py). The host-side
commit is TorchSession.commit_round."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from oracle.errors import OracleError
from oracle.rng_trace import RngEvent, round_layout
from oracle.traces import RoundTrace

from .streams import UniformStream


@dataclass(slots=True, eq=False)
class HostRequest:
    rid: object
    slot: int
    params: object
    tokens: list  # committed tokens known to the host (collected rounds)
    stream: UniformStream
    depths: tuple = None  # (d_i, D_i) of every round of the request
    generated: int = 0  # tokens committed by collected rounds
    finished: str | None = None  # "stop" | "length" once a collected round finished it
    in_flight: list = field(default_factory=list)  # handles not yet finished
    steps: tuple = ()  # its processor steps (kernels/rows.processor_steps)


@dataclass(slots=True, eq=False)
class Handle:
    round_idx: int
    mode: str
    policy: str
    d: int | None  # shared depths (None: ragged, see depths)
    D: int | None
    reqs: list
    counts: list
    depths: list = None  # (d_i, D_i) per request
    plan: object = None
    stats: dict = None
    out: dict = None  # results (host tensors once the copy completes)
    keep: list = None  # host buffers the device may still read from
    event: object = None  # CUDA: recorded after the result copies
    started: object = None  # CUDA: recorded before the round's upload (timing events)
    trace: object = None
    error: BaseException | None = None
    done: bool = False
    committed: bool = False  # the device advanced its frontiers for this round
    host_ms: dict = None  # host time: plan, enqueue (submit), wait, finish (collect)
    device_ms: float | None = None  # CUDA: device time from the round's upload to its result copies
    span: int | None = None  # every position of the round < span (attention's keys; call graphs' key)


def round_events(rid, round_idx: int, K: int, a: int, policy: str, stream, c: int) -> list[RngEvent]:
    """The events of one sampled request's round; stream index c is the round's first uniform
    (the layout: oracle.rng_trace.round_layout)."""
    return [
        RngEvent(rid, round_idx, n, d.purpose, d.offset, stream.value(c + d.index), d.used)
        for n, d in enumerate(round_layout(policy, K, a))
    ]


def check_results(h, out: dict) -> list:
    """Raise OracleError for a failed round; return per request (K, a, events, emitted).
    The per-offset checks are array operations over the round; the loop over requests reads
    Python lists (at C = 128 the per-element numpy reads cost more than the checks)."""
    T = np.asarray(h.counts)
    o = np.arange(out["dbad"].shape[1])
    dbad = out["dbad"] & (o[None, :] < T[:, None] - 1)  # draft logits of offsets < K
    vbad = out["vbad"] & (o[None, :] < T[:, None])  # verification logits of offsets < T
    dbad_any, vbad_any = dbad.any(1).tolist(), vbad.any(1).tolist()
    a_, start_, used_, n_, why_, final_, res_err = (
        out[k].tolist() for k in ("a", "start", "used", "n", "why", "final", "residual_err")
    )
    drafts_ = out["drafts"].tolist()
    results = []
    for i, (req, T_i) in enumerate(zip(h.reqs, h.counts)):
        K, a, rid = T_i - 1, a_[i], req.rid
        if start_[i] != len(req.tokens) - 1:
            raise OracleError(
                f"request {rid}: device frontier {start_[i]} != committed tokens - 1 "
                f"= {len(req.tokens) - 1} (round {h.round_idx})"
            )
        for name, bad, any_bad in (("draft", dbad[i], dbad_any[i]), ("verification", vbad[i], vbad_any[i])):
            if any_bad:
                raise OracleError(
                    f"round {h.round_idx}: {name} logits of request {rid} offset "
                    f"{int(np.flatnonzero(bad)[0])} hold a non-finite value (NaN or +inf) or mask every token"
                )
        if res_err[i]:
            raise OracleError(
                f"round {h.round_idx}, request {rid}: residual max(0, p - q) is all zero after a rejection (p == q)"
            )
        used = used_[i]
        events = (
            [] if req.params.greedy else round_events(rid, h.round_idx, K, a, h.policy, req.stream, req.stream.consumed)
        )
        assert len(events) == used, (rid, used, events)
        drafts = drafts_[i][:K]
        n, why = n_[i], (None, "stop", "length")[why_[i]]
        if not 1 <= n <= a + 1:
            raise OracleError(f"round {h.round_idx}, request {rid}: the device kept {n} tokens of {a + 1} emitted")
        results.append((K, a, events, drafts, drafts[:a] + [final_[i]], used, n, why))
    return results


def build_trace(h, out: dict, results, dtype: str, full: bool = True) -> RoundTrace:
    """The round's trace, from its checked results (check_results); call it before the
    round is committed (the prefix and generated counts are the ones the round started from).
    full=False (a session without traces, e.g. a benchmark): no params, prefixes or calls
    (their copies are O(requests x context) and O(rows) per round); logits and KV come only
    when `out` holds them."""
    tr = RoundTrace.begin(h.mode, h.round_idx, h.policy, h.d, h.D, h.reqs, h.counts, h.depths, full)
    tr.dtype = dtype
    if full:
        tr.calls = [
            {
                "rows": [[h.reqs[i].rid, o, j] for i, o, j in c.rows],
                "draft_head": [[h.reqs[i].rid, o] for i, o in c.draft_head],
            }
            for c in h.plan.schedule.calls
        ]
    for i, (req, T, (K, a, events, drafts, emitted, used, n, why)) in enumerate(zip(h.reqs, h.counts, results)):
        rid, start = req.rid, len(req.tokens) - 1
        if "vlog" in out:
            for o in range(T):
                if o < K:
                    tr.draft_logits[(rid, o)] = out["dlog"][i, o]
                tr.verify_logits[(rid, o)] = out["vlog"][i, o]
            k, v = out["k"], out["v"]  # [L, R, D, Tcap, nkv, hd]
            for o in range(T):
                for j in range(h.depths[i][1]):
                    call = h.plan.wrote[(i, o, j)]
                    for l in range(k.shape[0]):
                        tr.kv_writes[(rid, start + o, j, l)] = (call, k[l, i, j, o], v[l, i, j, o])
        tr.record(rid, drafts, a, emitted, n, req.generated, why, events)
    tr.stats = dict(h.stats, accepted=sum(tr.accepted.values()))
    return tr
