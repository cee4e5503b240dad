"""A failing check, shrunk (issue 44): the smallest case that still fails in the same way.

Bookkeeping over `Case` objects and calls to the one verdict, nothing else: every candidate is judged
by `verdict.judge(plan, executor)`, a case by

    verdict.judge(backend_plan(backend, model, [candidate], probe="off", ...), INLINE)

and the drift probe by a probe plan of fewer probe requests (`probe_plan(..., probe_requests=n)`:
the verdict's own probe, n requests). It never compares anything itself.

The same way: the failure class is the failed check's name after its last ": " (kv_writes,
draft_logits, verify_logits, decisions, rng_events, tokens, malformed, backend, schedule, stats, ...);
a candidate holds when one of its failed checks has that class. For the drift probe's "drift" the
candidate's failure must name the same parameter (one of the names of the direction it names), for
"precision" the same value group (the first past the threshold in compute order), for "backend" the
same exception class.

The search (`shrink`), greedy, each move kept while the failure holds, in this order:
    requests      one request alone (the one the failure names first), then halves, quarters, ...
    rounds        one round alone (the failing round first), then shorter prefixes, then one round less
    token counts  every T_i = 1, halved, then each (round, request) to 1, T/2, T - 1
    prompts       each request's prompt to 1 token, half, one token less
    depths        uniform (d, D) instead of per-request depths, then lower D and d
    sampling      each processor, mask, stop and filter field of each request off, one at a time;
                  then temperature 0 (its filters with it); then the sequential policy; greedy
                  requests' seeds 0
and again while a sweep changed something (at most MAX_SWEEPS). The probe: the fewest probe requests
whose verdict still fails, by halving the interval (n/2 first; a candidate whose expected time would
end past the budget is not begun). A budget in seconds bounds the search: where it runs
out the smallest failing case found so far is the answer, marked partial. `prepare(case)` (the CLI's
--case-json round trip) gives the case exactly as its reproduce line will make it, or None where that
line would be refused: a candidate is judged only in the form its one line reproduces.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field

from ..plans import verdict
from ..plans.plan import INLINE, backend_plan, probe_plan
from ..probe.precision import compute_order, group_label
from ..scenario import Case
from ...sampling_params import CHAIN, SamplingParams
from ..probe.calibration import PROBE_REQUESTS

PROBE = "drift probe"
MAX_SWEEPS = 3
# SamplingParams fields the sampling pass turns off one at a time (the mask, the processors, the stop
# cut, the filters): each step's fields but temperature, which the greedy move sets 0 with the
# filters' fields off (FILTERS: a greedy request with a filter is refused)
FILTERS = tuple(f for step in CHAIN.named("filter") for f in step.off if f != "temperature")
OFF = {
    **{f: v for step in CHAIN.steps for f, v in step.off.items() if f != "temperature"},
    "stop_token_ids": (),
    "max_tokens": None,
}


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


def _hint(check: dict | None) -> tuple:
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
        return Target(first["name"], cls, first["detail"], None, key, _hint(first), first.get("failure"))
    for case in cases:
        if first["name"].startswith(case.name + " [") or first["name"].startswith(case.name + ": "):
            return Target(first["name"], cls, first["detail"], case, key, _hint(first), first.get("failure"))
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


# ---- the case's shape: what a move changes ----


def plain(case: Case, model) -> Case:
    """The case as plain data: its params as run on `model` (a built-in case's derived ones)."""
    return Case(
        case.name,
        [list(map(int, p)) for p in case.prompts],
        list(case.params_for(model)),
        [dict(r) for r in case.rounds],
        case.d,
        case.D,
        case.policy,
        case.reproduce,
        None if case.depths is None else [tuple(x) for x in case.depths],
    )


def normal(prompts, params, rounds, d, D, policy, depths, name="shrunk") -> Case:
    """A case with empty rounds dropped and the requests no round names dropped, the rest numbered
    0.. in order (each round's order kept); d and D the smallest d_i and largest D_i of per-request
    depths."""
    used = sorted({rid for r in rounds for rid in r})
    new = {rid: i for i, rid in enumerate(used)}
    rounds = [{new[rid]: int(t) for rid, t in r.items()} for r in rounds if r]
    depths = None if depths is None else [tuple(depths[r]) for r in used]
    if depths is not None:
        d, D = min(a for a, _ in depths), max(b for _, b in depths)
    return Case(name, [list(prompts[r]) for r in used], [params[r] for r in used], rounds, d, D, policy, "", depths)


def _with(case: Case, **kw) -> Case:
    parts = dict(
        prompts=case.prompts,
        params=case.params,
        rounds=case.rounds,
        d=case.d,
        D=case.D,
        policy=case.policy,
        depths=case.depths,
    )
    parts.update(kw)
    return normal(**parts)


def size(case: Case) -> tuple:
    """What the search makes smaller, in its order: requests, rounds, tokens, prompt tokens, depth."""
    loops = sum(b for _, b in case.depths) if case.depths is not None else case.D * len(case.prompts)
    return (
        len(case.prompts),
        len(case.rounds),
        sum(sum(r.values()) for r in case.rounds),
        sum(map(len, case.prompts)),
        loops,
    )


def describe(case: Case) -> str:
    """One line: requests, rounds, token counts, prompt lengths, depths, sampling, policy."""
    n = len(case.prompts)
    counts = (
        "T " + ",".join(str(t) for t in case.rounds[0].values())
        if len({tuple(r.items()) for r in case.rounds}) == 1
        else f"{sum(sum(r.values()) for r in case.rounds)} tokens in all"
    )
    depths = (
        f"d={case.d} D={case.D}" if case.depths is None else "depths " + ",".join(f"{a}:{b}" for a, b in case.depths)
    )
    lens = [len(p) for p in case.prompts]
    prompts = (
        f"a prompt of {lens[0]} token{'s' if lens[0] != 1 else ''}"
        if n == 1
        else f"prompts of {','.join(map(str, lens))} tokens"
    )
    greedy = sum(1 for p in case.params if p.greedy)
    sampling = "greedy" if greedy == n else "sampled" if greedy == 0 else f"{greedy} greedy, {n - greedy} sampled"
    extras = sorted({f for p in case.params for f, off in OFF.items() if getattr(p, f) != off})
    return (
        f"{n} request{'s' if n != 1 else ''}, {len(case.rounds)} round{'s' if len(case.rounds) != 1 else ''}, "
        f"{counts}, {prompts}, {depths}, {sampling}"
        + (f" ({', '.join(extras)})" if extras else "")
        + f", policy {case.policy}"
    )


def _named_first(items: list, first) -> list:
    return ([first] if first in items else []) + [x for x in items if x != first]


def fewer_requests(case: Case, hint=()) -> list:
    rids = list(range(len(case.prompts)))
    if len(rids) < 2:
        return []
    keep = lambda ks: _with(case, rounds=[{r: t for r, t in rnd.items() if r in ks} for rnd in case.rounds])
    out = [keep({r}) for r in _named_first(rids, hint[1] if len(hint) > 1 else None)]
    chunk = len(rids) // 2
    while chunk >= 1:
        for s in range(0, len(rids), chunk):
            drop = set(rids[s : s + chunk])
            if 0 < len(drop) < len(rids):
                out.append(keep(set(rids) - drop))
        chunk //= 2
    return out


def fewer_rounds(case: Case, hint=()) -> list:
    n = len(case.rounds)
    if n < 2:
        return []
    first = hint[0] if hint and hint[0] < n else None
    out = [_with(case, rounds=[case.rounds[i]]) for i in _named_first(list(range(n)), first)]
    out += [_with(case, rounds=case.rounds[:k]) for k in range(2, n)]
    out += [_with(case, rounds=case.rounds[:i] + case.rounds[i + 1 :]) for i in range(n)]
    return out


def smaller_counts(case: Case, hint=()) -> list:
    rounds = case.rounds
    out = [_with(case, rounds=[{r: 1 for r in rnd} for rnd in rounds])]
    out.append(_with(case, rounds=[{r: max(1, t // 2) for r, t in rnd.items()} for rnd in rounds]))
    for i, rnd in enumerate(rounds):
        for rid, t in rnd.items():
            for new in dict.fromkeys((1, t // 2, t - 1)):
                if 1 <= new < t:
                    changed = [dict(x) for x in rounds]
                    changed[i][rid] = new
                    out.append(_with(case, rounds=changed))
    return out


def shorter_prompts(case: Case, hint=()) -> list:
    out = [_with(case, prompts=[p[:1] for p in case.prompts])]
    for i, p in enumerate(case.prompts):
        for new in dict.fromkeys((1, len(p) // 2, len(p) - 1)):
            if 1 <= new < len(p):
                out.append(_with(case, prompts=[q[:new] if j == i else q for j, q in enumerate(case.prompts)]))
    return out


def lower_depths(case: Case, hint=()) -> list:
    out = []
    if case.depths is not None:
        pairs = sorted(set(case.depths), key=lambda p: (p[1], p[0]))
        out += [_with(case, depths=None, d=a, D=b) for a, b in pairs]
        out.append(_with(case, depths=None, d=case.d, D=case.D))
        for i, (a, b) in enumerate(case.depths):
            for na, nb in ((a, b - 1), (a - 1, b), (a - 1, b - 1)):
                if 1 <= na < nb:
                    out.append(_with(case, depths=[(na, nb) if j == i else x for j, x in enumerate(case.depths)]))
        return out
    for na, nb in ((1, 2), (case.d, case.D - 1), (case.d - 1, case.D), (case.d - 1, case.D - 1)):
        if 1 <= na < nb and (na, nb) != (case.d, case.D):
            out.append(_with(case, d=na, D=nb))
    return out


def _replace(p: SamplingParams, **kw) -> SamplingParams | None:
    try:
        return dataclasses.replace(p, **kw)
    except Exception:  # noqa: BLE001 -- a combination the params refuse is no candidate
        return None


def simpler_sampling(case: Case, hint=()) -> list:
    out = []

    def one(i, new):
        if new is not None:
            out.append(_with(case, params=[new if j == i else q for j, q in enumerate(case.params)]))

    for i, p in enumerate(case.params):  # each processor, mask, stop and filter off, one at a time
        for f, off in OFF.items():
            if getattr(p, f) != off:
                extra = {"min_tokens": 0} if f == "stop_token_ids" and p.min_tokens else {}
                one(i, _replace(p, **{f: off}, **extra))
    for i, p in enumerate(case.params):  # greedy where the failure needs no sampling
        if not p.greedy:
            new = _replace(p, temperature=0.0, **{f: OFF[f] for f in FILTERS})
            if new is not None and all(q.greedy for j, q in enumerate(case.params) if j != i):
                out.append(
                    _with(
                        case,
                        params=[new if j == i else q for j, q in enumerate(case.params)],
                        policy="sequential",
                    )
                )
            else:
                one(i, new)
    if case.policy != "sequential":
        out.append(_with(case, policy="sequential"))
    if any(p.greedy and p.seed for p in case.params):  # a greedy request draws nothing: its seed does nothing
        out.append(_with(case, params=[_replace(p, seed=0) if p.greedy else p for p in case.params]))
    return out


PASSES = (
    ("requests", fewer_requests),
    ("rounds", fewer_rounds),
    ("token counts", smaller_counts),
    ("prompts", shorter_prompts),
    ("depths", lower_depths),
    ("sampling", simpler_sampling),
)


# ---- the search ----


@dataclass
class Shrunk:
    """The search's answer: the smallest failing case found (or, for the drift probe, the fewest probe
    requests), its failure, the candidates judged and the seconds the search took."""

    target: Target
    original: Case | None = None  # the original case as plain data (its params as run)
    case: Case | None = None  # the smallest failing case (None: the drift probe, or nothing smaller held)
    requests: int | None = None  # the drift probe: the fewest probe requests whose verdict still fails
    original_requests: int | None = None
    failure: dict | None = None  # the shrunk case's failed check ({"name", "ok", "detail"}) of the target's class
    candidates: int = 0  # candidate runs judged
    refused: int = 0  # candidates the reproduce line would refuse (never judged)
    seconds: float = 0.0
    partial: bool = False  # the budget ran out first
    moves: list = field(default_factory=list)  # the passes whose moves were kept, in order

    @property
    def smaller(self) -> bool:
        return self.failure is not None

    @property
    def description(self) -> str:
        """The shrunk case in one line (describe), or the probe's requests; '' where none failed."""
        if self.requests is not None:
            return f"the drift probe, {self.requests} requests"
        return describe(self.case) if self.case is not None else ""

    @property
    def original_description(self) -> str:
        if self.original_requests is not None:
            return f"the drift probe, {self.original_requests} requests"
        return describe(self.original) if self.original is not None else ""


class _OutOfBudget(Exception):
    pass


class _Search:
    def __init__(self, target, test, prepare, budget, on_candidate):
        self.target, self.test, self.prepare = target, test, prepare
        self.t0, self.budget, self.on_candidate = time.perf_counter(), budget, on_candidate
        self.seen: set = set()
        self.out = Shrunk(target)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def run(self, cand: Case) -> bool:
        """Judge one candidate; True (and kept as the best) where it fails as the target does."""
        sig = _signature(cand)
        if sig in self.seen:
            return False
        self.seen.add(sig)
        ready = self.prepare(cand)
        if ready is None:
            self.out.refused += 1
            return False
        if self.elapsed() >= self.budget:
            raise _OutOfBudget
        self.out.candidates += 1
        if self.on_candidate is not None:
            self.on_candidate(self.out.candidates, describe(ready))
        failed = self.test(ready)
        if failed is None:
            return False
        self.out.case, self.out.failure = ready, failed
        return True


def _signature(case: Case) -> str:
    return json.dumps(
        [
            case.prompts,
            [p.to_json() for p in case.params],
            [list(r.items()) for r in case.rounds],
            case.d,
            case.D,
            case.policy,
            case.depths,
        ]
    )


def shrink_case(target: Target, test, prepare=None, budget: float = 30.0, on_candidate=None, model=None) -> Shrunk:
    """The smallest case that still fails as `target` does: test(case) -> the failed check or None
    (a call of the one verdict); prepare(case) -> the case as its reproduce line makes it, or None."""
    search = _Search(target, test, prepare or (lambda c: c), budget, on_candidate)
    best = plain(target.case, model) if model is not None else target.case
    best = search.out.original = _with(best)
    search.seen.add(_signature(best))  # the original failed already
    hint = target.hint
    try:
        for _ in range(MAX_SWEEPS):
            changed = False
            for name, moves in PASSES:
                progress = True
                while progress:
                    progress = False
                    for cand in moves(best, hint):
                        if _signature(cand) == _signature(best):
                            continue
                        if search.run(cand):
                            best, hint, changed, progress = (
                                search.out.case,
                                _hint(search.out.failure),
                                True,
                                True,
                            )
                            if not search.out.moves or search.out.moves[-1] != name:
                                search.out.moves.append(name)
                            break
            if not changed:
                break
    except _OutOfBudget:
        search.out.partial = True
    search.out.seconds = search.elapsed()
    return search.out


def shrink_probe(
    target: Target, test, n: int = PROBE_REQUESTS, budget: float = 30.0, cost=None, on_candidate=None
) -> Shrunk:
    """The fewest probe requests (at least 2: a standard error over requests) whose probe verdict
    still fails as `target` does: test(k) -> the failed check or None. Halving the interval between
    the most requests known not to fail and the fewest known to fail (1 and n at first). cost(k): the
    seconds a probe of k requests is expected to take; a candidate that would end past the budget is
    not begun (the answer is then partial)."""
    t0 = time.perf_counter()
    out = Shrunk(target, requests=None, original_requests=n)

    def run(k) -> bool:
        left = budget - (time.perf_counter() - t0)
        if left <= 0 or (cost is not None and cost(k) > left):
            raise _OutOfBudget
        out.candidates += 1
        if on_candidate is not None:
            on_candidate(out.candidates, f"the drift probe with {k} requests")
        failed = test(k)
        if failed is not None:
            out.requests, out.failure = k, failed
        return failed is not None

    lo, hi = 1, n  # lo: the most requests known not to fail (1: none can), hi: the fewest known to fail
    try:
        while hi - lo > 1:  # halving: each candidate that holds is an answer at once (a budget may end it)
            mid = (lo + hi) // 2
            if run(mid):
                hi = mid
            else:
                lo = mid
    except _OutOfBudget:
        out.partial = True
    if out.requests is not None:
        out.moves.append("probe requests")
    out.seconds = time.perf_counter() - t0
    return out


def probe_verdict(backend, model, n: int, *, judge=None, timeout=None, reproduce="", fallback=True):
    """The drift probe's two verdicts over n probe requests: a probe plan of n requests, judged inline
    (`check --probe-requests N`); where the backend raises in the probe, that is its failed check.
    fallback=False: None where the probe did not run to its fits (not this failure)."""
    plan = probe_plan(backend, model, judge=judge, probe_reproduce=reproduce, probe_requests=n, timeout=timeout)
    v = verdict.judge(plan, INLINE)
    if not fallback and v.drift is None:
        return None
    return v


def shrink(
    v,
    cases,
    backend,
    model,
    *,
    judge=None,
    timeout=None,
    suffix: str = "",
    prepare=None,
    probe_reproduce=None,
    budget: float = 30.0,
    on_candidate=None,
) -> Shrunk | None:
    """The failing verdict `v` of `backend` on `cases`, shrunk; None where it names no failure to
    shrink. Each candidate case is judged alone, inline, without the probe
    (`backend_plan(..., probe="off")`); a drift or precision failure by a probe plan over
    drift.probe_runs(backend, model, k). suffix: the backend's flags, appended to reproduce lines;
    probe_reproduce(k): the line that runs the probe of k requests."""
    target = target_of(v, cases)
    if target is None:
        return None
    if target.probe:

        def test_probe(k):
            line = probe_reproduce(k) if probe_reproduce is not None else ""
            got = probe_verdict(backend, model, k, judge=judge, timeout=timeout, reproduce=line, fallback=False)
            return None if got is None else holds(got, target)

        spent = (v.drift.seconds if v.drift is not None else 0.0) + (
            v.precision.seconds if v.precision is not None else 0.0
        )
        cost = (lambda k: spent * k / PROBE_REQUESTS) if spent else None
        return shrink_probe(target, test_probe, PROBE_REQUESTS, budget, cost, on_candidate)

    def test_case(case):
        plan = backend_plan(backend, model, [case], judge=judge, probe="off", suffix=suffix, timeout=timeout)
        try:
            return holds(verdict.judge(plan, INLINE), target)
        except Exception:  # noqa: BLE001 -- a candidate the judge could not finish is not this failure
            return None

    return shrink_case(target, test_case, prepare, budget, on_candidate, model)
