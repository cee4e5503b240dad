"""The exactness tier (docs/DESIGN.md, "Batch invariance"): for a backend that declares itself
batch-invariant (oracle/runtime/contract.py, `batch_invariant`), three claims per case, each bitwise (the
stored bits of every value, never floats at a tolerance):

    block = loop      the backend's block and loop runs of the case agree in every KV write, draft
                      and verification logit, RNG event and decision
    spec = plain      at every committed position, the KV writes and verification logits of the
                      case's block run equal those of plain decoding (the request alone, one
                      position per call, every depth) fed the same tokens; a greedy request emits
                      plain decoding's tokens
    alone = batched   each request of a case with several, run alone in the loop round, gives the
                      bits it gave sharing its calls

A claim that fails is one check of class "invariance" naming the first place the two runs part
(`Part`: request, round, position, depth, layer), localized to the first operation whose bits differ
where the backend offers capture (oracle/judge/plans/localize.py). A backend that does not declare
invariance is never held to these claims (`localize` answers "where do they part" for any backend).

Plain decoding is forced onto the spec run's tokens: a greedy request takes its own argmax; a
sampled one replays, at each step, a uniform in the middle of the committed token's interval of the
reference's inverse CDF over the spec run's own verification logits. Where the plain logits equal
the spec logits bitwise, that draw is the committed token; where they do not, the logits differ
first and the claim fails there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import sampling
from ...processors import Seen
from ..comparison.report import Failure, describe
from ..runner import ScenarioRun, run_scenario
from ..scenario import Case

CLAIMS = ("block = loop", "spec = plain", "alone = batched")
LAST = 10**9  # a key after every layer (events and decisions come after a round's values)


def bits(x) -> np.ndarray:
    """The stored bits of an array, as unsigned integers of its item size."""
    a = np.ascontiguousarray(np.asarray(x))
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fc" or a.dtype.itemsize in (2, 4, 8) else a


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(bits(a), bits(b))


@dataclass(frozen=True, slots=True)
class Part:
    """Where two runs of one request first part, in the order the values are computed."""

    claim: str
    labels: tuple  # the two sides, e.g. ("block", "loop")
    rid: int
    rounds: tuple  # the round index on each side
    position: int
    depth: int | None  # None: a decision or an RNG event
    layer: int | None  # num_layers: the head's logits
    what: str  # "KV write" | "verification logits" | "draft logits" | "RNG event" | "decision"
    detail: str = ""

    def key(self) -> tuple:
        depth = LAST if self.depth is None else self.depth
        return (self.rounds[0], self.position, depth, LAST if self.layer is None else self.layer)

    def place(self) -> str:
        where = f"request {self.rid}, round {self.rounds[0]}, position {self.position}"
        if self.depth is not None:
            where += f", depth {self.depth}" + (f", layer {self.layer}" if self.what == "KV write" else "")
        return where


@dataclass(slots=True)
class ClaimResult:
    claim: str
    values: int = 0  # array elements and decisions compared
    parts: list = field(default_factory=list)  # every request's first Part
    localized: str = ""  # the first operation where the first part's row parts, in a line (localize.py)
    operation: str | None = None  # that operation, layer and depth ("o_proj, layer 1, depth 2"), or None

    @property
    def ok(self) -> bool:
        return not self.parts


# ---- one request's values in one round, compared bitwise ----


def _request_parts(claim, labels, rid, ra, rb, ta, tb, counter) -> list[Part]:
    """The places where round ta and round tb of request rid differ, first first (counter[0]: the
    values compared, summed in)."""
    out = []
    start_a, start_b = len(ta.prefix[rid]) - 1, len(tb.prefix[rid]) - 1
    mk = lambda pos, depth, layer, what, detail="": Part(claim, labels, rid, (ra, rb), pos, depth, layer, what, detail)
    kv_a = {k[1:]: v for k, v in ta.kv_writes.items() if k[0] == rid}
    kv_b = {k[1:]: v for k, v in tb.kv_writes.items() if k[0] == rid}
    for addr in sorted(set(kv_a) | set(kv_b)):
        pos, depth, layer = addr
        if addr not in kv_a or addr not in kv_b:
            side = labels[0] if addr not in kv_a else labels[1]
            out.append(mk(pos, depth, layer, "KV write", f"missing from the {side} run"))
            continue
        (_, ka, va), (_, kb, vb) = kv_a[addr], kv_b[addr]
        counter[0] += np.asarray(ka).size + np.asarray(va).size
        if not same_bits(ka, kb) or not same_bits(va, vb):
            which = "k" if not same_bits(ka, kb) else "v"
            x, y = (ka, kb) if which == "k" else (va, vb)
            out.append(mk(pos, depth, layer, "KV write", _first_bits(which, x, y, labels)))
    for what, la, lb in (
        ("verification logits", ta.verify_logits, tb.verify_logits),
        ("draft logits", ta.draft_logits, tb.draft_logits),
    ):
        for o in sorted({o for r, o in la if r == rid}):
            pos = start_a + o
            ob = pos - start_b
            x, y = la[(rid, o)], lb.get((rid, ob))
            if y is None:
                out.append(mk(pos, None, None, what, f"missing from the {labels[1]} run"))
                continue
            counter[0] += np.asarray(x).size
            if not same_bits(x, y):
                depth = _depth(ta, rid, what)
                out.append(mk(pos, depth, None, what, _first_bits("logits", x, y, labels)))
    ea = [e for e in ta.rng_events if e.request == rid]
    eb = [e for e in tb.rng_events if e.request == rid]
    counter[0] += len(ea)
    for x, y in zip(ea, eb):
        if x.key()[2:] != y.key()[2:] or not same_bits(np.float64(x.value), np.float64(y.value)):
            out.append(mk(start_a, None, None, "RNG event", f"{labels[0]} {x} vs {labels[1]} {y}"))
            break
    else:
        if len(ea) != len(eb):
            out.append(mk(start_a, None, None, "RNG event", f"{len(ea)} events vs {len(eb)}"))
    for f in ("drafts", "accepted", "emitted", "committed"):
        x, y = getattr(ta, f).get(rid), getattr(tb, f).get(rid)
        counter[0] += 1
        if x != y:
            out.append(mk(start_a, None, None, "decision", f"{f}: {labels[0]} {x} vs {labels[1]} {y}"))
    return sorted(out, key=Part.key)


def _depth(t, rid, what: str) -> int:
    d, D = t.depths.get(rid, (t.d, t.D))
    return (D if what == "verification logits" else d) - 1


def _first_bits(name: str, x, y, labels) -> str:
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return f"{name}: {labels[0]} {x.dtype}{list(x.shape)} vs {labels[1]} {y.dtype}{list(y.shape)}"
    i = int(np.argmax(bits(x).reshape(-1) != bits(y).reshape(-1)))
    a, b = x.reshape(-1)[i], y.reshape(-1)[i]
    n = int(np.count_nonzero(bits(x) != bits(y)))
    return f"{name}[{i}]: {labels[0]} {float(a)!r} vs {labels[1]} {float(b)!r} ({n} of {x.size} values differ)"


def compare_runs_bitwise(claim, labels, a: ScenarioRun, b: ScenarioRun, rids=None):
    """(values compared, [each request's first Part]) between two runs, over rids (default every
    request of a): the rounds holding the request on each side, paired in order."""
    counter, parts = [0], []
    rids = sorted({r for t in a.traces for r in t.requests}) if rids is None else rids
    for rid in rids:
        ia = [i for i, t in enumerate(a.traces) if rid in t.requests]
        ib = [i for i, t in enumerate(b.traces) if rid in t.requests]
        first = []
        for ra, rb in zip(ia, ib):
            first = _request_parts(claim, labels, rid, ra, rb, a.traces[ra], b.traces[rb], counter)
            if first:
                break
        if not first and len(ia) != len(ib):
            n = min(len(ia), len(ib))
            ra, rb = ia[min(n, len(ia) - 1)], ib[min(n, len(ib) - 1)] if ib else None
            why = f"request {rid} ran {len(ia)} rounds in the {labels[0]} run, {len(ib)} in the {labels[1]} run"
            first = [Part(claim, labels, rid, (ra, rb), len(a.traces[ra].prefix[rid]) - 1, None, None, "decision", why)]
        parts += first[:1]
    return counter[0], parts


# ---- spec = plain: the kept rows of the spec run against plain decoding's, by position ----


def kept_rows(run: ScenarioRun, rid: int) -> dict:
    """position -> (round index, {(depth, layer): (k, v)}, verification logits) over the rows each
    round kept (offsets below its committed count)."""
    out = {}
    for i, t in enumerate(run.traces):
        if rid not in t.requests:
            continue
        start = len(t.prefix[rid]) - 1
        for o in range(len(t.committed.get(rid, ()))):
            kv = {(j, l): (k, v) for (r, p, j, l), (_, k, v) in t.kv_writes.items() if r == rid and p == start + o}
            out[start + o] = (i, kv, t.verify_logits.get((rid, o)), _depth(t, rid, "verification logits"))
    return out


def compare_kept(spec: ScenarioRun, plain: ScenarioRun, rid: int, labels=("spec", "plain")) -> tuple[int, list]:
    """(values compared, [the first Part]) of request rid: its kept rows in both runs by position,
    then its committed tokens."""
    a, b, n = kept_rows(spec, rid), kept_rows(plain, rid), 0
    mk = lambda pos, depth, layer, what, detail: Part(
        "spec = plain", labels, rid, (a[pos][0], b.get(pos, (None,))[0]), pos, depth, layer, what, detail
    )
    for pos in sorted(a):
        if pos not in b:
            return n, [mk(pos, None, None, "decision", f"position {pos} was not reached by {labels[1]} decoding")]
        (_, kva, la, depth), (_, kvb, lb, _) = a[pos], b[pos]
        for addr in sorted(set(kva) | set(kvb)):
            if addr not in kva or addr not in kvb:
                side = labels[0] if addr not in kva else labels[1]
                return n, [mk(pos, *addr, "KV write", f"missing from the {side} run")]
            (ka, va), (kb, vb) = kva[addr], kvb[addr]
            n += np.asarray(ka).size + np.asarray(va).size
            for name, x, y in (("k", ka, kb), ("v", va, vb)):
                if not same_bits(x, y):
                    return n, [mk(pos, *addr, "KV write", _first_bits(name, x, y, labels))]
        n += np.asarray(la).size
        if lb is None or not same_bits(la, lb):
            why = f"missing from {labels[1]}" if lb is None else _first_bits("logits", la, lb, labels)
            return n, [mk(pos, depth, None, "verification logits", why)]
    ta, tb = spec.tokens.get(rid, []), plain.tokens.get(rid, [])
    n += len(ta)
    if ta != tb[: len(ta)] or len(tb) < len(ta):
        i = next((k for k, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        return n, [
            mk(
                max(a) if a else 0,
                None,
                None,
                "decision",
                f"token {i}: {labels[0]} {ta[i : i + 1]} vs {labels[1]} {tb[i : i + 1]}",
            )
        ]
    return n, []


# ---- the three claims' second runs ----
def derived_case(sc, model, name: str, rounds: list) -> Case:
    """A Case of scenario sc's requests (any scenario the runner takes) with other rounds."""
    depths = None if sc.depths is None else [tuple(x) for x in sc.depths]
    params = list(sc.params_for(model))
    return Case(f"{sc.name} [{name}]", [list(p) for p in sc.prompts], params, rounds, sc.d, sc.D, sc.policy, "", depths)


def alone_case(case, model, rid: int) -> Case:
    """The case with request rid alone: its prompt, params and rounds, the others gone."""
    return derived_case(case, model, f"request {rid} alone", [{rid: c[rid]} for c in case.rounds if rid in c])


def plain_case(case, model, spec: ScenarioRun, rid: int) -> tuple[Case, dict]:
    """Plain decoding of rid, fed the spec run's committed tokens: (the case, {rid: uniforms to replay})."""
    params = case.params_for(model)
    tokens, prompt = spec.tokens[rid], list(case.prompts[rid])
    c = derived_case(case, model, f"request {rid} plain", [{rid: 1} for _ in range(len(tokens) - len(prompt))])
    greedy = params[rid].greedy
    return c, {rid: [] if greedy else _forcing_uniforms(spec, rid, params[rid], tokens, len(prompt))}


def _forcing_uniforms(spec: ScenarioRun, rid: int, params, tokens: list, n_prompt: int) -> list:
    """Per plain step, a uniform whose categorical draw over the spec run's own verification logits
    at that position (through the reference's chain, with plain decoding's seen tokens) is the
    committed token."""
    rows, out = kept_rows(spec, rid), []
    for pos in range(n_prompt - 1, len(tokens) - 1):
        seen = Seen(tuple(tokens[:n_prompt]), tuple(tokens[n_prompt : pos + 1]), 0, 0)
        p = sampling.filtered_probs(np.asarray(rows[pos][2], np.float32), params, seen)
        cdf, x = np.cumsum(np.asarray(p, np.float64)), tokens[pos + 1]
        lo = cdf[x - 1] if x > 0 else 0.0
        out.append(float((lo + cdf[x]) / 2 / cdf[-1]))
    return out


# ---- the tier of one case ----


def claims(bk, model, case: Case, runs: dict, localize_fn=None, **options) -> list[ClaimResult]:
    """The three claims on one case, given the backend's block and loop runs of it (runs: mode ->
    ScenarioRun). localize_fn(part, sides): the first differing operation of a part's row, in a line
    ("" where it cannot say); sides: the two (case, mode, replay) the part's runs were made from."""
    out = []
    block, loop = runs["block"], runs["loop"]
    res = ClaimResult("block = loop")
    res.values, res.parts = compare_runs_bitwise("block = loop", ("block", "loop"), block, loop)
    _localize(res, localize_fn, lambda p: ((case, "block", None), (case, "loop", None)))
    out.append(res)

    res, sides = ClaimResult("spec = plain"), {}
    for rid in sorted(block.tokens):
        plain, replay = plain_case(case, model, block, rid)
        run = run_scenario(bk, model, plain, "block", replay=replay, **options)
        n, parts = compare_kept(block, run, rid)
        res.values += n
        res.parts += parts
        sides[rid] = ((case, "block", None), (plain, "block", replay))
    _localize(res, localize_fn, lambda p: sides[p.rid])
    out.append(res)

    res, sides = ClaimResult("alone = batched"), {}
    if len(case.prompts) > 1:
        for rid in sorted(loop.tokens):
            alone = alone_case(case, model, rid)
            run = run_scenario(bk, model, alone, "loop", **options)
            n, parts = compare_runs_bitwise("alone = batched", ("batched", "alone"), loop, run, [rid])
            res.values += n
            res.parts += parts
            sides[rid] = ((case, "loop", None), (alone, "loop", None))
    _localize(res, localize_fn, lambda p: sides[p.rid])
    out.append(res)
    return out


def _localize(res: ClaimResult, localize_fn, sides_of) -> None:
    if res.parts and localize_fn is not None:
        first = min(res.parts, key=Part.key)
        res.localized, res.operation = localize_fn(first, sides_of(first))


def failure(case_name: str, res: ClaimResult, reproduce: str = "") -> Failure:
    """The failed claim as a record (oracle/judge/comparison/report.py): class "invariance", the claim as its mode,
    the first part's place, what differs, the operation the localizer named."""
    first = min(res.parts, key=Part.key)
    a, b = first.labels
    text = f"{a} and {b} part at position {first.position}"
    text += "" if first.depth is None else f", depth {first.depth}"
    text += f", layer {first.layer}" if first.what == "KV write" else ""
    text += f": {first.what} {first.detail}"
    if res.localized:
        text += f"; first differing operation: {res.localized}"
    more = len(res.parts) - 1
    text += f" (+{more} more request{'s' if more > 1 else ''} part)" if more else ""
    return Failure(
        "invariance",
        text,
        case_name,
        res.claim,
        first.rounds[0],
        first.rid,
        None,
        first.position,
        first.depth,
        first.layer,
        res.operation,
        sides=(a, b),
        reproduce=reproduce,
    )


def failure_line(case_name: str, res: ClaimResult) -> str:
    return describe(failure(case_name, res), reproduce=False)
