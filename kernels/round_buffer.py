"""The round buffer, built on the host: the whole schedule (oracle.schedule) turned into every call's
gather/scatter indices, packed into ONE int64 buffer that is uploaded once per round.

Row indices are slot-based so that every device buffer is persistent (CUDA graphs read
fixed addresses): offset o of the request in slot s lives at flat index s*Tcap + o of the
round buffers, its depth-j KV plane is j*n_slots + s. Positions are NOT planned here: they
are start[slot] + offset on the device, so a round can be planned while the previous round
of the same request is still in flight.

Per call the buffer holds  [flat(M) slot(M) off(M) plane(M) qidx(M) gplane(G)]  where the
call's G distinct planes are `gplane` and row r is query qidx[r] = g*Qm + i of the padded
[G, Qm] attention grid. Draft head: [flat(Mh) slot(Mh) off(Mh)]. Verify head: [flat(N)
slot(N)]. Requests: [slot(R) K(R) ubase(R)] and the uniform windows [R, W] (FP64 bits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from oracle.schedule import Schedule

from .rows import STEPS, filtered


@dataclass(slots=True)
class CallPlan:
    key: tuple  # (M, G, Qm): the shape a CUDA graph is captured for
    meta: tuple  # (start, length) in the round buffer
    head: tuple | None  # draft-head (start, length, Mh) or None


@dataclass(slots=True)
class RoundPlan:
    schedule: Schedule
    slots: list
    calls: list = field(default_factory=list)
    verify: tuple = ()  # (start, length, N)
    requests: tuple = ()  # (start, length, R)
    uniforms: tuple = ()  # (start, length, R, W)
    sampling: str = "full"  # head steps' sampler: "greedy" | "plain" | "full" (SAMPLING)
    processors: tuple = ()  # processor steps on in the round (processors_variant); (): none
    wrote: dict = field(default_factory=dict)  # (i, offset, depth) -> call that wrote its KV
    buf: np.ndarray | None = None


class _Packer:
    def __init__(self):
        self.parts, self.n = [], 0

    def add(self, *arrays) -> tuple:
        start = self.n
        for a in arrays:
            a = np.asarray(a, dtype=np.int64).reshape(-1)
            self.parts.append(a)
            self.n += a.size
        return start, self.n - start


def call_indices(rows, slots, Tcap: int, n_slots: int):
    """rows [(i, offset, depth)] -> (flat, slot, off, plane, qidx, gplane, Qm)."""
    plane = [j * n_slots + slots[i] for i, o, j in rows]
    group: dict[int, list[int]] = {}
    for r, p in enumerate(plane):
        group.setdefault(p, []).append(r)
    Qm = max(len(g) for g in group.values())
    qidx = [0] * len(rows)
    for g, members in enumerate(group.values()):
        for n, r in enumerate(members):
            qidx[r] = g * Qm + n
    flat = [slots[i] * Tcap + o for i, o, j in rows]
    return flat, [slots[i] for i, _, _ in rows], [o for _, o, _ in rows], plane, qidx, list(group), Qm


# What the round's head steps compute, from the round's requests' sampling parameters
# (known on the host, so no data-dependent branch on the device; part of the graph key):
#   greedy  every request greedy: argmax only, no probabilities
#   plain   some sampled, none with top-k/top-p: softmax(logits / T), no sorts
#   full    min-p/top-k/top-p masks (two sorts over the vocabulary per row)
# (banned/allowed tokens are masked to -inf before any of them, in every variant)
SAMPLING = ("greedy", "plain", "full")


def sampling_variant(params, vocab: int) -> str:
    """params: the round's requests' SamplingParams (flags from kernels/rows.py)."""
    if all(p.greedy for p in params):
        return "greedy"
    return "full" if any(filtered(p, vocab) for p in params) else "plain"


def processors_variant(steps) -> tuple:
    """steps: per request of the round, its rows.processor_steps (kept per request: the params
    never change). The steps on for any of them, in the chain's order; () when none is: the
    round then runs the steps without processors. Part of the head and accept steps' graph
    keys (like the sampling variant)."""
    if not any(steps):
        return ()
    on = set().union(*steps)
    return tuple(n for n in STEPS if n in on)


@dataclass(slots=True, frozen=True)
class Indices:
    """The part of a round buffer fixed by the schedule and the slots (RoundPlan's calls,
    wrote, verify and the packed index array): the same for every round that repeats them."""

    calls: tuple
    wrote: dict
    verify: tuple
    packed: np.ndarray


def plan_indices(schedule: Schedule, slots, Tcap: int, n_slots: int) -> Indices:
    pk = _Packer()
    plan = RoundPlan(schedule, list(slots))
    _pack_calls(plan, pk, schedule, slots, Tcap, n_slots)
    return Indices(tuple(plan.calls), plan.wrote, plan.verify, np.concatenate(pk.parts))


def build_plan(
    schedule: Schedule,
    slots,
    Tcap: int,
    n_slots: int,
    ubase,
    windows: np.ndarray,
    sampling: str = "full",
    indices: Indices | None = None,
    processors: tuple = (),
) -> RoundPlan:
    """schedule: the round's calls (batch index i); slots[i]: request i's KV slot;
    ubase[i]: stream index of windows[i, 0]; windows: [R, W] FP64 uniforms.
    indices: plan_indices(schedule, slots, Tcap, n_slots) when the caller kept it.
    processors: processors_variant of the round's requests."""
    assert sampling in SAMPLING, sampling
    assert set(processors) <= set(STEPS), processors
    plan = RoundPlan(schedule, list(slots), sampling=sampling, processors=tuple(processors))
    if indices is None:
        indices = plan_indices(schedule, slots, Tcap, n_slots)
    plan.calls, plan.wrote, plan.verify = list(indices.calls), indices.wrote, indices.verify
    pk = _Packer()
    pk.parts, pk.n = [indices.packed], indices.packed.size
    R = len(slots)
    K = [t - 1 for t in schedule.token_counts]
    plan.requests = pk.add(slots, K, ubase) + (R,)
    windows = np.ascontiguousarray(windows, dtype=np.float64)
    plan.uniforms = pk.add(windows.view(np.int64)) + windows.shape
    plan.buf = np.concatenate(pk.parts)
    return plan


def _pack_calls(plan: RoundPlan, pk: _Packer, schedule: Schedule, slots, Tcap: int, n_slots: int) -> None:
    for c, call in enumerate(schedule.calls):
        flat, slot, off, plane, qidx, gplane, Qm = call_indices(call.rows, slots, Tcap, n_slots)
        meta = pk.add(flat, slot, off, plane, qidx, gplane)
        head = None
        if call.draft_head:
            hs = [slots[i] for i, _ in call.draft_head]
            head = pk.add(
                [s * Tcap + o for s, (_, o) in zip(hs, call.draft_head)], hs, [o for _, o in call.draft_head]
            ) + (len(call.draft_head),)
        plan.calls.append(CallPlan((len(call.rows), len(gplane), Qm), meta, head))
        for i, o, j in call.rows:
            plan.wrote[(i, o, j)] = c
    vs = [slots[i] for i, _ in schedule.verify_head]
    plan.verify = pk.add([s * Tcap + o for s, (_, o) in zip(vs, schedule.verify_head)], vs) + (len(vs),)


class PlanCache:
    """The last `size` (schedule, Indices) pairs of one session by round key (counts, depths,
    slots, n_slots): a round that repeats an earlier one's shape skips planning and packing."""

    def __init__(self, size: int = 64):
        self.size, self.entries = size, {}

    def get(self, key, make):
        hit = self.entries.pop(key, None)
        if hit is None:
            hit = make()
            if len(self.entries) >= self.size:
                self.entries.pop(next(iter(self.entries)))  # the least recently used
        self.entries[key] = hit
        return hit


def scratch_call_meta(key, scratch: int, Tcap: int) -> np.ndarray:
    """Harmless rows of shape `key` (all on the scratch slot) for graph warm-up."""
    M, G, Qm = key
    return np.concatenate(
        [
            np.full(M, scratch * Tcap),
            np.full(M, scratch),
            np.zeros(M),
            np.full(M, scratch),
            np.arange(M),
            np.full(G, scratch),
        ]
    ).astype(np.int64)


def scratch_head_meta(n: int, fields: int, scratch: int, Tcap: int) -> np.ndarray:
    cols = [np.full(n, scratch * Tcap), np.full(n, scratch), np.zeros(n)][:fields]
    return np.concatenate(cols).astype(np.int64)


def scratch_request_meta(R: int, W: int, scratch: int) -> np.ndarray:
    """Request fields [slot(R) K(R) ubase(R)] on the scratch slot (K = 1), then W zero uniforms per row."""
    return np.concatenate([np.full(R, scratch), np.ones(R), np.zeros(R), np.zeros(R * W)]).astype(np.int64)
