"""The sampler judge: run a sampler on cases and give each request of each case a verdict.

Modes (`Settings.exact`):
  distribution (default): each case's batch runs as many times as its draws need (copies of the
      batch in one sample() call, up to the sampler's max_batch requests, each copy with its
      own seeds); a sampled request's outcomes (a, final token) are tallied and tested against
      rules.outcome_distribution by chi-square (stats.py) at alpha / m (Bonferroni over the m
      sampled requests of the run: family-wise false-alarm rate alpha), with N drawn for power
      `power` against TV delta. A greedy request must emit the argmax tokens in every copy; an
      emitted "accepted" token that is not the draft, or an outcome of probability zero, fails.
  exact: EXACT_COPIES copies of each case, each sampled request with its own uniforms; every
      request's tokens must equal rules' decisions on those uniforms, value by value.
A failure is shrunk (shrink.py) within its own budget.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from .contract import SamplerRequest, check_output
from .rules import RULES
from . import stats

EXACT_COPIES = 64
MAX_CALL = 8192  # requests per sample() call when the sampler names no max_batch


@dataclass(slots=True)
class Settings:
    exact: bool = False
    alpha: float = 1e-3  # family-wise
    delta: float = 0.05  # TV distance detected with `power`
    power: float = 0.99
    max_draws: int = 200_000  # per case, at most
    family: int = 1  # m: the sampled requests judged by distribution in the run


@dataclass(slots=True)
class Test:
    """The verdict on one request of one case."""

    request: int
    kind: str
    mode: str  # "greedy" | "exact" | "distribution"
    ok: bool = True
    message: str = ""
    draws: int = 0
    fit: stats.Fit | None = None
    detects_tv: float | None = None
    expected: np.ndarray | None = None  # [K + 1, V] probabilities
    observed: np.ndarray | None = None  # [K + 1, V] counts
    worst: dict | None = None  # the outcome where the frequencies part most


@dataclass(slots=True)
class CaseResult:
    case: object  # cases.SamplerCase
    tests: list = field(default_factory=list)
    draws: int = 0
    seconds: float = 0.0
    skipped: str = ""  # the sampler's reason for refusing the case
    refused: list = field(default_factory=list)  # "request i: reason": requests the sampler refused
    shrunk: dict | None = None  # shrink.py's summary of a failing case

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tests)


class SamplerRaised(Exception):
    """The sampler raised on a case: every request of the case fails with this message."""


def _copies(sampler, case, n: int, rng, uniforms: bool) -> tuple[list, list]:
    """(batch, meta): n copies of the case's requests with fresh seeds (and uniforms)."""
    base = int(rng.integers(2**40))
    batch, meta = [], []
    for c in range(n):
        for i, r in enumerate(case.requests):
            u = rng.random(r.K + 1) if uniforms and not r.params.greedy else None
            seed = base + c * len(case.requests) + i
            batch.append(
                SamplerRequest(r.target_logits, r.draft_tokens, r.params, seed, r.draft_logits, r.draft_probs, u)
            )
            meta.append(i)
    return batch, meta


def _run(sampler, case, copies: int, rng, uniforms: bool, say) -> list:
    """(request index, request, tokens) of `copies` runs of the case, in calls of at most max_batch."""
    n = len(case.requests)
    per_call = max(1, (getattr(sampler, "max_batch", None) or MAX_CALL) // n)
    out, done = [], 0
    while done < copies:
        k = min(per_call, copies - done)
        batch, meta = _copies(sampler, case, k, rng, uniforms)
        try:
            got = sampler.sample(batch)
        except Exception as e:  # noqa: BLE001 -- the sampler's failure on this case: its verdict
            raise SamplerRaised(f"sample() raised {type(e).__name__}: {e}") from None
        toks = check_output(got, batch, sampler.name)
        out += list(zip(meta, batch, toks))
        done += k
        say(f"{case.name}: {done}/{copies} draws")
    return out


def _prefix_problem(req, toks) -> str:
    a = len(toks) - 1
    bad = next((o for o in range(a) if toks[o] != req.draft_tokens[o]), None)
    if bad is None:
        return ""
    return f"emitted token {toks[bad]} at offset {bad} as accepted, but the draft there is {req.draft_tokens[bad]}"


def _plan(case, st: Settings) -> tuple[int, dict]:
    """(draws, {request: (expected [K+1, V], df)}) for the distribution mode."""
    plans, N = {}, 1
    for i, r in enumerate(case.requests):
        dist = RULES.outcome_distribution(r)
        if r.params.greedy:
            plans[i] = (dist, 0)
            continue
        n, df = stats.draws_for(dist.ravel(), st.delta, st.alpha / st.family, st.power)
        plans[i] = (dist, df)
        N = max(N, n)
    return min(N, st.max_draws), plans


def judge_distribution(sampler, case, st: Settings, rng, say) -> list:
    N, plans = _plan(case, st)
    runs = _run(sampler, case, N, rng, False, say)
    tests = []
    for i, r in enumerate(case.requests):
        dist = plans[i][0]
        t = Test(i, r.kind, "greedy" if r.params.greedy else "distribution", draws=N, expected=dist)
        t.observed = np.zeros_like(dist)
        for j, req, toks in runs:
            if j != i:
                continue
            problem = _prefix_problem(req, toks)
            if r.params.greedy and not problem and dist[len(toks) - 1, toks[-1]] != 1:
                want = RULES.greedy(req)
                problem = f"greedy request emitted {toks}, the argmax rule gives {want}"
            if problem and t.ok:
                t.ok, t.message = False, problem
            t.observed[len(toks) - 1, toks[-1]] += 1
        if not r.params.greedy:
            _fit(t, st)
        tests.append(t)
    return tests


def _fit(t: Test, st: Settings) -> None:
    alpha = st.alpha / st.family
    f = t.fit = stats.chi_square(t.observed.ravel(), t.expected.ravel(), alpha)
    V = t.expected.shape[1]
    a, tok = divmod(f.worst, V)
    k, n = int(t.observed.ravel()[f.worst]), int(t.observed.sum())
    lo, hi = stats.wilson(k, n, alpha)
    t.worst = {"a": a, "token": tok, "observed": k / n, "expected": float(t.expected[a, tok]), "interval": [lo, hi]}
    t.detects_tv = stats.detects(n, f.df, alpha, st.power) if f.df else None
    if not t.ok:
        return
    where = f"outcome a={a}, token {tok}: observed {k / n:.4f} [{lo:.4f}, {hi:.4f}], expected {t.expected[a, tok]:.4f}"
    if f.impossible:
        t.ok, t.message = False, f"{f.impossible} draws of an outcome of probability zero; {where}"
    elif f.p_value < alpha:
        t.ok = False
        mc = f" (Monte Carlo, {f.null_draws} null samples)" if f.null_draws else ""
        t.message = f"chi-square p = {f.p_value:.3g}{mc} < {alpha:.3g} over {n} draws (df {f.df}); {where}"


def judge_exact(sampler, case, st: Settings, rng, say) -> list:
    runs = _run(sampler, case, EXACT_COPIES, rng, True, say)
    tests = [
        Test(i, r.kind, "greedy" if r.params.greedy else "exact", draws=EXACT_COPIES)
        for i, r in enumerate(case.requests)
    ]
    dists = {i: RULES.dists(r) for i, r in enumerate(case.requests) if not r.params.greedy}
    for i, req, toks in runs:
        t = tests[i]
        if not t.ok:
            continue
        want = RULES.decide(req, req.uniforms, dists.get(i))
        if toks != want:
            t.ok, t.message = False, _exact_message(req, toks, want, dists.get(i))
    return tests


def _exact_message(req, got: list, want: list, dists) -> str:
    """Name the first decision where the sampler and the rules part."""
    if req.params.greedy:
        return f"greedy request emitted {got}, the argmax rule gives {want}"
    u = [float(x) for x in req.uniforms]
    head = f"uniforms {[round(x, 6) for x in u]}: emitted {got}, the rules give {want}"
    problem = _prefix_problem(req, got)
    if problem:
        return f"{head}; {problem}"
    ps, qs = dists
    for o in range(min(len(got), len(want))):
        if (o < len(got) - 1) != (o < len(want) - 1):
            x = req.draft_tokens[o]
            verb = "accepted" if o < len(got) - 1 else "rejected"
            return (
                f"{head}; offset {o}: the sampler {verb} draft {x} with u = {u[o]:.6g}, "
                f"p(x) = {float(ps[o][x]):.6g}, q(x) = {float(qs[o][x]):.6g} (accept iff u * q(x) < p(x))"
            )
    a = len(want) - 1
    return f"{head}; the {'bonus' if a == req.K else 'recovered'} token after {a} accepted drafts differs"


def judge_case(sampler, case, st: Settings, rng, say) -> CaseResult:
    t0 = time.perf_counter()
    res = CaseResult(case)
    refuses = getattr(sampler, "refuses", None)
    if refuses is not None:  # the requests it refuses leave the batch; a case of none left is skipped
        why = [refuses(r) for r in case.requests]
        res.refused = [f"request {i}: {w}" for i, w in enumerate(why) if w]
        if all(why):
            res.skipped = str(why[0])
            return res
        if any(why):
            res.case = case = dataclasses.replace(case, requests=[r for r, w in zip(case.requests, why) if not w])
    try:
        res.tests = (judge_exact if st.exact else judge_distribution)(sampler, case, st, rng, say)
    except SamplerRaised as e:
        res.tests = [Test(i, r.kind, "raised", ok=False, message=str(e)) for i, r in enumerate(case.requests)]
    res.draws = max((t.draws for t in res.tests), default=0)
    res.seconds = time.perf_counter() - t0
    return res
