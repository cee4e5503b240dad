"""The backend contract in code (oracle/runtime/contract.py): every in-repo backend and every
meta_tests factory keeps it, an object that breaks it is told where, and a backend's optional
hooks are read once, into its Capabilities."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from oracle.runtime.backends import NAMED, load_backend, suite_runs
from oracle.runtime.contract import (
    OPTIONAL_BACKEND,
    OPTIONAL_SESSION,
    REQUIRED,
    Backend,
    Capabilities,
    LoadedBackend,
    Session,
    as_loaded,
    capabilities,
    contract_problems,
    session_capabilities,
    session_problems,
    unwrap,
)
from oracle.checkpoint import build_model

import meta_tests.faulty as faulty
import meta_tests.plugins as plugins


def factories(module) -> list[str]:
    return [
        f"{module.__name__}:{n}"
        for n, f in vars(module).items()
        if n.startswith("make_") and inspect.isfunction(f) and f.__module__ == module.__name__
    ]


# every named backend a CPU machine runs (oracle.runtime.backends: the suite's runs and the reference),
# with the framework its package needs
FRAMEWORK = {"kernels": "torch", "judge_jax": "jax"}
NEEDS = {n: FRAMEWORK[t.split(".")[0]] for n, t in NAMED.items() if t.split(".")[0] in FRAMEWORK}
SPECS = [
    "reference",
    *(name for name, _ in suite_runs()),
    "examples.plugin_backend:make_backend",
    *factories(faulty),
    *factories(plugins),
]


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", seed=0)


@pytest.mark.parametrize("spec", SPECS)
def test_every_in_repo_backend_keeps_the_contract(spec, tiny):
    if spec in NEEDS:
        pytest.importorskip(NEEDS[spec])
    bk = load_backend(spec)
    assert isinstance(bk, LoadedBackend) and isinstance(bk, Backend)
    assert contract_problems(bk) == [] and contract_problems(unwrap(bk)) == []
    assert bk.caps == Capabilities.read(unwrap(bk)) and capabilities(bk) is bk.caps
    for policy in bk.policies:
        s = bk.session(tiny, 1, 2, "block", policy)
        assert isinstance(s, Session)
        assert session_problems(s) == [], spec


def test_the_meta_factories_are_all_listed():
    for module in (faulty, plugins):
        text = Path(module.__file__).read_text()
        assert len(factories(module)) == text.count("\ndef make_") > 0


def test_the_contract_names_what_load_backend_requires():
    assert set(REQUIRED) == {"name", "dtype", "exact", "policies", "session"}
    assert set(REQUIRED) <= set(Backend.__annotations__) | {"session"}


def test_a_broken_backend_is_told_where():
    class NoDepths:
        def add(self, rid, prompt, params, replay=None):
            pass

        def step(self, counts):
            pass

        def remove(self, rid):
            return []

        def submit(self, counts):
            pass

    class Broken:
        name, dtype, exact, policies = "broken", "int8", False, ("sequential", "shuffled")
        host_rng = "yes"

        def session(self, model):
            return NoDepths()

    problems = contract_problems(Broken(), Broken().session(None))
    text = "\n".join(problems)
    for part in (
        "dtype 'int8' has no tolerance row",
        "policies",
        "session(model, d, D, mode, policy)",
        "optional host_rng",
        "session.add",
        "session lacks tokens()",
        "submit/collect",
    ):
        assert part in text, (part, problems)
    assert contract_problems(object()) == [f"backend lacks {a}" for a in REQUIRED]


def test_the_capabilities_name_every_optional_hook():
    """One field per optional backend hook; the session's hooks in SessionCapabilities."""
    import dataclasses

    assert set(OPTIONAL_BACKEND) == {f.name for f in dataclasses.fields(Capabilities)}
    assert set(OPTIONAL_SESSION) == {"submit", "collect", "kv_frontiers", "capture"}


def test_capabilities_of_a_backend_made_directly():
    class Bare:  # the required part only
        name, dtype, exact, policies = "bare", "bfloat16", False, ("sequential",)

        def session(self, model, d, D, mode, policy="sequential"):
            pass

    class Hooks(Bare):
        host_rng, fork_safe, max_in_flight = True, True, 5

        def drift_stats_fn(self, model, dtype, basis=None):
            pass

    bare, hooks = capabilities(Bare()), capabilities(Hooks())
    assert bare == Capabilities() and not bare.host_rng and bare.max_in_flight == 2
    assert hooks.host_rng and hooks.fork_safe and hooks.max_in_flight == 5 and callable(hooks.drift_stats_fn)
    exact = Bare()
    exact.exact = True  # an exact backend draws the host stream
    assert capabilities(exact).host_rng
    raw = Hooks()
    loaded = as_loaded(raw)
    assert isinstance(loaded, LoadedBackend) and as_loaded(loaded) is loaded and loaded.caps == capabilities(raw)
    assert loaded.name == "bare" and unwrap(loaded).__class__ is Hooks


def test_a_guarded_backend_keeps_the_caps():
    from oracle.runtime.backends import GuardedBackend

    bk = load_backend("examples.plugin_backend:make_backend")
    guarded = GuardedBackend(bk, 5.0)
    assert guarded.caps is bk.caps and capabilities(guarded) is bk.caps and guarded.name == bk.name


def test_session_capabilities(tiny):
    ref = load_backend("reference").session(tiny, 1, 2, "block")
    caps = session_capabilities(ref)
    assert not caps.submit_collect and caps.kv_frontiers is not None
    ref.add(0, [1, 2, 3], __import__("oracle.sampling_params", fromlist=["SamplingParams"]).SamplingParams())
    assert caps.kv_frontiers(0) == {2}
    plug = load_backend("examples.plugin_backend:make_backend").session(tiny, 1, 2, "block")
    assert session_capabilities(plug).kv_frontiers is None
