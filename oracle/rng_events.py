"""The RNG policies' names and the RNG event, one recorded uniform of a request's stream, and
its JSON form (docs/DESIGN.md section 6). A leaf: oracle/rng_trace.py draws and records events
(and states the policies), oracle/traces.py stores them in a round's trace, oracle/runtime/contract.py
reads the names."""

from __future__ import annotations

from dataclasses import asdict, dataclass

POLICIES = ("sequential", "fixed")  # oracle.rng_trace.POLICIES: what each one draws is there
PURPOSES = ("draft", "accept", "residual", "bonus")  # what a uniform is drawn for (oracle.rng_trace)


@dataclass(slots=True, frozen=True)
class RngEvent:
    request: object
    round: int
    seq: int
    purpose: str
    offset: int
    value: float
    used: bool = True

    def key(self) -> tuple:
        return (self.request, self.round, self.seq, self.purpose, self.offset, self.used)


def events_to_json(events) -> list[dict]:
    return [asdict(e) for e in events]


def events_from_json(rows) -> list[RngEvent]:
    return [RngEvent(**r) for r in rows]
