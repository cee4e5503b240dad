"""What a step of the sampling chain is (`Step`), the chain as its steps in order (`Chain`), and
the helpers the steps' checks share (docs/DESIGN.md section 12). The steps themselves and `CHAIN`:
oracle/sampling_params.py.

A step's check: (params, vocab=None) -> {field: normal form}; a bad value is one OracleError
line naming the field and the value; with vocab, its token ids are checked too."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import OracleError


@dataclass(frozen=True)
class Step:
    """One step of the chain, everything about it that varies by step: its SamplingParams fields
    with their off values (the defaults), when it is on, the check of its values, what it does,
    its command-line options and property-test strategy, and for a filter its device rows and
    its margin. kind: "mask" and "processor" steps take (x, params, seen), "filter" steps
    (x, params); greedy requests stop after the processors. A step that is off is the identity.
    Read from here: SamplingParams' checks and JSON; the CLI's options (oracle/cli/step_options.py)
    and --case-json's refusals; the shrinker's moves (each field to its off value; a filter's
    fields off with temperature 0); the judge's margins; the property suite's drawing; the
    torch backend's rows (kernels/rows.py) and its step of the same name (kernels/sampler.py)."""

    name: str
    kind: str  # "mask" | "processor" | "filter"
    apply: Callable  # FP32 logits [V] -> FP32 logits [V]
    off: dict  # field -> its off value
    check: Callable  # (params, vocab=None) -> {field: normal form}; one-line OracleError
    on: Callable | None = None  # params -> bool; None: a field is not its off value
    seen: bool = False  # it reads the tokens before the logits (Seen)
    options: tuple = ()  # (dest, kind, metavar, help): oracle/cli/step_options.py ARG_TYPES
    strategy: str = ""  # property_tests/strategies.py: the function drawing its values
    rows: Callable | None = None  # (params, V) -> {row: numpy}; None: kernels/rows.py's
    margin: Callable | None = None  # filters: lowers a filters.Margins (oracle/filters.py)
    cuts: Callable | None = None  # filters: (params, vocab) -> bool, it can drop tokens; None: is_on

    def given(self, params) -> bool:
        """A field of the step is not its off value (what to_json writes)."""
        return any(getattr(params, f) != v for f, v in self.off.items())

    def is_on(self, params) -> bool:
        return self.on(params) if self.on is not None else self.given(params)

    def drops(self, params, vocab: int) -> bool:
        """A filter that can drop tokens of this request (the device's sorting sampler)."""
        return self.cuts(params, vocab) if self.cuts is not None else self.is_on(params)


@dataclass(frozen=True)
class Chain:
    """The chain's steps in order (oracle/sampling_params.py's docstring; `CHAIN` there).
    `replace(top_k=f)` swaps one step's function (meta_tests' faulty samplers); kernels/sampler.py
    runs its own steps by name."""

    steps: tuple

    @property
    def processors(self) -> tuple:
        """(name, function) of the mask and the processors, in order."""
        return tuple((s.name, s.apply) for s in self.steps if s.kind != "filter")

    @property
    def filters(self) -> tuple:
        return tuple((s.name, s.apply) for s in self.steps if s.kind == "filter")

    def named(self, kind: str) -> tuple:
        """The steps of one kind ("mask", "processor", "filter"), in order."""
        return tuple(s for s in self.steps if s.kind == kind)

    def off(self, kind: str = "processor") -> dict:
        """The SamplingParams fields of the steps of one kind at their off values
        (dataclasses.replace(params, **CHAIN.off()): the params without processors)."""
        return {f: v for s in self.named(kind) for f, v in s.off.items()}

    def inert(self, params, vocab: int) -> list:
        """The fields of the filters (with options) that are on but keep every token of a
        `vocab`-token vocabulary (top_k >= vocab): given, they would have no effect."""
        idle = [s for s in self.named("filter") if s.options and s.is_on(params) and not s.drops(params, vocab)]
        return [f for s in idle for f in s.off]

    def replace(self, **steps) -> "Chain":
        names = {s.name for s in self.steps}
        assert set(steps) <= names, f"no step {sorted(set(steps) - names)} in the chain"
        return Chain(tuple(dataclasses.replace(s, apply=steps.get(s.name, s.apply)) for s in self.steps))


# ---- what the steps' checks share ----


def in_vocab(name: str, ids, vocab: int) -> None:
    bad = [t for t in ids if t >= vocab]
    if bad:
        raise OracleError(f"{name} holds {bad[0]}, outside the vocabulary [0, {vocab})")


def is_id(t) -> bool:
    return not isinstance(t, bool) and isinstance(t, (int, np.integer)) and t >= 0


def is_num(v) -> bool:
    return isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
