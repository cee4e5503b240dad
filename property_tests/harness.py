"""Running scenarios on the backend under test and on the reference, and comparing them.

The backend under test is `ORACLE_BACKEND` (a name of `oracle.runtime.backends.NAMED`, or
package.module:factory) loaded through `oracle.runtime.backends.load_backend()`; meta-tests swap it
with `use_backend(...)`. The reference is always `oracle.reference_backend.ReferenceBackend()`.

Every verdict here is the one verdict, `oracle.judge.plans.verdict.judge(plan, executor)`:
* `check_equivalence`: a backend plan (backend block and loop against the reference, and block vs
  loop), by the backend's tolerance row: exact backends bit for bit; reduced-precision ones by the
  noise twin's per-value bounds; plus the drift probe's drift and precision verdicts on the drawn
  scenario's model for a bfloat16 or float16 backend, on one model in PROBE_ONE_IN (`probe_for`).
  A backend that draws each request's seeded host stream (`host_rng = True`) is judged against the
  reference drawing its own, so the draw order is checked too; a device-RNG backend against the
  reference in replay mode (each request added with `replay=[the backend's recorded uniforms]`).
* `assert_runs_match`: a traces plan (two runs' traces), the twin's bounds where a model is given.

Optional hooks the suite uses when present, read through oracle/runtime/contract.py (a backend's
`Capabilities`: `bk.caps` for a loaded one, `caps(bk)` here for any; a session's
`session_capabilities`), never probed here:
* `session.kv_frontiers(rid)`: KV rollback checks (skipped otherwise); `session.kv.read(rid,
  depth, layer, pos)` (the reference's KVCache) for the reference's own checks;
* `session.submit(counts) -> handle` and `session.collect(handle) -> RoundTrace`: deferred
  collection in the stateful test (else `step`); `backend.max_in_flight` rounds at most;
* `backend.sampling`: a namespace with `filtered_probs, categorical, accepts, residual` (the
  backend's host sampling functions) for the enumeration tests (else oracle.sampling);
* `backend.host_rng = True`: the backend draws from the seeded host generator, so its RNG
  values are checked against PCG64(seed) (exact backends are checked always).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import zlib


from oracle import sampling as oracle_sampling
from oracle.judge.scenario import Case
from oracle.runtime.backends import load_backend
from oracle.cli.environment import choose_threads
from oracle.runtime.contract import (
    Capabilities,
    LoadedBackend,
    capabilities,
    session_capabilities,
    tolerance_row,
    unwrap,
)
from oracle.reference_backend import ReferenceBackend
from oracle.judge import runner
from oracle.judge.runner import ScenarioRun
from oracle.judge.plans.plan import INLINE, REDUCED, backend_plan, probe_plan, rules_plan, traces_plan
from oracle.judge.plans.verdict import judge
from oracle.traces import RoundTrace

from .strategies import seeded_model, profile_name

REFERENCE = ReferenceBackend()
CI_EXAMPLES = 20  # max_examples of the ci profile (property_tests/conftest.py)


def examples(n: int) -> int:
    """A test's example budget: n under ci, scaled like the profile's max_examples (10x nightly)."""
    from hypothesis import settings

    return max(1, round(n * settings.default.max_examples / CI_EXAMPLES))


_override: list = []  # [(backend, spec)] pushed by use_backend
_loaded: dict = {}


def backend_spec() -> str:
    if _override:
        return _override[-1][1]
    return os.environ.get("ORACLE_BACKEND", "reference")


def backend() -> LoadedBackend:
    """The backend under test."""
    if _override:
        return _override[-1][0]
    spec = backend_spec()
    if spec not in _loaded:
        _loaded[spec] = load_backend(spec)
    return _loaded[spec]


@contextlib.contextmanager
def use_backend(bk, spec: str):
    """Run properties against `bk` (meta-tests); `spec` is what ORACLE_BACKEND would say."""
    _override.append((bk, spec))
    try:
        yield bk
    finally:
        _override.pop()


def is_reference(bk: LoadedBackend) -> bool:
    return type(unwrap(bk)) is ReferenceBackend


def caps(bk: LoadedBackend) -> Capabilities:
    """What the backend offers beyond the contract's required part (a loaded backend's `.caps`;
    read now for one a meta-test made directly)."""
    return capabilities(bk)


def dtype_of(bk: LoadedBackend) -> str:
    """The compare_runs mode for a backend: "exact" or its dtype's tolerance row."""
    return tolerance_row(bk)


def sampling_impl(bk: LoadedBackend | None = None):
    """The sampling functions the enumeration tests exercise (the backend's own sampler if any)."""
    return caps(bk or backend()).sampling or oracle_sampling


def host_rng(bk: LoadedBackend) -> bool:
    """Whether the backend's uniforms are each request's seeded host stream (exact or host_rng)."""
    return caps(bk).host_rng


def supported(sc: Case, bk: LoadedBackend) -> Case:
    """The scenario with a policy the backend declares (its first one otherwise)."""
    return sc if sc.policy in bk.policies else sc.with_policy(bk.policies[0])


def backend_for(sc: Case):
    """(the backend under test, the scenario with a policy it declares)."""
    bk = backend()
    return bk, supported(sc, bk)


def reproduce_line(nodeid: str = "") -> str:
    """The one-line command that reruns a property under the current backend/profile/caps."""
    env = {"HYPOTHESIS_PROFILE": profile_name(), "ORACLE_BACKEND": backend_spec()}
    for k in sorted(os.environ):
        if k.startswith("ORACLE_MAX_"):
            env[k] = os.environ[k]
    target = nodeid or "property_tests"
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + f" python -m pytest -q {shlex.quote(target)}"


# ---- running a scenario -------------------------------------------------------------------


def run(bk: LoadedBackend, sc: Case, mode: str, replay: dict | None = None, after_step=None) -> ScenarioRun:
    """Every op of `sc` on a fresh session of `bk` (oracle.judge.runner.run_scenario, the one runner)."""
    return runner.run_scenario(bk, seeded_model(sc.cfg, sc.weight_seed), sc, mode, replay, after_step)


def reference_run(sc: Case, mode: str, replay_from: ScenarioRun | None = None) -> ScenarioRun:
    """A reference run; with replay_from, in replay mode consuming that run's uniforms."""
    return runner.judge_run(seeded_model(sc.cfg, sc.weight_seed), sc, mode, replay_from)


def assert_runs_match(
    ref: ScenarioRun, other: ScenarioRun, dtype: str, nodeid: str = "", model=None, both_noisy: bool = False
):
    """The one verdict on two runs' round traces (a traces plan); exact backends also compare
    committed tokens. model: the reference model, for the noise twin's bounds of a reduced-precision
    dtype (oracle/judge/probe/noise.py); both_noisy: ref is a reduced-precision backend's run too."""
    what = f"{other.label()} vs {ref.label()}"
    plan = traces_plan(
        ref.traces, other.traces, dtype, model, both_noisy=both_noisy, names=(ref.label(), other.label())
    )
    v = judge(plan, INLINE)
    if not v.ok:
        raise AssertionError(f"{what}: {v.first_failure()}")
    for a, b in zip(ref.traces, other.traces):  # the commit cut, where the decisions agree
        for rid in a.requests:
            if a.emitted.get(rid) == b.emitted.get(rid) and (a.kept(rid), a.finished.get(rid)) != (
                b.kept(rid),
                b.finished.get(rid),
            ):
                raise AssertionError(
                    f"{what}: round {a.round} request {rid} emitted {a.emitted[rid]}: committed "
                    f"{a.kept(rid)} ({a.finished.get(rid)}) vs {b.kept(rid)} ({b.finished.get(rid)})"
                )
    if dtype == "exact" and ref.tokens != other.tokens:
        rid = next(r for r in ref.tokens if ref.tokens[r] != other.tokens.get(r))
        raise AssertionError(f"{what}: committed tokens of request {rid}: {ref.tokens[rid]} vs {other.tokens.get(rid)}")
    return v


# The drift probe on drawn scenarios. Its two verdicts depend on the model and the backend alone,
# not on the drawn requests, so a model is probed once (the verdict kept per backend and model) and
# one drawn model in PROBE_ONE_IN is probed at all, chosen by a hash of its config and weight seed
# (never by the process's history: a failure reproduces with the same seed). A probe on a tiny
# random model costs 2.5-3 s of CPU (measured 2026-12-03, torch-cpu-bf16, 4 models); one in 16 keeps
# the ci profile's bfloat16 line near 10 probes (test_block_and_loop_rounds_agree draws 150
# scenarios, about 9 of them probed), each on a fresh model of the kind the false-alarm runs
# calibrate the verdicts on (docs/results.md). That is enough because a precision or drift fault is
# a property of the backend, present on every model: the probe needs one model to see it, not many
# (meta_tests/test_probe_drawn.py: the MLP activation through FP8, which the per-value bounds miss).
# 0: never (the meta-test's control).
PROBE_ONE_IN = 16
_probed: dict = {}


def probe_for(sc: Case, bk: LoadedBackend) -> bool:
    """Whether check_equivalence probes sc's model with bk: a bfloat16 or float16 backend, and the
    model's hash picks it."""
    if bk.exact or bk.dtype not in REDUCED or not bk.policies or not PROBE_ONE_IN:
        return False
    key = zlib.crc32(repr((sc.cfg, sc.weight_seed)).encode())
    return key % PROBE_ONE_IN == 0


def probe_verdict(bk: LoadedBackend, sc: Case):
    """The probe's verdict (a probe plan) on sc's model, once per backend and model."""
    key = (backend_spec(), repr(sc.cfg), sc.weight_seed, id(unwrap(bk)))
    if key not in _probed:
        with threads_for(seeded_model(sc.cfg, sc.weight_seed)):
            _probed[key] = judge(probe_plan(bk, seeded_model(sc.cfg, sc.weight_seed)), INLINE)
    return _probed[key]


def check_equivalence(sc: Case, bk: LoadedBackend | None = None, reports: list | None = None, probe=None) -> dict:
    """The one verdict (oracle.judge.plans.verdict.judge) of the backend on sc: backend block vs reference
    block, backend loop vs reference loop, backend block vs backend loop; and where probe_for picks
    the model (probe=None) or probe=True, the drift probe's verdicts on it. Returns the backend's runs
    by mode; reports (if given) receives the three judge reports in that order. A failed verdict
    raises AssertionError with its first failure."""
    bk = bk or backend()
    sc = supported(sc, bk)
    v = judge(backend_plan(bk, seeded_model(sc.cfg, sc.weight_seed), [sc], probe="off", catch=False), INLINE)
    if reports is not None:
        reports += [rep for _, rep in v.reports]
    if not v.ok:
        bad = v.failed
        what = next((w for tag, w in WHAT.items() if bad[0]["name"].startswith(f"{sc.name} [{tag}]")), "")
        raise AssertionError(f"{bk.name} ({dtype_of(bk)}) {what}: {v.first_failure()}")
    if probe_for(sc, bk) if probe is None else probe:
        p = probe_verdict(bk, sc)
        if not p.ok:
            raise AssertionError(f"{bk.name} ({dtype_of(bk)}) on the drawn model: {p.first_failure()}")
    return v.runs[sc.name]


# what each of the verdict's comparisons compares (oracle.judge.plans.cases.judge_backend: a host-stream
# backend's both modes against the reference's block run, which its loop run equals bit for bit)
WHAT = {"block vs loop": "block vs its loop", "block": "block vs reference block", "loop": "loop vs reference"}


# ---- per-request views --------------------------------------------------------------------


def only(tr: RoundTrace, rid) -> RoundTrace | None:
    """The trace of one request of a round (None if it was not in the round)."""
    return tr.restrict([rid], batch=False) if rid in tr.requests else None


def kv_frontiers(session, rid):
    """The set of KV frontiers of rid over all (depth, layer) planes, or None if the
    session does not expose them (its optional `kv_frontiers`)."""
    fn = session_capabilities(session).kv_frontiers
    return None if fn is None else set(fn(rid))


# ---- RNG policy ---------------------------------------------------------------------------


def rng_use_violation(bk, run: ScenarioRun, params: dict, policy: str) -> str | None:
    """The first way run's RNG use breaks the contract, by the one verdict (a rules plan:
    oracle/judge/plans/kinds/rules.py): a round's form, stop cut or events outside its policy's layout,
    or (host-stream backends) a sampled request's events off its seeded stream; None: none."""
    streams = {}
    if host_rng(bk):
        streams = {rid: (params[rid].seed, run.events(rid)) for rid in run.tokens if not params[rid].greedy}
    v = judge(rules_plan(run.traces, params=params, policy=policy, streams=streams, name=bk.name), INLINE)
    return None if v.ok else v.first_failure()


def accepted_events(tr: RoundTrace, params: dict) -> list[str]:
    """Hypothesis event() labels for a round's acceptance outcomes."""
    out = []
    for rid, T in zip(tr.requests, tr.token_counts):
        K, a = T - 1, tr.accepted.get(rid)
        if K == 0:
            continue
        kind = "greedy" if params[rid].greedy else "sampled"
        out.append(f"{kind}: full acceptance" if a == K else f"{kind}: rejection at offset {a}")
    return out


@contextlib.contextmanager
def threads_for(model):
    """torch's intra-op and NumPy's BLAS threads as `check --backend` takes them for this model
    (oracle.cli.environment.choose_threads: OMP_NUM_THREADS, else 1 below hidden 512; two threads per
    core on a busy machine made the probe 10-25x slower), restored afterwards."""
    from threadpoolctl import threadpool_limits

    n, _ = choose_threads(None, hidden=model.cfg.hidden_size)
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    try:
        with threadpool_limits(n, user_api="blas"):
            if torch is not None:
                torch.set_num_threads(n)
            yield
    finally:
        if torch is not None:
            torch.set_num_threads(before)
