"""The sampling chain's step options on the command line (`check`, `trace record`, `bench
rounds|sweep`): one option per option of a filter or processor step (oracle.sampling_params.CHAIN),
their argparse types, and the SamplingParams fields they give."""

from __future__ import annotations

from .argtypes import finite_float, int_at_least, probability, token_biases, token_words
from ..sampling_params import CHAIN


# the kinds of value a chain step's option takes (oracle.step.Step.options): its argparse
# type and how round_flags writes it back
ARG_TYPES = {
    "number": (finite_float, repr),
    "count": (int_at_least(0), repr),
    "biases": (token_biases, lambda v: ",".join(f"{t}:{b!r}" for t, b in v.items())),
    "words": (token_words, lambda v: "/".join(",".join(map(str, w)) for w in v)),
    "probability": (probability, repr),
    "positive": (int_at_least(1), repr),
}


def step_options(kind: str) -> tuple:
    """(dest, type, metavar, help, format) of the options of the chain steps of one kind, in
    oracle.sampling_params.CHAIN's order."""
    return tuple(
        (dest, ARG_TYPES[k][0], metavar, text, ARG_TYPES[k][1])
        for step in CHAIN.named(kind)
        for dest, k, metavar, text in step.options
    )


PROCESSOR_OPTIONS = step_options("processor")  # oracle/processors.py
FILTER_OPTIONS = step_options("filter")  # oracle/filters.py (temperature has its own option)


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def add_filter_options(p) -> None:
    """The filters' options (`check`, `trace record`, `bench rounds|sweep`); their values are
    SamplingParams fields of the same names, for sampled requests only."""
    for dest, kind, metavar, text, _ in FILTER_OPTIONS:
        p.add_argument(flag(dest), type=kind, default=None, metavar=metavar, help=text)


def filter_fields(args) -> dict:
    """The SamplingParams fields the filter options give (those given only)."""
    return {dest: getattr(args, dest) for dest, *_ in FILTER_OPTIONS if getattr(args, dest, None) is not None}


def given_filter(args) -> str | None:
    """The first filter option given, as its flag, or None."""
    return next((flag(dest) for dest in filter_fields(args)), None)


def add_processor_options(p, leave_out=()) -> None:
    """The processor options (`check`, `trace record`, `bench rounds|sweep`); their values are
    SamplingParams fields of the same names. leave_out: fields a command cannot use (bench's
    requests have no stop tokens for `min_tokens` to mask), not offered at all."""
    for dest, kind, metavar, text, _ in PROCESSOR_OPTIONS:
        if dest in leave_out:
            continue
        p.add_argument(flag(dest), type=kind, default=None, metavar=metavar, help=text)


def processor_fields(args) -> dict:
    """The SamplingParams fields the processor options give (those given only)."""
    return {dest: getattr(args, dest) for dest, *_ in PROCESSOR_OPTIONS if getattr(args, dest, None) is not None}
