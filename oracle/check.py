"""`python -m oracle check`: run block and loop rounds on the same inputs and compare
everything; plus the cache-free recompute, the schedule invariants and KV frontiers."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .cache_free import cache_free_check
from .cases import REFERENCE, run
from .compare import Check, Report, compare_runs
from .errors import OracleError
from .sampling import SamplingParams
from .schedule import check_schedule, expected_calls, plan


@dataclass(slots=True)
class Case:
    name: str
    prompts: list                      # token lists
    params: list                       # SamplingParams per request
    rounds: list                       # per round: {rid: T_i}
    d: int
    D: int
    policy: str = "sequential"
    reproduce: str = ""
    depths: list | None = None         # (d_i, D_i) per request; None: every request (d, D)

    @property
    def ops(self) -> tuple:
        """The rounds as runner ops: a request joins right before the first round naming it."""
        ops, joined = [], set()
        for counts in self.rounds:
            ops += [("add", rid) for rid in counts if rid not in joined]
            joined |= set(counts)
            ops.append(("step", tuple(counts.items())))
        return tuple(ops)


def run_case(model, case: Case, mode: str, backend=None, replay: dict | None = None):
    """Run all rounds of a case in one mode (oracle.cases.run); returns the round traces and
    the session. replay: rid -> uniforms to consume instead of the request's generator."""
    r = run(backend or REFERENCE, model, case, mode, replay=replay)
    return r.traces, r.session


def schedule_violation(tr, mode: str) -> str | None:
    """What in a round's trace departs from its planned schedule (the plan itself checked
    first), or None. Row order inside a call is free; a backend that records no calls is
    checked on its stats only."""
    dep = tr.request_depths()
    d, D = [x for x, _ in dep], [x for _, x in dep]
    s = plan(mode, tr.token_counts, d, D)
    check_schedule(s)
    want_calls = expected_calls(mode, tr.token_counts, d, D)
    formula = "(max(T)-1)*d+D" if len(set(dep)) == 1 else f"the {mode} plan's count for depths {dep}"
    stats = tr.stats or {}
    if "recurrent_calls" in stats and stats["recurrent_calls"] != want_calls:
        return f"round {tr.round}: {stats['recurrent_calls']} recurrent calls, expected {formula} = {want_calls}"
    if "rows_per_call" in stats and stats["rows_per_call"] != s.row_counts():
        return f"round {tr.round}: rows per call {stats['rows_per_call']}, the {mode} plan has {s.row_counts()}"
    if not tr.calls:                                   # the backend does not record its calls
        return None
    idx = {rid: i for i, rid in enumerate(tr.requests)}
    got = [{"rows": sorted([idx[r], o, j] for r, o, j in c["rows"]),
            "draft_head": sorted([idx[r], o] for r, o in c.get("draft_head", []))} for c in tr.calls]
    want = [{"rows": sorted(r), "draft_head": sorted(h)} for r, h in
            ((c["rows"], c["draft_head"]) for c in s.to_json()["calls"])]
    for n, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"round {tr.round}: {mode} call {n} ran {g}, the plan has {w}"
    if len(got) != len(want):
        return f"round {tr.round}: {len(got)} calls, the {mode} plan has {len(want)}"
    return None


def schedule_check(traces) -> Check:
    """The calls each round executed are exactly its planned schedule."""
    for tr in traces:
        problem = schedule_violation(tr, tr.mode) if tr.mode in ("block", "loop") else None
        if problem:
            return Check(f"schedule_{tr.mode}", False, problem)
    return Check(f"schedule_{traces[0].mode if traces else ''}", True)


def frontier_check(session, traces) -> Check:
    for rid, req in session.requests.items():
        f = session.kv.frontiers(rid)
        if f != {len(req.tokens) - 1}:
            return Check("kv_frontier", False, f"request {rid}: KV frontiers {sorted(f)} after commit, "
                         f"expected {len(req.tokens) - 1}")
    return Check("kv_frontier", True)


def check_case(model, case: Case) -> Report:
    results = {}
    for mode in ("block", "loop"):
        try:
            results[mode] = run_case(model, case, mode)
        except (OracleError, AssertionError, IndexError, KeyError) as e:
            rep = Report()
            rep.checks.append(Check(f"{mode}_round", False, f"{mode} round raised {type(e).__name__}: {e}"
                                    + (f" (reproduce: {case.reproduce})" if case.reproduce else "")))
            return rep
    (tb, sb), (tl, sl) = results["block"], results["loop"]
    rep = compare_runs(tb, tl, "exact", case.reproduce)
    for mode, traces, sess in (("block", tb, sb), ("loop", tl, sl)):
        rep.checks.append(schedule_check(traces))
        rep.checks.append(frontier_check(sess, traces))
    c, n = cache_free_check(model, tb)
    rep.checks.append(c)
    return rep


def make_case(name, counts_rounds, d, D, params, seed=0, policy="sequential", prompt_len=(1, 8), reproduce="",
              vocab=64, depths=None):
    """Prompts drawn from `seed` (token ids below min(vocab, 64), lengths in prompt_len);
    depths: (d_i, D_i) per request, or None for every request at (d, D)."""
    rng = np.random.default_rng(seed)
    n_req = max(max(r) for r in counts_rounds if r) + 1 if counts_rounds else 0
    prompts = [list(map(int, rng.integers(0, min(vocab, 64), rng.integers(prompt_len[0], prompt_len[1] + 1))))
               for _ in range(n_req)]
    return Case(name, prompts, params, counts_rounds, d, D, policy, reproduce, depths)


def default_cases(vocab: int, model_flags: list[str] | None = None) -> list[Case]:
    """Several ragged batches, greedy and sampled (top-k, top-p), four (d, D) pairs, one batch
    of per-request target depths, stop tokens and max_tokens, both RNG policies, multi-round
    generation with rollback and requests joining/leaving. Each case's reproduce line runs it
    alone: `check <model_flags> --case NAME`, where model_flags name the model the check ran on
    (default: the tiny preset, seed 0)."""
    from .round_args import command
    flags = list(model_flags) if model_flags is not None else ["--preset", "tiny", "--seed", "0"]
    G = SamplingParams()
    S = lambda seed, **kw: SamplingParams(temperature=kw.pop("t", 1.0), seed=seed, **kw)
    mixed = [G, S(1, top_k=8), S(2, top_p=0.8), S(3, t=0.7, top_k=20, top_p=0.9), G, S(5, t=1.5)]
    stop = [SamplingParams(stop_token_ids=(7,)), S(1, top_k=8, max_tokens=4),
            S(2, top_p=0.9, t=0.7, stop_token_ids=(46,), max_tokens=5), S(3, stop_token_ids=(3, 7))]
    specs = [
        ("ragged (5,3,1) d=2 D=4", [{0: 5, 1: 3, 2: 1}], 2, 4, mixed[:3], 1, "sequential", None),
        ("uniform (5,5,5,5) d=2 D=4, 6 rounds", [{i: 5 for i in range(4)}] * 6, 2, 4, mixed[:4], 2, "sequential", None),
        ("ragged d=1 D=3, K changes per round",
         [{0: 3, 1: 1, 2: 6}, {0: 1, 1: 4, 2: 2}, {0: 9, 1: 2, 2: 1}, {0: 2, 1: 5, 2: 3}],
         1, 3, [mixed[1], mixed[0], mixed[2]], 3, "sequential", None),
        ("d=3 D=5 fixed policy, joins and leaves",
         [{0: 4, 1: 2}, {0: 4, 1: 3, 2: 5}, {2: 2, 3: 4}, {0: 1, 2: 5, 3: 3, 4: 2}], 3, 5, mixed[1:6], 4, "fixed",
         None),
        ("per-request depths 2:4,1:3,3:5,1:4, 3 rounds",
         [{0: 5, 1: 3, 2: 1, 3: 4}, {0: 6, 1: 6, 2: 4, 3: 1}, {0: 3, 2: 2, 3: 3}],
         1, 5, mixed[:4], 6, "sequential", [(2, 4), (1, 3), (3, 5), (1, 4)]),
        ("stop tokens and max_tokens, 4 rounds", [{0: 5, 1: 3, 2: 1, 3: 4}] * 4, 2, 4, stop, 7, "sequential", None),
        ("d=1 D=2 greedy and sampled, 8 requests", [{i: 1 + (i * 3) % 7 for i in range(8)}] * 3,
         1, 2, [mixed[i % 6] for i in range(8)], 5, "sequential", None),
    ]
    return [make_case(name, rounds, d, D, params, seed=seed, policy=policy, vocab=vocab, depths=depths,
                      reproduce=command(["check", *flags, "--case", name]))
            for name, rounds, d, D, params, seed, policy, depths in specs]
