"""What a comparison reports: `Failure` (one failed value, as a record: its class, its place, the
two sides' values, the error and its bound), `Value` (one compared value's error and bound, kept on
request), `Check` (one named property, held or not, with its first failure), `Report` (a comparison's
checks, counters and per-value errors), `rel_err` (the relative error every numeric check measures),
`largest_difference` (where it is largest) and `error_maps` (the per-value errors the report's
pictures draw). `describe(failure)` is the one rendering of a failure as text: a check's `detail` is
made by it, and every renderer (text, JSON, HTML) reads the record's fields, never the text. A leaf,
so that the verdicts built beside the judge (oracle/judge/comparison/cache_free.py) need not import it
(oracle/judge/comparison/compare.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CHECKS = (
    "rounds",
    "schedule",
    "malformed",
    "decisions",
    "tokens",
    "rng_events",
    "kv_writes",
    "draft_logits",
    "verify_logits",
    "stats",
)


MAX_RECORDS = 64  # failure records a comparison keeps per check (its counter counts them all)


@dataclass(slots=True)
class Failure:
    """One failed value. cls: the check's name (kv_writes, draft_logits, tokens, ...); text: what
    failed, in words, after its place ("KV write of offset 1 (position 4) depth 0 layer 0 differs");
    got, want: the values of the two sides, named by sides (got's first: "backend", "reference";
    "loop", "block"; "B", "A"); error and bound: the relative error and the tolerance it exceeds
    (tokens: the reference's margin in noise scales and its limit, or None); margin: the reference's
    decision margin (tokens); at: the element of the largest difference ("k[0, 3]", "index 51");
    note: the rest of the sentence (a token's margin rule); operation: the op the localizer names."""

    cls: str
    text: str = ""
    case: str = ""
    mode: str = ""  # "block", "loop", "block vs loop" or ""
    round: int | None = None
    request: int | None = None
    offset: int | None = None
    position: int | None = None
    depth: int | None = None
    layer: int | None = None
    operation: str | None = None
    got: object = None
    want: object = None
    error: float | None = None
    bound: float | None = None
    margin: float | None = None
    sides: tuple = ("backend", "reference")
    at: str = ""
    note: str = ""
    excused: bool = False  # a token divergence the margin rule excuses (not a failure)
    reproduce: str = ""

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__slots__}
        out["sides"] = list(self.sides)
        for k in ("got", "want", "error", "bound", "margin"):
            out[k] = _plain(out[k])
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Failure":
        return cls(**{**{k: d[k] for k in cls.__slots__ if k in d}, "sides": tuple(d.get("sides", cls.sides))})

    def label(self) -> str:
        """The comparison it belongs to: "CASE [mode]", "CASE", "mode" or ""."""
        if self.case and self.mode:
            return f"{self.case} [{self.mode}]"
        return self.case or self.mode


def _plain(x):
    """A value as JSON holds it (NumPy scalars as Python numbers; a non-finite float as a string)."""
    if isinstance(x, (np.integer, int)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return float(x) if np.isfinite(x) else str(float(x))
    return x


def _num(x) -> str:
    return f"{x:.6g}" if isinstance(x, (float, np.floating)) else str(x)


def place(f: Failure) -> str:
    """'CASE [mode]: round 2 request 3' (what of it the record has)."""
    where = " ".join(f"{k} {getattr(f, k)}" for k in ("round", "request") if getattr(f, k) is not None)
    return ": ".join(x for x in (f.label(), where) if x)


def values(f: Failure) -> str:
    """The record's numbers in words: 'relative error 0.37 > tolerance 1e-05; largest difference at
    index 51: backend -2.4 vs reference -0.41', or 'backend 8 vs reference 3 (reference margin ...)'."""
    got_side, want_side = f.sides
    if f.cls in ("kv_writes", "draft_logits", "verify_logits") and f.error is not None:
        out = f"relative error {f.error:.3g}" + (f" > tolerance {f.bound:g}" if f.bound else "")
        if f.at:
            out += f"; largest difference at {f.at}: {got_side} {_num(f.got)} vs {want_side} {_num(f.want)}"
        return out
    if f.got is None or f.want is None:  # one side's value alone (a backend's exception class) is not shown
        return ""
    return f"{got_side} {_num(f.got)} vs {want_side} {_num(f.want)}"


def describe(f: Failure, reproduce: bool = True) -> str:
    """The failure as one line of text: its place, what failed, its values, its note, and its
    reproduce line. The only text made from a record: every detail is this."""
    head = place(f)
    body = f.text
    nums = values(f)
    if nums:
        body = f"{body}: {nums}" if body else nums
    if f.note:
        body += f", {f.note}" if f.excused else f" ({f.note})"
    out = f"{head}: {body}" if head and body else head or body
    return out + (f" (reproduce: {f.reproduce})" if reproduce and f.reproduce else "")


@dataclass(slots=True)
class Value:
    """One compared KV write or logits vector, kept where a comparison keeps its values (compare_runs
    values=True; TracesPlan.values): its check, place, relative error and the bound it was judged by
    (the noise twin's, else the row's)."""

    check: str  # kv_writes, draft_logits, verify_logits
    round: int | None
    request: int | None
    offset: int | None
    depth: int | None
    layer: int | None  # None: a logits vector
    error: float
    bound: float


@dataclass(slots=True)
class Check:
    name: str
    ok: bool
    detail: str = ""
    failure: Failure | None = None  # the first failure's record (the detail is describe(failure))


@dataclass(slots=True)
class Report:
    checks: list = field(default_factory=list)
    reproduce: str = ""
    failures: int = 0
    kv_writes_compared: int = 0
    logits_compared: int = 0
    rng_events_compared: int = 0
    tokens_compared: int = 0
    request_rounds: int = 0
    max_rel_err: dict = field(default_factory=lambda: {"kv": 0.0, "logits": 0.0})
    divergences: list = field(default_factory=list)  # excused token divergences (Failure, excused)
    case: str = ""  # the comparison's case and mode (compare_runs's), for the maps
    mode: str = ""
    records: list = field(default_factory=list)  # every failure's record, MAX_RECORDS per check
    kept: dict = field(default_factory=dict)  # check -> records kept of it
    # the per-value errors the report's pictures draw: (depth, layer, position) -> [error, bound] of KV
    # writes (the largest over rounds and requests; inf: a write one side lacks) and (check, offset) ->
    # [error, bound] of logits
    kv_errors: dict = field(default_factory=dict)
    logits_errors: dict = field(default_factory=dict)
    values: list | None = None  # every compared value's Value where the comparison keeps them; None: not kept

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    def fail(self, f: Failure) -> None:
        """Record a failure; each check keeps its first one (the first real difference)."""
        self.failures += 1
        f.reproduce = f.reproduce or self.reproduce
        if self.kept.get(f.cls, 0) < MAX_RECORDS:
            self.kept[f.cls] = self.kept.get(f.cls, 0) + 1
            self.records.append(f)
        if not any(c.name == f.cls for c in self.checks):
            self.checks.append(Check(f.cls, False, describe(f), f))

    def excuse(self, f: Failure) -> None:
        f.excused = True
        self.divergences.append(f)

    def error(self, table: dict, key, err: float, bound: float) -> None:
        """The largest error seen at key (table: kv_errors or logits_errors), with its bound."""
        cell = table.get(key)
        if cell is None or err > cell[0]:
            table[key] = [err, bound]

    def value(self, check: str, at: dict, err: float, bound: float) -> None:
        """One compared value's record (at: its Failure fields), where values are kept."""
        if self.values is not None:
            place = [at.get(k) for k in ("round", "request", "offset", "depth", "layer")]
            self.values.append(Value(check, *place, float(err), float(bound)))

    def finish(self) -> "Report":
        failed = {c.name for c in self.checks}
        self.checks += [Check(n, True) for n in CHECKS if n not in failed]
        return self


def error_maps(reports: list, limit: int = 12) -> list[dict]:
    """What the report's pictures draw, per comparison of [(label, Report)]: {label, case, mode, ok,
    kv: [[depth, layer, position, error, bound]], logits: [[check, offset, error, bound]], tokens:
    [the token failures' records]}; the errors for the failed comparisons (at most `limit`; none
    failed: the first), the token records for all. A write one side lacks has error "inf"."""
    drawn = [label for label, rep in reports if not rep.ok][:limit] or [lr[0] for lr in reports[:1]]
    out = []
    for label, rep in reports:
        cells = lambda table: [[*k, _plain(e), b] for k, (e, b) in sorted(table.items())] if label in drawn else []
        out.append(
            {
                "label": label,
                "case": rep.case,
                "mode": rep.mode,
                "ok": rep.ok,
                "kv": cells(rep.kv_errors),
                "logits": cells(rep.logits_errors),
                "tokens": [f.to_json() for f in rep.records if f.cls == "tokens"],
            }
        )
    return out


def rel_err(a, b, floor: float = 0.0) -> float:
    """||a - b|| / max(||b||, floor) over finite entries; -inf (a masked logit) must sit at the
    same places. floor: the typical norm of such vectors, so that a vector that came out
    small by cancellation is not judged against its own small norm."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    masked = (a == -np.inf) & (b == -np.inf)
    a, b = np.where(masked, 0.0, a), np.where(masked, 0.0, b)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), floor, 1e-30))


def largest_difference(names, ref, got) -> dict:
    """{at, got, want} of the largest difference over the elements of the arrays (named, e.g. k and
    v of a KV write: at "k[0, 3]", else "index 17"; NaN and unmatched inf count as the largest); {}
    where shapes differ. The fields of a Failure."""
    best = None
    for nm, r, g in zip(names, ref, got):
        r, g = np.asarray(r, np.float64), np.asarray(g, np.float64)
        if r.shape != g.shape or not r.size:
            return {}
        with np.errstate(invalid="ignore"):
            d = np.where(r == g, 0.0, np.abs(g - r))
        d = np.where(np.isnan(d), np.inf, d)
        n = int(np.argmax(d))
        if best is None or d.flat[n] > best[0]:
            idx = np.unravel_index(n, d.shape)
            where = ", ".join(map(str, idx))
            best = (d.flat[n], f"{nm}[{where}]" if nm else f"index {where}", g.flat[n], r.flat[n])
    return {} if best is None else {"at": best[1], "got": float(best[2]), "want": float(best[3])}


def whose(side: str) -> str:
    """A side's name as an owner: "the backend's", "the loop run's", "B's"."""
    if side in ("backend", "reference"):
        return f"the {side}'s"
    return f"the {side} run's" if side in ("block", "loop") else f"{side}'s"
