"""Per-request random streams and the RNG event trace (docs/DESIGN.md section 6).

Every draw is an event (request, round, seq, purpose, offset, value). Policy `sequential`:
drafts by offset, then per offset one accept uniform, on rejection one residual draw and
stop, else one bonus draw. Policy `fixed`: 2*K+1 uniforms per round in a fixed layout
(K draft, K accept, 1 final used as residual or bonus); unused ones are recorded with
used=False. Greedy requests draw nothing.

`round_layout(policy, K, accepted)` is the one statement of that layout (which stream
index each draw takes); the reference (oracle/phases.py), the torch engine and collector
(kernels/), and the property harness all follow it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .errors import OracleError
from .rng_events import POLICIES, PURPOSES, RngEvent, events_from_json, events_to_json


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise OracleError(f"unknown RNG policy {policy!r} (known: {', '.join(POLICIES)})")
    return policy


@dataclass(slots=True, frozen=True)
class Draw:
    """One uniform of a sampled request's round: `index` is its place in the request's
    stream counted from the round's first uniform (drafts take 0..K-1)."""

    purpose: str
    offset: int
    index: int
    used: bool = True


def draft_index(offset):
    """Stream index of the draft uniform of `offset` (ints or tensors)."""
    return offset


def accept_index(K, offset):
    """Stream index of the accept uniform of `offset` (ints or tensors)."""
    return K + offset


def final_index(policy: str, K, accepted, minimum=min):
    """Stream index of the final uniform: the residual of offset `accepted` < K, or the bonus
    (accepted = K). sequential: right after the last accept uniform drawn (K + a + 1, the bonus
    at 2K); fixed: always 2K. Works on ints, or on tensors with minimum=torch.minimum."""
    return 2 * K if check_policy(policy) == "fixed" else minimum(K + accepted + 1, 2 * K)


def draws_used(policy: str, K, accepted, minimum=min):
    """Uniforms a round consumes from the stream: the final one's index + 1."""
    return final_index(policy, K, accepted, minimum) + 1


def max_draws(K: int) -> int:
    """The most uniforms a round of K drafts can consume (either policy): 2K + 1."""
    return 2 * K + 1


def round_layout(policy: str, K: int, accepted: int) -> list[Draw]:
    """Every draw of a sampled request's round with K drafts of which `accepted` were
    accepted, in event (= stream) order: K drafts, the accept uniforms (sequential: offsets
    0..min(a, K-1); fixed: all K, used only up to a), then the residual or the bonus."""
    assert 0 <= accepted <= K, (K, accepted)
    draws = [Draw("draft", o, draft_index(o)) for o in range(K)]
    if check_policy(policy) == "sequential":
        draws += [Draw("accept", o, accept_index(K, o)) for o in range(min(accepted + 1, K))]
    else:
        draws += [Draw("accept", o, accept_index(K, o), o <= accepted) for o in range(K)]
    final = final_index(policy, K, accepted)
    draws.append(Draw("residual", accepted, final) if accepted < K else Draw("bonus", K, final))
    assert len(draws) == draws_used(policy, K, accepted) and [d.index for d in draws] == list(range(len(draws)))
    return draws


def uniform_source(seed: int | None = None, replay=None) -> tuple:
    """(generator, replay list), exactly one of them set: a request's uniforms come from numpy
    PCG64(seed) (the RNG contract) or from a list of uniforms to replay."""
    assert (seed is None) != (replay is None), "give a seed or a replay list"
    if replay is None:
        return np.random.Generator(np.random.PCG64(seed)), None
    return None, [float(u) for u in replay]


class RequestRng:
    """A request's uniform source: its seeded generator, or a replayed list of uniforms."""

    def __init__(self, request, seed: int | None = None, replay=None):
        self.request = request
        self.gen, self.replay = uniform_source(seed, replay)
        self.pos = 0
        self.events: list[RngEvent] = []
        self.round, self.seq = 0, 0

    def snapshot(self) -> tuple:
        """Everything a failed round must restore."""
        return (
            self.gen.bit_generator.state if self.gen is not None else None,
            self.pos,
            len(self.events),
            self.round,
            self.seq,
        )

    def restore(self, snap: tuple) -> None:
        state, self.pos, n, self.round, self.seq = snap
        if state is not None:
            self.gen.bit_generator.state = state
        del self.events[n:]

    def start_round(self, round_idx: int) -> None:
        self.round, self.seq = round_idx, 0

    def uniform(self) -> float:
        if self.gen is not None:
            return float(self.gen.random())
        if self.pos >= len(self.replay):
            raise OracleError(f"replay of request {self.request} ran out of uniforms after {self.pos}")
        u = self.replay[self.pos]
        self.pos += 1
        return u

    def draw(self, purpose: str, offset: int) -> float:
        """Draw one uniform and record it."""
        u = self.uniform()
        self.record(purpose, offset, u)
        return u

    def record(self, purpose: str, offset: int, u: float, used: bool = True) -> None:
        """Record a uniform drawn with uniform() (the fixed policy decides `used` later)."""
        assert purpose in PURPOSES, purpose
        self.events.append(RngEvent(self.request, self.round, self.seq, purpose, offset, u, used))
        self.seq += 1


def save_events(path, events) -> None:
    with open(path, "w") as f:
        json.dump(events_to_json(events), f, indent=1)


def load_events(path) -> list[RngEvent]:
    with open(path) as f:
        return events_from_json(json.load(f))


def first_difference(a, b) -> str | None:
    """Name the first differing event of two event lists (None when equal)."""
    for n, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"RNG event #{n} differs: {x} vs {y}"
    if len(a) != len(b):
        n = min(len(a), len(b))
        extra = (a if len(a) > len(b) else b)[n]
        return f"RNG event #{n} exists on one side only: {extra}"
    return None
