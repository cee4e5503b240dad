"""The backend contract in code: what `python -m oracle check --backend`, the property suite and
the meta tests call on a backend (oracle.judge.runner.run_scenario is the one caller of a session).

`Backend` and `Session` are `typing.Protocol`s of the required part; the optional hooks are
listed in OPTIONAL_BACKEND and OPTIONAL_SESSION with what they mean. `contract_problems` says,
in one line each, where an object breaks the contract (an empty list: it keeps it). Nothing
here changes what load_backend accepts (oracle/backends.py: REQUIRED and the dtype's tolerance
row); the contract test (tests/test_contract.py) checks every in-repo backend against it.
"""
from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

from ..backends import REQUIRED
from ..rng_trace import POLICIES
from ..tolerances import TOLERANCES


@runtime_checkable
class Session(Protocol):
    """A backend's session over one model at (d, D), one mode ("block" | "loop") and one RNG
    policy. The runner calls add, step, remove and tokens with these arguments only."""

    def add(self, rid: int, prompt: list[int], params: Any, replay: list[float] | None = None,
            depths: tuple[int, int] | None = None) -> None:
        """Prefill request rid. replay: the uniforms to consume instead of the request's seeded
        stream; depths: (d_i, D_i) for this request (default the session's (d, D))."""

    def step(self, counts: dict) -> Any:
        """One round: counts {rid: T_i}; returns the round's oracle.traces.RoundTrace."""

    def remove(self, rid: int) -> list[int]:
        """The request leaves the batch; returns its committed tokens."""

    def tokens(self, rid: int) -> list[int]:
        """The request's committed tokens so far."""


@runtime_checkable
class Backend(Protocol):
    """What runs rounds and returns traces."""

    name: str                  # shown in reports
    dtype: str                 # "float32" | "bfloat16" | "float16": its row of TOLERANCES
    exact: bool                # bit-identical to the reference is expected
    policies: tuple            # the RNG policies it supports, a subset of oracle.rng_trace.POLICIES

    def session(self, model, d: int, D: int, mode: str, policy: str = "sequential", **options) -> Session:
        """A fresh session; model is the reference LoopedModel (config + FP32 weights by HF
        name), which the backend converts as it likes; options: its own (e.g. graphs="off")."""


# Optional hooks of a backend: name -> (what it means, a check of its value).
OPTIONAL_BACKEND = {
    "host_rng": ("uniforms are each request's seeded host stream, drawn like the reference's "
                 "(the reference then draws its own; default: exact)", lambda v: isinstance(v, bool)),
    "sampling": ("the sampler behind oracle.sampling's interface, which the property suite's "
                 "enumeration tests exercise (property_tests/harness.py sampling_impl)",
                 lambda v: all(callable(getattr(v, f, None)) for f in SAMPLING_INTERFACE)),
    "max_in_flight": ("how many submitted rounds may wait to be collected (default 2)",
                      lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1),
    "fork_safe": ("the backend may run in a forked child of the process that loaded it (no threads, device "
                  "contexts or sockets of its own yet): `check --backend` then runs the drift probe and its fit in "
                  "one, beside the cases' runs (default False)", lambda v: isinstance(v, bool)),
    "drift_stats_fn": ("drift_stats_fn(model, dtype, basis=None): the drift verdict's sensitivities "
                       "when this backend is the judge (judge_jax)", callable),
}
# Optional hooks of a session: name -> what it means.
OPTIONAL_SESSION = {
    "submit": "submit(counts) -> handle: a round started, not yet collected (with collect)",
    "collect": "collect(handle) -> RoundTrace: the round submit started (with submit)",
    "kv_frontiers": "kv_frontiers(rid) -> set of depths: the KV planes the request has written",
}
SAMPLING_INTERFACE = ("filtered_probs", "categorical", "accepts", "residual")   # what the property suite calls
SESSION_METHODS = ("add", "step", "remove", "tokens")
_CALLS = {                                 # how oracle.judge.runner.run_scenario calls each method
    "add": ((0, [1], None), {"replay": None, "depths": (1, 2)}),
    "step": (({0: 1},), {}),
    "remove": ((0,), {}),
    "tokens": ((0,), {}),
}


def _binds(fn, args, kwargs) -> str | None:
    """None if fn accepts these arguments, else the reason."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None                        # no signature to read (a builtin): not checkable
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        return str(e)
    return None


def contract_problems(backend, session=None) -> list[str]:
    """Where `backend` (and, when given, one of its sessions) breaks the contract, a line each."""
    out = []
    missing = [a for a in REQUIRED if not hasattr(backend, a)]
    out += [f"backend lacks {a}" for a in missing]
    if "name" not in missing and not isinstance(backend.name, str):
        out.append(f"name is {type(backend.name).__name__}, not str")
    if "exact" not in missing and not isinstance(backend.exact, bool):
        out.append(f"exact is {type(backend.exact).__name__}, not bool")
    if "dtype" not in missing:
        if not isinstance(backend.dtype, str):
            out.append(f"dtype is {type(backend.dtype).__name__}, not str")
        elif not getattr(backend, "exact", False) and backend.dtype not in TOLERANCES:
            out.append(f"dtype {backend.dtype!r} has no tolerance row (known: {', '.join(TOLERANCES)})")
    if "policies" not in missing:
        pol = backend.policies
        if not isinstance(pol, (tuple, list)) or any(p not in POLICIES for p in pol):
            out.append(f"policies {pol!r} is not a sequence of {', '.join(POLICIES)}")
    if "session" not in missing:
        if not callable(backend.session):
            out.append("session is not callable")
        else:
            why = _binds(backend.session, (None, 1, 2, "block", "sequential"), {})
            if why:
                out.append(f"session(model, d, D, mode, policy) does not bind: {why}")
    for hook, (_, ok) in OPTIONAL_BACKEND.items():
        value = getattr(backend, hook, None)
        if value is not None and not ok(value):
            out.append(f"optional {hook} = {value!r} is not what the contract says: {OPTIONAL_BACKEND[hook][0]}")
    if session is not None:
        out += session_problems(session)
    return out


def session_problems(session) -> list[str]:
    """Where a session breaks the contract, a line each."""
    out = []
    for m in SESSION_METHODS:
        fn = getattr(session, m, None)
        if not callable(fn):
            out.append(f"session lacks {m}()")
            continue
        why = _binds(fn, *_CALLS[m])
        if why:
            out.append(f"session.{m} does not take the runner's arguments: {why}")
    has = {m: callable(getattr(session, m, None)) for m in OPTIONAL_SESSION}
    if has["submit"] != has["collect"]:
        out.append("session has one of submit/collect without the other")
    return out
