"""The phases both rounds share: one recurrent call, the draft head, the verification
head, acceptance and commit. The rounds differ only in the order of their calls
(reference_round.py: block; loop_round.py: waves).

A round takes its phases as an argument (`Phases`, default `PHASES`: the functions below and
oracle.sampling); meta_tests/faulty.py injects a fault by passing a `Phases` with one
replaced (dataclasses.replace), never by patching this module."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import sampling
from .errors import OracleError
from .kv import KVCache
from .model import LoopedModel
from .rng_trace import RequestRng, check_policy, round_layout
from .sampling_params import SamplingParams
from .schedule import request_depths, shared, validate
from .traces import RoundTrace


@dataclass(slots=True)
class Request:
    rid: int
    tokens: list[int]  # committed tokens t[0..n-1]
    params: SamplingParams
    rng: RequestRng
    depths: tuple[int, int] | None = None  # (d_i, D_i); None: the session's (d, D)
    generated: int = 0  # tokens committed by earlier rounds (max_tokens)
    finished: str | None = None  # "stop" | "length" once a round finished it


class RoundState:
    """Everything one round holds between its calls. d, D: ints, or one (d_i, D_i) per request."""

    def __init__(
        self,
        model: LoopedModel,
        kv: KVCache,
        requests: list[Request],
        counts,
        d,
        D,
        round_idx: int,
        policy: str,
        mode: str,
        phases: "Phases | None" = None,
    ):
        counts = list(validate(counts, d, D))
        assert len(counts) == len(requests), "one token count per request"
        depths = request_depths(len(counts), d, D)
        check_policy(policy)
        for r, (_, Di) in zip(requests, depths):
            if Di > kv.depths_of(r.rid):
                raise OracleError(
                    f"request {r.rid}: target loops D={Di} exceed its {kv.depths_of(r.rid)} KV depth planes"
                )
        for r in requests:
            if not r.tokens:
                raise OracleError(f"request {r.rid} has no committed tokens")
            if kv.frontiers(r.rid) != {len(r.tokens) - 1}:
                raise OracleError(
                    f"request {r.rid}: KV frontiers {sorted(kv.frontiers(r.rid))} != "
                    f"committed tokens - 1 = {len(r.tokens) - 1}"
                )
        if len({r.rid for r in requests}) != len(requests):
            raise OracleError("a round names the same request twice")
        for r in requests:
            if r.finished:
                raise OracleError(f"request {r.rid} finished ({r.finished}) in an earlier round; it cannot run again")
        for r in requests:  # state changes only after every check
            r.rng.start_round(round_idx)
        self.model, self.kv, self.requests, self.counts = model, kv, requests, counts
        self.phases = PHASES if phases is None else phases  # what draft_head etc. call
        self.depths, self.policy = depths, policy  # (d_i, D_i) per request
        self.d, self.D = shared(depths)  # ints when shared, else None
        self.starts = [len(r.tokens) - 1 for r in requests]  # position of offset 0
        self.tokens = [[r.tokens[-1]] for r in requests]  # offset o's token
        self.hidden: dict[tuple[int, int], tuple[int, np.ndarray]] = {}  # (i, o) -> (depth, h)
        self.q: dict[tuple[int, int], np.ndarray] = {}  # draft distributions
        self.n_events = [len(r.rng.events) for r in requests]
        self.n_kv = len(kv.log)
        self.trace = RoundTrace.begin(mode, round_idx, policy, self.d, self.D, requests, counts, depths)
        self.stats = {
            "recurrent_calls": 0,
            "rows_per_call": [],
            "head_calls": 0,
            "head_rows": 0,
            "draft_head_calls": 0,
            "draft_head_rows": 0,
            "drafted": sum(c - 1 for c in counts),
        }


def run_call(st: RoundState, rows) -> None:
    """One recurrent call over rows [(i, offset, depth)]."""
    rid = [r.rid for r in st.requests]
    h_in = []
    for i, o, j in rows:
        if j == 0:
            if o >= len(st.tokens[i]):
                raise OracleError(
                    f"row (request {rid[i]}, offset {o}, depth 0) runs before its draft token "
                    f"is drawn (the draft head of offset {o - 1} has not run)"
                )
            h_in.append(st.model.embed([st.tokens[i][o]])[0])
        else:
            depth, h = st.hidden.get((i, o), (-1, None))
            if depth != j - 1:
                raise OracleError(
                    f"row (request {rid[i]}, offset {o}, depth {j}) runs when its offset is at "
                    f"depth {depth}, not {j - 1}"
                )
            h_in.append(h)
    call = st.stats["recurrent_calls"]
    stack = getattr(st.model, "stack", np.stack)  # a model may keep its states (on a device)
    h_out = st.model.recurrent_call([(rid[i], st.starts[i] + o, j) for i, o, j in rows], stack(h_in), st.kv, call)
    for (i, o, j), h in zip(rows, h_out):
        st.hidden[(i, o)] = (j, h)
    st.trace.calls.append({"rows": [[rid[i], o, j] for i, o, j in rows], "draft_head": []})
    st.stats["recurrent_calls"] += 1
    st.stats["rows_per_call"].append(len(rows))


def head_call(st: RoundState, rows, which: int, what: str, name: str) -> np.ndarray:
    """lm_head over rows [(i, offset)] whose branch must be at depth (d_i, D_i)[which] - 1:
    logits [n, V]."""
    for i, o in rows:
        got, want = st.hidden.get((i, o), (-1, None))[0], st.depths[i][which] - 1
        if got != want:
            raise OracleError(
                f"{what} on (request {st.requests[i].rid}, offset {o}) at depth {got}, expected depth {name} = {want}"
            )
    st.stats["head_calls"] += 1
    st.stats["head_rows"] += len(rows)
    return st.model.head(getattr(st.model, "stack", np.stack)([st.hidden[r][1] for r in rows]))


def seen(st: RoundState, i: int, o: int) -> sampling.Seen:
    """What request i's logits at offset o see: its prompt, and as output the tokens earlier
    rounds generated, then this round's drafts 1..o (draft and verification logits alike)."""
    req = st.requests[i]
    n = len(req.tokens) - req.generated
    return sampling.Seen(
        tuple(req.tokens[:n]), tuple(req.tokens[n:]) + tuple(st.tokens[i][1 : o + 1]), o, st.counts[i] - 1
    )


def draft_head(st: RoundState, heads) -> None:
    """Draft head on rows [(i, offset)] at depth d_i-1, then draw offset+1's token."""
    if not heads:
        return
    logits = head_call(st, heads, 0, "draft head", "d_i-1")
    sampling = st.phases.sampling
    for (i, o), lg in zip(heads, logits):
        req = st.requests[i]
        assert len(st.tokens[i]) == o + 1, f"draft of request {req.rid} offset {o + 1} drawn out of order"
        st.trace.draft_logits[(req.rid, o)] = lg
        if req.params.greedy:
            tok = sampling.greedy_token(lg, req.params, seen(st, i, o))
        else:
            q = st.q[(i, o)] = sampling.filtered_probs(lg, req.params, seen(st, i, o))
            tok = sampling.categorical(q, req.rng.draw("draft", o))
        st.tokens[i].append(tok)
    st.trace.calls[-1]["draft_head"] = [[st.requests[i].rid, o] for i, o in heads]
    st.stats["draft_head_calls"] += 1
    st.stats["draft_head_rows"] += len(heads)


def verify_head(st: RoundState) -> dict:
    """One head call over every (i, offset) at depth D_i-1: the verification logits."""
    rows = [(i, o) for i, t in enumerate(st.counts) for o in range(t)]
    logits = head_call(st, rows, 1, "verification head", "D_i-1")
    for (i, o), lg in zip(rows, logits):
        st.trace.verify_logits[(st.requests[i].rid, o)] = lg
    return {r: lg for r, lg in zip(rows, logits)}


def accept(st: RoundState, i: int, logits: dict) -> tuple[int, list[int]]:
    """Acceptance for request i: (accepted drafts, emitted tokens). The uniforms after the
    drafts are drawn in stream order, as the decisions need them (fixed: all up front), and
    recorded as rng_trace.round_layout lays them out."""
    req, K, sampling = st.requests[i], st.counts[i] - 1, st.phases.sampling
    drafts = st.tokens[i][1:]
    if req.params.greedy:
        for o in range(K):
            best = sampling.greedy_token(logits[(i, o)], req.params, seen(st, i, o))
            if drafts[o] != best:
                return o, drafts[:o] + [best]
        return K, drafts + [sampling.greedy_token(logits[(i, K)], req.params, seen(st, i, K))]
    p = [sampling.filtered_probs(logits[(i, o)], req.params, seen(st, i, o)) for o in range(K + 1)]
    q = [st.q[(i, o)] for o in range(K)]
    drawn = {}  # stream index (from the round's start) -> uniform

    def u(index):
        while K + len(drawn) <= index:
            drawn[K + len(drawn)] = req.rng.uniform()
        return drawn[index]

    if st.policy == "fixed":
        u(2 * K)  # K accept uniforms and the final: drawn whatever happens
    a = next((o for o in range(K) if not sampling.accepts(u(K + o), p[o][drafts[o]], q[o][drafts[o]])), K)
    target = sampling.residual(p[a], q[a]) if a < K else p[K]
    layout = round_layout(st.policy, K, a)[K:]  # accepts, then the residual or the bonus
    for dr in layout:
        req.rng.record(dr.purpose, dr.offset, u(dr.index), dr.used)
    return a, drafts[:a] + [sampling.categorical(target, u(layout[-1].index))]


def finish_round(st: RoundState, logits: dict):
    """Accept, cut at a stop token or max_tokens, commit (append the kept tokens, roll back
    KV past the frontier), seal the trace. A request that stopped leaves the batch."""
    tr = st.trace
    for i, req in enumerate(st.requests):
        a, emitted = st.phases.accept(st, i, logits)  # decisions and RNG as without stops
        n, why = st.phases.sampling.stop_cut(emitted, req.params, req.generated)
        tr.record(req.rid, st.tokens[i][1:], a, emitted, n, req.generated, why, req.rng.events[st.n_events[i] :])
        req.tokens.extend(emitted[:n])  # n >= 1: a finished request never runs
        req.generated += n
        st.kv.truncate(req.rid, st.starts[i] + n)  # KV of offsets 0..n-1 stays
        if why:
            req.finished = why
    for w in st.kv.log[st.n_kv :]:
        tr.kv_writes[(w.request, w.position, w.depth, w.layer)] = (w.call, w.k, w.v)
    st.stats["accepted"] = sum(tr.accepted.values())
    st.stats["kv_writes"] = len(st.kv.log) - st.n_kv  # writes made (a duplicate shows here)
    tr.stats = st.stats
    return tr


@dataclass(frozen=True)
class Phases:
    """What a round runs (the rounds call these; draft_head, accept and finish_round reach
    the others through RoundState.phases). Replace one with dataclasses.replace."""

    run_call: Callable = run_call
    draft_head: Callable = draft_head
    verify_head: Callable = verify_head
    accept: Callable = accept
    finish_round: Callable = finish_round
    sampling: types.ModuleType | types.SimpleNamespace = sampling  # the oracle.sampling interface


PHASES = Phases()
