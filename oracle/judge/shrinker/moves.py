"""The shrinker's moves (issue 44): a case's shape as plain data (`plain`, `normal`, `size`,
`describe`), and the smaller candidates each pass makes from a case (`PASSES`, in the search's
order; oracle/judge/shrinker/shrink.py runs them):
    requests      one request alone (the one the failure names first), then halves, quarters, ...
    rounds        one round alone (the failing round first), then shorter prefixes, then one round less
    token counts  every T_i = 1, halved, then each (round, request) to 1, T/2, T - 1
    prompts       each request's prompt to 1 token, half, one token less
    depths        uniform (d, D) instead of per-request depths, then lower D and d
    sampling      each processor, mask, stop and filter field of each request off, one at a time;
                  then temperature 0 (its filters with it); then the sequential policy; greedy
                  requests' seeds 0
A move takes a case and the (round, request) its failure names (`hint`) and gives its candidates.
"""

from __future__ import annotations

import dataclasses

from ..scenario import Case
from ...sampling_params import CHAIN, SamplingParams

# SamplingParams fields the sampling pass turns off one at a time (the mask, the processors, the stop
# cut, the filters): each step's fields but temperature, which the greedy move sets 0 with the
# filters' fields off (FILTERS: a greedy request with a filter is refused)
FILTERS = tuple(f for step in CHAIN.named("filter") for f in step.off if f != "temperature")
OFF = {
    **{f: v for step in CHAIN.steps for f, v in step.off.items() if f != "temperature"},
    "stop_token_ids": (),
    "max_tokens": None,
}


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


def with_parts(case: Case, **kw) -> Case:
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
    keep = lambda ks: with_parts(case, rounds=[{r: t for r, t in rnd.items() if r in ks} for rnd in case.rounds])
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
    out = [with_parts(case, rounds=[case.rounds[i]]) for i in _named_first(list(range(n)), first)]
    out += [with_parts(case, rounds=case.rounds[:k]) for k in range(2, n)]
    out += [with_parts(case, rounds=case.rounds[:i] + case.rounds[i + 1 :]) for i in range(n)]
    return out


def smaller_counts(case: Case, hint=()) -> list:
    rounds = case.rounds
    out = [with_parts(case, rounds=[{r: 1 for r in rnd} for rnd in rounds])]
    out.append(with_parts(case, rounds=[{r: max(1, t // 2) for r, t in rnd.items()} for rnd in rounds]))
    for i, rnd in enumerate(rounds):
        for rid, t in rnd.items():
            for new in dict.fromkeys((1, t // 2, t - 1)):
                if 1 <= new < t:
                    changed = [dict(x) for x in rounds]
                    changed[i][rid] = new
                    out.append(with_parts(case, rounds=changed))
    return out


def shorter_prompts(case: Case, hint=()) -> list:
    out = [with_parts(case, prompts=[p[:1] for p in case.prompts])]
    for i, p in enumerate(case.prompts):
        for new in dict.fromkeys((1, len(p) // 2, len(p) - 1)):
            if 1 <= new < len(p):
                out.append(with_parts(case, prompts=[q[:new] if j == i else q for j, q in enumerate(case.prompts)]))
    return out


def lower_depths(case: Case, hint=()) -> list:
    out = []
    if case.depths is not None:
        pairs = sorted(set(case.depths), key=lambda p: (p[1], p[0]))
        out += [with_parts(case, depths=None, d=a, D=b) for a, b in pairs]
        out.append(with_parts(case, depths=None, d=case.d, D=case.D))
        for i, (a, b) in enumerate(case.depths):
            for na, nb in ((a, b - 1), (a - 1, b), (a - 1, b - 1)):
                if 1 <= na < nb:
                    out.append(with_parts(case, depths=[(na, nb) if j == i else x for j, x in enumerate(case.depths)]))
        return out
    for na, nb in ((1, 2), (case.d, case.D - 1), (case.d - 1, case.D), (case.d - 1, case.D - 1)):
        if 1 <= na < nb and (na, nb) != (case.d, case.D):
            out.append(with_parts(case, d=na, D=nb))
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
            out.append(with_parts(case, params=[new if j == i else q for j, q in enumerate(case.params)]))

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
                    with_parts(
                        case,
                        params=[new if j == i else q for j, q in enumerate(case.params)],
                        policy="sequential",
                    )
                )
            else:
                one(i, new)
    if case.policy != "sequential":
        out.append(with_parts(case, policy="sequential"))
    if any(p.greedy and p.seed for p in case.params):  # a greedy request draws nothing: its seed does nothing
        out.append(with_parts(case, params=[_replace(p, seed=0) if p.greedy else p for p in case.params]))
    return out


PASSES = (
    ("requests", fewer_requests),
    ("rounds", fewer_rounds),
    ("token counts", smaller_counts),
    ("prompts", shorter_prompts),
    ("depths", lower_depths),
    ("sampling", simpler_sampling),
)
