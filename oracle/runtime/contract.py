"""The backend contract in code: what `python -m oracle check --backend`, the property suite and
the meta tests call on a backend (docs/DESIGN.md sections 9 and 13).

`Backend` and `Session` are `typing.Protocol`s of the required part (`REQUIRED`); the optional
hooks are listed in OPTIONAL_BACKEND and OPTIONAL_SESSION with what they mean. `contract_problems`
says, in one line each, where an object breaks the contract (an empty list: it keeps it);
oracle.runtime.backends.load_backend refuses a backend it names anything for. What a backend offers
beyond the required part is its `Capabilities`, read once: a backend load_backend accepted is a
`LoadedBackend` (its own attributes, and `.caps`); `capabilities(bk)` gives the same for an object
made directly (a test's), and `session_capabilities(s)` a session's optional hooks. This module is
the one place that probes for the optional hooks; the runner, the judge and the property suite
read `Capabilities`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

from ..rng_events import POLICIES
from ..tolerances import TOLERANCES

REQUIRED = ("name", "dtype", "exact", "policies", "session")  # what every backend has
DEFAULT_IN_FLIGHT = 2  # max_in_flight when a backend does not say


@runtime_checkable
class Session(Protocol):
    """A backend's session over one model at (d, D), one mode ("block" | "loop") and one RNG
    policy. The runner calls add, step, remove and tokens with these arguments only."""

    def add(
        self,
        rid: int,
        prompt: list[int],
        params: Any,
        replay: list[float] | None = None,
        depths: tuple[int, int] | None = None,
    ) -> None:
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

    name: str  # shown in reports
    dtype: str  # "float32" | "bfloat16" | "float16": its row of TOLERANCES
    exact: bool  # bit-identical to the reference is expected
    policies: tuple  # the RNG policies it supports, a subset of oracle.rng_trace.POLICIES

    def session(self, model, d: int, D: int, mode: str, policy: str = "sequential", **options) -> Session:
        """A fresh session; model is the reference LoopedModel (config + FP32 weights by HF
        name), which the backend converts as it likes; options: its own (e.g. graphs="off")."""


# Optional hooks of a backend: name -> (what it means, a check of its value).
OPTIONAL_BACKEND = {
    "host_rng": (
        "uniforms are each request's seeded host stream, drawn like the reference's "
        "(the reference then draws its own; default: exact)",
        lambda v: isinstance(v, bool),
    ),
    "sampling": (
        "the sampler behind oracle.sampling's interface, which the property suite's "
        "enumeration tests exercise (property_tests/harness.py sampling_impl)",
        lambda v: all(callable(getattr(v, f, None)) for f in SAMPLING_INTERFACE),
    ),
    "max_in_flight": (
        f"how many submitted rounds may wait to be collected (default {DEFAULT_IN_FLIGHT})",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    ),
    "fork_safe": (
        "the backend may run in a forked child of the process that loaded it (no threads, device "
        "contexts or sockets of its own yet): `check --backend` then runs the drift probe and its fit in "
        "one, beside the cases' runs (default False)",
        lambda v: isinstance(v, bool),
    ),
    "drift_stats_fn": (
        "drift_stats_fn(model, dtype, basis=None): the drift verdict's sensitivities "
        "when this backend is the judge (judge_jax)",
        callable,
    ),
    "precision_energy_fn": (
        "precision_energy_fn(model, dtype): the precision verdict's noise twin when this "
        "backend is the judge (judge_jax)",
        callable,
    ),
    "twin_logits_fn": (
        "twin_logits_fn(model, dtype) -> twin_logits(tokens, loops, positions): the noise twin's logits "
        "[samples, loops, positions, vocab] of a context when this backend is the judge (judge_jax): the "
        "token rule's margin scales",
        callable,
    ),
    "batch_invariant": (
        "a row's values do not depend on which other rows share its call (row count, ragged depths, "
        "place in the call): the verdict then adds the exactness tier, class [invariance] (block = loop "
        '= plain decoding = alone, bitwise; docs/DESIGN.md, "Batch invariance")',
        lambda v: isinstance(v, bool),
    ),
}
# Optional hooks of a session: name -> what it means.
OPTIONAL_SESSION = {
    "submit": "submit(counts) -> handle: a round started, not yet collected (with collect)",
    "collect": "collect(handle) -> RoundTrace: the round submit started (with submit)",
    "kv_frontiers": "kv_frontiers(rid) -> set of ints: the KV frontiers of the request's planes (the KV rollback "
    "checks of the property suite; skipped without it)",
    "capture": "capture(rid, position, depth) arms the capture of that row's intermediates in every later call "
    "that computes it (None, None, None disarms); captured() -> [oracle.capture.Captured] in execution order, "
    "then cleared (the localizer, oracle/judge/plans/localize.py; without it the localizer stops at the row and layer)",
}
SAMPLING_INTERFACE = ("filtered_probs", "categorical", "accepts", "residual")  # what the property suite calls
SESSION_METHODS = ("add", "step", "remove", "tokens")
_CALLS = {  # how oracle.judge.runner.run_scenario calls each method
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
        return None  # no signature to read (a builtin): not checkable
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


# ---- what a backend offers beyond the required part, read once ----


@dataclass(frozen=True)
class Capabilities:
    """A backend's optional hooks (OPTIONAL_BACKEND), as the runner, the judge and the property
    suite read them. Read once: at load (LoadedBackend.caps), or by capabilities(bk) for an object
    made directly."""

    host_rng: bool = False  # uniforms are each request's seeded host stream: host_rng = True, or exact
    fork_safe: bool = False  # may run in a forked child (the drift probe beside the cases)
    max_in_flight: int = DEFAULT_IN_FLIGHT  # submitted rounds that may wait to be collected
    sampling: Any = None  # its own sampler (SAMPLING_INTERFACE); None: it has none (oracle.sampling's)
    drift_stats_fn: Callable | None = None  # drift_stats_fn(model, dtype, basis=None) as the judge's side
    precision_energy_fn: Callable | None = None  # precision_energy_fn(model, dtype) as the judge's side
    twin_logits_fn: Callable | None = None  # twin_logits_fn(model, dtype) as the judge's side (token margins)
    batch_invariant: bool = False  # the exactness tier applies (bitwise block = loop = plain = alone)

    @classmethod
    def read(cls, backend) -> "Capabilities":
        """The hooks of `backend` as it declares them (absent or None: the default)."""
        hook = {h: getattr(backend, h, None) for h in OPTIONAL_BACKEND}
        return cls(
            host_rng=bool(getattr(backend, "exact", False) or hook["host_rng"]),
            fork_safe=hook["fork_safe"] is True,
            max_in_flight=DEFAULT_IN_FLIGHT if hook["max_in_flight"] is None else hook["max_in_flight"],
            sampling=hook["sampling"],
            drift_stats_fn=hook["drift_stats_fn"],
            precision_energy_fn=hook["precision_energy_fn"],
            twin_logits_fn=hook["twin_logits_fn"],
            batch_invariant=hook["batch_invariant"] is True,
        )


@dataclass(frozen=True)
class SessionCapabilities:
    """A session's optional hooks (OPTIONAL_SESSION)."""

    submit_collect: bool = False  # submit(counts) -> handle and collect(handle) -> RoundTrace
    kv_frontiers: Callable | None = None  # kv_frontiers(rid) -> set of ints
    capture: bool = False  # capture(rid, position, depth) and captured(): the localizer's hooks


def tolerance_row(backend) -> str:
    """The backend's row of the judge's tolerance table (oracle.tolerances.TOLERANCES): "exact"
    for a backend that declares itself exact, else its dtype."""
    return "exact" if backend.exact else backend.dtype


def capabilities(backend) -> Capabilities:
    """What `backend` offers: the Capabilities it carries (a LoadedBackend's, a GuardedBackend's),
    else read from the object now (a backend made directly, as tests do)."""
    caps = backend.caps if isinstance(backend, LoadedBackend) else getattr(backend, "caps", None)
    return caps if isinstance(caps, Capabilities) else Capabilities.read(backend)


def session_capabilities(session) -> SessionCapabilities:
    """What a session offers beyond add, step, remove and tokens."""
    has = {m: callable(getattr(session, m, None)) for m in OPTIONAL_SESSION}
    return SessionCapabilities(
        submit_collect=has["submit"] and has["collect"],
        kv_frontiers=session.kv_frontiers if has["kv_frontiers"] else None,
        capture=has["capture"] and callable(getattr(session, "captured", None)),
    )


class LoadedBackend:
    """A backend that oracle.runtime.backends.load_backend accepted (contract_problems found nothing):
    the backend's own attributes pass through, `caps` is its Capabilities (read at load) and
    `__wrapped__` the object its factory returned."""

    def __init__(self, backend, caps: Capabilities | None = None):
        self.__wrapped__ = backend
        self.caps = Capabilities.read(backend) if caps is None else caps

    def __getattr__(self, name):
        if name.startswith("__") or name == "caps":  # not yet set (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"LoadedBackend({self.__wrapped__!r})"

    @property
    def name(self) -> str:
        return self.__wrapped__.name

    @property
    def dtype(self) -> str:
        return self.__wrapped__.dtype

    @property
    def exact(self) -> bool:
        return self.__wrapped__.exact

    @property
    def policies(self) -> tuple:
        return self.__wrapped__.policies

    def session(self, *args, **kwargs) -> Session:
        return self.__wrapped__.session(*args, **kwargs)


def as_loaded(backend) -> LoadedBackend:
    """`backend` as a LoadedBackend (itself if it is one; a backend made directly gets its
    Capabilities read now). Checks nothing: load_backend is where the contract is enforced."""
    return backend if isinstance(backend, LoadedBackend) else LoadedBackend(backend, capabilities(backend))


def unwrap(backend):
    """The object a backend's factory returned (a LoadedBackend's __wrapped__; else itself)."""
    return backend.__wrapped__ if isinstance(backend, LoadedBackend) else backend
