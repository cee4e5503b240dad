"""What a shrunk case must still fail with (issue 44): the original failure as a `Target`
(`target_of`), and whether a candidate's verdict fails the same way (`holds`).

The same way: the failure class is the failed check's name after its last ": " (kv_writes,
draft_logits, verify_logits, decisions, rng_events, tokens, malformed, backend, schedule, stats, ...);
a candidate holds when one of its failed checks has that class. For the drift probe's "drift" the
candidate's failure must name the same parameter (one of the names of the direction it names), for
"precision" the same value group (the first past the threshold in compute order), for "backend" the
same exception class.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..probe.precision import compute_order, group_label
from ..scenario import Case

PROBE = "drift probe"


def failure_class(check_name: str) -> str:
    """A failed check's class: its name after the last ': ' ("ragged (5,3,1) [loop]: kv_writes" ->
    "kv_writes"; "drift probe: precision" -> "precision")."""
    return check_name.rsplit(": ", 1)[-1]


@dataclass(slots=True)
class Target:
    """What a candidate must fail with: the class of the original's first failed check, for the drift
    probe the parameter or group it names, and the case it failed on (None: the drift probe)."""

    check: str  # the original failed check's full name
    cls: str  # its class
    detail: str
    case: Case | None = None  # the case that failed (None: the drift probe)
    key: str = ""  # drift: the parameter named; precision: the group named; "" otherwise
    hint: tuple = ()  # (round, request) the original failure names, where it names them
    failure: dict | None = None  # the original failure's record (report.Failure.to_json), where it has one

    @property
    def probe(self) -> bool:
        return self.case is None

    def describe(self) -> str:
        return f"[{self.cls}]" + (f" ({self.key})" if self.key else "")


def drift_key(rep) -> str:
    """The direction a failing drift report names (the failing one that explains most), or ''."""
    if rep is None:
        return ""
    bad = [e for e in rep.estimates if abs(e.t) > rep.threshold]
    return max(bad, key=lambda e: e.explained).label if bad else ""


def precision_key(rep) -> str:
    """The value group a failing precision report names first (compute order), or ''."""
    if rep is None:
        return ""
    bad = [g for g in rep.groups if g.t > g.threshold]
    return group_label(min(bad, key=lambda g: compute_order(g.key)).key) if bad else ""


def _key(v, cls: str, check: dict | None = None) -> str:
    """What else the failure names that a candidate's must name too: the drift's parameter, the
    precision's group, the exception class a backend raised (its record's `got`)."""
    if cls == "drift":
        return drift_key(v.drift)
    if cls == "precision":
        return precision_key(v.precision)
    if cls == "backend":
        return str(_failure(check).get("got") or "")
    return ""


def _failure(check: dict | None) -> dict:
    return (check or {}).get("failure") or {}


def hint_of(check: dict | None) -> tuple:
    """(round, request), (round,) or () of the place the failure's record names."""
    f = _failure(check)
    out = ()
    for k in ("round", "request"):
        if f.get(k) is None:
            break
        out += (int(f[k]),)
    return out


def target_of(v, cases) -> Target | None:
    """The original's first failed check as a target, with the case it names (among `cases`); None
    where nothing can be shrunk ("nothing compared", or a check of no case)."""
    bad = [c for c in v.failed if c["name"] != "nothing compared"]
    if not bad:
        return None
    first = bad[0]
    cls = failure_class(first["name"])
    key = _key(v, cls, first)
    if first["name"].startswith(PROBE + ": "):
        return Target(first["name"], cls, first["detail"], None, key, hint_of(first), first.get("failure"))
    for case in cases:
        if first["name"].startswith(case.name + " [") or first["name"].startswith(case.name + ": "):
            return Target(first["name"], cls, first["detail"], case, key, hint_of(first), first.get("failure"))
    return None


def holds(v, target: Target) -> dict | None:
    """The failed check of `v` that fails as the target does, or None."""
    for c in v.failed:
        if c["name"] == "nothing compared" or failure_class(c["name"]) != target.cls:
            continue
        if c["name"].startswith(PROBE + ": ") != target.probe:
            continue
        if target.key and not set(_key(v, target.cls, c).split(" = ")) & set(target.key.split(" = ")):
            continue
        return c
    return None
