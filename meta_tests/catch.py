"""Run one property of property_tests/ against a given backend, in-process, and report
whether it failed (caught the fault) and how.

A property is named "module::function", "module::function[param=value,...]" or
"module::StateMachineClass", relative to property_tests (e.g.
"test_golden::test_rng_order_matches_golden[name=fixed_mixed_d2_D4,mode=loop]").
Hypothesis properties run with their profile's example budget (times `scale`) but without the
shrink phase (a meta-test only needs to know *that* and *where* the property fails) and
derandomized, so the result is the same on every machine.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass

import pytest
from _pytest.outcomes import OutcomeException
from hypothesis import Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from property_tests import harness


@dataclass
class Outcome:
    caught: bool
    message: str
    seconds: float


def parse(prop: str):
    mod, _, rest = prop.partition("::")
    name, _, params = rest.partition("[")
    kwargs = {}
    if params:
        for item in params.rstrip("]").split(","):
            k, _, v = item.partition("=")
            kwargs[k] = int(v) if v.isdigit() else v
    return importlib.import_module(f"property_tests.{mod}"), name, kwargs


def _quick(parent, scale: float = 1.0):
    return settings(
        parent,
        max_examples=max(1, round(parent.max_examples * scale)),
        phases=[Phase.explicit, Phase.generate, Phase.target],
        derandomize=True,
        database=None,
        print_blob=False,
    )


def run_property(prop: str, scale: float = 1.0):
    module, name, kwargs = parse(prop)
    obj = getattr(module, name)
    if isinstance(obj, type) and issubclass(obj, RuleBasedStateMachine):
        run_state_machine_as_test(obj, settings=_quick(obj.TestCase.settings, scale))
        return
    if hasattr(obj, "hypothesis"):
        old = obj._hypothesis_internal_use_settings
        obj._hypothesis_internal_use_settings = _quick(old, scale)
        try:
            obj(**kwargs)
        finally:
            obj._hypothesis_internal_use_settings = old
    else:
        obj(**kwargs)


def first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    text = next((m for m in msg if m.strip()), "")
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(first_line(x) for x in e.exceptions[:2])
    return f"{type(e).__name__}: {text}"[:300]


def check(bk, spec: str, prop: str, scale: float = 1.0) -> Outcome:
    """Run `prop` with `bk` as the backend under test (`scale`: of the profile's example budget)."""
    t = time.perf_counter()
    with harness.use_backend(bk, spec):
        try:
            run_property(prop, scale)
        except OutcomeException as e:  # pytest.fail is a catch, a skip is not
            if isinstance(e, pytest.skip.Exception):
                return Outcome(False, f"skipped: {e}", time.perf_counter() - t)
            return Outcome(True, first_line(e), time.perf_counter() - t)
        except BaseException as e:  # noqa: BLE001 - any failure is a catch
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            return Outcome(True, first_line(e), time.perf_counter() - t)
    return Outcome(False, "passed", time.perf_counter() - t)
