"""What a verdict compares (`Plan`) and where its work runs (`Executor`). `verdict.judge(plan,
executor)` is the one entry: `check` with and without --backend, `trace diff`, the property
harness, gpu_tests, scripts/gpu_parity_full.py, the probe tests and the calibration scripts all
build a Plan and call it.

A plan is data: its two sides, its tolerance and its extra checks, one small type per kind (on a
thin base, `Plan`, which holds the model); the work of each kind is a module of oracle/judge/plans/kinds/.
Kinds:

    reference  the reference's block run against its loop run, bit for bit, with each run's
               schedule, KV frontiers and the cache-free recompute (`check` without --backend)
    backend    the backend's block and loop runs of each case against the judge's side (the NumPy
               reference, or `judge`), and its block run against its loop run (`check --backend`,
               the property harness)
    pairs      the backend's run of each (case, mode) against the judge backend's run of it
               (scripts/gpu_parity_full.py: the JAX judge at the real shape)
    traces     recorded round traces: B against A (`trace diff`, gpu_tests' graph-vs-eager pairs);
               with values, every compared value's error and bound kept (the calibration scripts)
    probe      the drift probe alone: its drift and precision verdicts, or those it names (the probe
               tests and the calibration scripts, which may pass the probe's runs they made, the
               forwards their fits share, and the drift's floor and rho)
    invariance the exactness tier's claims alone (block = loop, spec = plain, alone = batched,
               bitwise), on any backend, declared invariant or not (`python -m oracle localize`)
    rules      one run's round traces against the rules alone (oracle/judge/plans/kinds/rules.py): well
               formed (malformed.malformed_rounds; `trace record`), and where given the stop cut and
               RNG layout of each request's params and policy, and each request's seeded stream
               (decisions.policy_problem, stream_problem; the property suite's RNG and stop rules)

The three kinds with a backend under test (`Probed`) run the drift probe where `probe` says: "auto" runs it
wherever a bfloat16 or float16 backend is judged, "off" never, "on" always (where a precision
applies). A traces plan's tolerance: "auto" is the noise twin where the plan has the model and the
row is a reduced precision (bfloat16, float16), else the row's fixed tolerances; "fixed" asks for
the fixed row. (A backend plan's cases are judged by the twin wherever the judge's side is the
NumPy reference and the row is a reduced precision.)

An executor says where the work runs, and never sees a Verdict: "background" (the reference's sides
and the fits in a forked child where the platform forks, else a helper thread: oracle/judge/plans/worker.py),
or "inline" (every job in this thread: the property suite's many small examples). `threads` and
`budget_bytes` are the pairs' judge runs in threads beside the backend's; `early` is begin()'s
handle; `on_phase(phase, detail)` hears the phases as they start (progress lines).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import ClassVar

from . import worker as _worker

PROBE = ("auto", "on", "off")
TOLERANCE = ("auto", "fixed")
REDUCED = ("bfloat16", "float16")  # the dtypes the drift probe and the noise twin judge
VERDICTS = ("drift", "precision")  # the drift probe's two verdicts


@dataclass(slots=True)
class Plan:
    """What every kind holds: the model (a traces plan may have none)."""

    model: object = None
    kind: ClassVar[str] = ""

    def __post_init__(self):
        assert self.model is not None or self.kind in ("traces", "rules"), (
            f"a {self.kind or 'bare'} plan needs the model"
        )


@dataclass(slots=True)
class ReferencePlan(Plan):
    cases: list = field(default_factory=list)
    kind: ClassVar[str] = "reference"


@dataclass(slots=True)
class TracesPlan(Plan):
    traces: tuple = ()  # (A's round traces, B's)
    row: str = ""  # the tolerance row B is judged by
    names: tuple = ("A", "B")  # the two sides' names
    sides: tuple = ("backend", "reference")  # B's and A's names in a failure (trace diff: "B", "A")
    both_noisy: bool = False  # A is a reduced-precision run too (the twin's scale x sqrt(2))
    tolerance: str = "auto"
    reproduce: str = ""
    values: bool = False  # keep every compared KV write's and logits vector's error and bound (Report.values)
    kind: ClassVar[str] = "traces"

    def __post_init__(self):
        assert self.tolerance in TOLERANCE, f"tolerance {self.tolerance!r}, expected one of {TOLERANCE}"
        assert isinstance(self.values, bool), f"values {self.values!r}, expected True or False"


@dataclass(slots=True)
class RulesPlan(Plan):
    traces: tuple = ()  # (the run's round traces,)
    names: tuple = ("run", "run")
    rules: dict = field(default_factory=dict)  # params, policy, streams, schedule, cache_free, events
    kind: ClassVar[str] = "rules"


@dataclass(slots=True)
class Probed(Plan):
    """A backend under test, and the drift probe's settings (the backend, pairs and probe kinds)."""

    backend: object = None
    judge: object = None  # the judge's side as a backend; None: the NumPy FP32 reference
    probe: str = "auto"
    probe_requests: int = 0  # the probe's requests (0: calibration.PROBE_REQUESTS); fewer: a shrunk probe
    probe_reproduce: str = ""
    timeout: float | None = None  # each backend call's limit (GuardedBackend); None: as given

    def __post_init__(self):
        Plan.__post_init__(self)
        assert self.backend is not None, f"a {self.kind} plan needs a backend"
        assert self.probe in PROBE, f"probe {self.probe!r}, expected one of {PROBE}"
        assert self.probe_requests == 0 or self.probe_requests >= 2, f"probe_requests {self.probe_requests}: 0 or >= 2"

    def probes(self) -> bool:
        """Whether the drift probe runs: a reduced-precision backend, and the plan asks for it."""
        if self.probe == "off":
            return False
        bk = self.backend
        return self.kind == "probe" or (not bk.exact and bk.dtype in REDUCED and bool(bk.policies))


@dataclass(slots=True)
class BackendPlan(Probed):
    cases: list = field(default_factory=list)
    suffix: str = ""  # appended to each case's reproduce line
    catch: bool = True  # False: a backend exception propagates (the property harness)
    kind: ClassVar[str] = "backend"


@dataclass(slots=True)
class PairsPlan(Probed):
    pairs: list = field(default_factory=list)  # [(case, mode)]
    reproduce: str = ""
    options: object = None  # case -> session options of both sides
    kind: ClassVar[str] = "pairs"


@dataclass(slots=True)
class ProbePlan(Probed):
    runs: dict | None = None  # the probe's runs by mode, made by the caller
    probe: str = "on"
    verdicts: tuple = VERDICTS  # the verdicts fitted: ("precision",) the precision verdict alone
    allowance: tuple = ()  # the drift's (floor, rho) (drift.verdict); (): those of the model's hidden size
    forwards: object = None  # forwards.Forwards of the model, shared with the caller's other fits; None: made here
    kind: ClassVar[str] = "probe"

    def __post_init__(self):
        Probed.__post_init__(self)
        assert self.verdicts and set(self.verdicts) <= set(VERDICTS), f"verdicts {self.verdicts!r}, from {VERDICTS}"
        assert self.allowance == () or (len(self.allowance) == 2 and "drift" in self.verdicts), (
            f"allowance {self.allowance!r}, expected () or (floor, rho) with the drift verdict"
        )
        assert self.forwards is None or self.forwards.model is self.model, "forwards of another model than the plan's"


@dataclass(slots=True)
class InvariancePlan(Probed):
    cases: list = field(default_factory=list)
    suffix: str = ""  # appended to each case's reproduce line
    catch: bool = True  # False: a backend exception propagates
    probe: str = "off"
    kind: ClassVar[str] = "invariance"


def reference_plan(model, cases) -> ReferencePlan:
    return ReferencePlan(model, list(cases))


def backend_plan(backend, model, cases, **kw) -> BackendPlan:
    return BackendPlan(model, backend, cases=list(cases), **kw)


def pairs_plan(backend, judge, model, pairs, **kw) -> PairsPlan:
    return PairsPlan(model, backend, judge, pairs=list(pairs), **kw)


def traces_plan(a, b, row: str, model=None, **kw) -> TracesPlan:
    return TracesPlan(model, (list(a), list(b)), row, **kw)


def invariance_plan(backend, model, cases, **kw) -> InvariancePlan:
    return InvariancePlan(model, backend, cases=list(cases), **kw)


def probe_plan(backend, model, runs: dict | None = None, **kw) -> ProbePlan:
    return ProbePlan(model, backend, runs=runs, **kw)


def rules_plan(
    traces, model=None, params=None, policy=None, streams=None, schedule=None, cache_free=None, events=None, name="run"
) -> RulesPlan:
    """traces: one run's round traces (model: their model, for the vocabulary and K/V shape;
    else the logits' length); params {rid: SamplingParams} with policy: the stop cut and RNG layout;
    streams {rid: (seed, events since it joined)}: the seeded host streams; schedule: the run's
    mode, its calls against the schedule; cache_free: a logits tolerance (with the model); events:
    the RNG events the run must have drawn, in order (oracle/judge/plans/kinds/rules.py)."""
    assert cache_free is None or model is not None, "the cache-free recompute needs the model"
    rules = {
        "params": params,
        "policy": policy,
        "streams": dict(streams or {}),
        "schedule": schedule,
        "cache_free": cache_free,
        "events": events,
    }
    return RulesPlan(model, (list(traces),), (name, name), rules)


@dataclass(slots=True)
class Executor:
    where: str = "background"  # "background" | "inline"
    threads: int = 0  # pairs: the judge's runs this many at a time beside the backend's (0: after each)
    budget_bytes: int | None = None  # pairs: device memory for the judge runs' KV in flight
    kv_bytes: object = None  # pairs: case -> bytes of a judge run's KV
    early: object = None  # begin()'s handle: the reference's sides begun before the backend loaded
    on_phase: object = None  # on_phase(phase, detail): progress
    on_case: object = None  # pairs: on_case(case, mode, report, backend s, judge s)

    def __post_init__(self):
        assert self.where in ("background", "inline"), f"executor where={self.where!r}"
        assert self.threads >= 0, f"executor threads={self.threads}"

    def scope(self):
        """The context the plan runs in: worker.inline() makes every background job run at once."""
        return _worker.inline() if self.where == "inline" else contextlib.nullcontext()

    def phase(self, name: str, detail: str = "") -> None:
        if self.on_phase is not None:
            self.on_phase(name, detail)


INLINE = Executor("inline")
