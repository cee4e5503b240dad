"""c-tables (docs/DESIGN.md section 10; docs/cost_model.md): c(M), the measured ms of one
recurrent call (one pass of the layer stack) over M rows, each on its own KV plane, read from
JSON and checked (`load_ctable`, `ctable_from_dict`); the shipped H200 tables.

Rows of one request at one depth share a KV plane (a block round's verification calls: T_i
rows on each plane), and a call reads each plane's keys once. A table that also measured
calls with r rows per plane ("c_ms_shared": {r: {M: ms}}) prices a call of M rows on P
planes at c(M; r = M/P), linear in r between the measured r (r = 1 is c_ms): `CTable.call`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path

from .errors import OracleError
from .files import read_json


DATA = Path(__file__).parent / "data"
# The whole-call tables `cost` uses when no --ctable is given, per GPU (`--gpu`): c(M) of one
# recurrent call (attention, norms and all) and h(M) of a head call, as `bench sweep` measured
# them (docs/cost_model.md). The linear-layer table of the contract stays for reference only:
# it predicted the loop round faster at C = 64 where the measured ratio was 0.960.
SHIPPED = {
    "h200": {
        "ctable": DATA / "h200_ouro1.4b_ctx256_c_ms.json",
        "head": DATA / "h200_ouro1.4b_head_ms.json",
        "what": "whole recurrent calls of ouro-1.4b at context 256, NVIDIA H200",
    }
}
DEFAULT_GPU = "h200"
DEFAULT_CTABLE = SHIPPED[DEFAULT_GPU]["ctable"]
DEFAULT_HEAD_CTABLE = SHIPPED[DEFAULT_GPU]["head"]
LINEAR_CTABLE = DATA / "h200_ouro1.4b_linear_c_ms.json"
SHIPPED_FILES = {p.resolve() for p in [LINEAR_CTABLE, *(t[k] for t in SHIPPED.values() for k in ("ctable", "head"))]}
# A c-table is refused (unless forced) when c(M) drops by more than this fraction from one
# measured M to the next (noise, not a kernel change), or when the bench marked its repeats
# as spread beyond its noise bound ("noisy", bench/ctable.py noise_problem).
MAX_DROP = 0.25


@dataclass(frozen=True)
class CTable:
    """Piecewise-linear c(M) through measured points; an error outside [min M, max M]."""

    rows: tuple[int, ...]  # measured row counts M, strictly increasing
    ms: tuple[float, ...]  # c(M) in ms at those M
    source: str = "c-table"  # for error messages: file name or "head table ..."
    meta: dict | None = None  # the table's other keys (description, device, ...)
    shared: tuple = ()  # ((r, CTable of c over M with r rows per KV plane), ...), r >= 2 increasing

    def call(self, M: int, P: int) -> float:
        """ms of one call over M rows on P KV planes: c(M) when every row has its own plane
        (or the table measured no sharing), else linear in r = M/P between measured r."""
        assert 1 <= P <= M, (M, P)
        if not self.shared or P == M:
            return self.c(M)
        r = M / P
        known = ((1, self),) + self.shared
        if r > known[-1][0]:
            raise OracleError(
                f"{self.source} has no measurement for {r:g} rows per KV plane ({M} rows on {P} "
                f"planes; it covers 1..{known[-1][0]}: measure c_ms_shared[{math.ceil(r)}])"
            )
        k = next(k for k, (rk, _) in enumerate(known) if rk >= r)
        r1, t1 = known[k]
        if r1 == r:
            return t1.c(M)
        r0, t0 = known[k - 1]
        return t0.c(M) + (t1.c(M) - t0.c(M)) * (r - r0) / (r1 - r0)

    def c(self, M: int) -> float:
        """ms of one call over M rows."""
        lo, hi = self.rows[0], self.rows[-1]
        if not lo <= M <= hi:
            raise OracleError(
                f"{self.source} has no measurement for M={M} rows (it covers M={lo}..{hi}; add c({M}) to the table)"
            )
        k = bisect.bisect_left(self.rows, M)
        if self.rows[k] == M:
            return self.ms[k]
        m0, m1 = self.rows[k - 1], self.rows[k]
        c0, c1 = self.ms[k - 1], self.ms[k]
        return c0 + (c1 - c0) * (M - m0) / (m1 - m0)

    __call__ = c


def ctable_from_dict(data, source: str = "c-table", warn_drops: bool = True, force: bool = True) -> CTable:
    """Build a CTable from {"c_ms": {"1": 1.07, ...}, ...other keys}. A table where c(M)
    decreases with M is used as measured, with a warning on stderr unless warn_drops=False;
    with force=False (a user's file: load_ctable) one that drops by more than MAX_DROP, or
    that the bench marked "noisy", is refused."""
    if not isinstance(data, dict) or not isinstance(data.get("c_ms"), dict):
        raise OracleError(f'{source}: expected a JSON object with a "c_ms" object mapping row counts to ms')
    if not data["c_ms"]:
        raise OracleError(f'{source}: "c_ms" is empty')
    points = {}
    for key, value in data["c_ms"].items():
        M = _int_key(key, f"{source}: row count {key!r}")
        if M < 1:
            raise OracleError(f"{source}: row count {key!r} must be >= 1")
        if M in points:
            raise OracleError(f"{source}: row count {M} appears twice")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OracleError(f"{source}: c({M}) = {value!r} is not a number")
        if not math.isfinite(value) or value <= 0:
            raise OracleError(f"{source}: c({M}) = {value!r} must be a positive finite number of ms")
        points[M] = float(value)
    rows = tuple(sorted(points))
    drops = [(a, b) for a, b in zip(rows, rows[1:]) if points[b] < points[a]]
    if not force:
        refuse_noisy(data, points, drops, source)
    if drops and warn_drops:  # real tables are not monotone (kernel tile changes); predictions stay piecewise-linear
        from .progress import warn

        a, b = drops[0]
        warn(
            f"{source}: c(M) decreases with M at {len(drops)} place(s), first c({b}) = {points[b]} < "
            f"c({a}) = {points[a]}; using it as measured"
        )
    meta = {k: v for k, v in data.items() if k not in ("c_ms", "c_ms_shared")}
    shared = data.get("c_ms_shared", {})
    if not isinstance(shared, dict):
        raise OracleError(f'{source}: "c_ms_shared" must map rows per plane r to {{M: ms}} objects')
    parts = []
    for key, sub in shared.items():
        r = _int_key(key, f'{source}: rows per plane {key!r} in "c_ms_shared"')
        if r < 2:
            raise OracleError(f'{source}: rows per plane {key!r} in "c_ms_shared" must be >= 2 (r = 1 is "c_ms")')
        t = ctable_from_dict({"c_ms": sub}, f"{source} c_ms_shared[{r}]", warn_drops, force)
        odd = [M for M in t.rows if M % r]
        if odd:
            raise OracleError(f"{source}: c_ms_shared[{r}] has M={odd[0]}, not a multiple of its {r} rows per plane")
        parts.append((r, t))
    if len({r for r, _ in parts}) != len(parts):
        raise OracleError(f'{source}: a rows-per-plane count appears twice in "c_ms_shared"')
    return CTable(rows, tuple(points[M] for M in rows), source, meta, tuple(sorted(parts, key=lambda p: p[0])))


def refuse_noisy(data: dict, points: dict, drops: list, source: str) -> None:
    """A table the bench marked noisy, or one whose c(M) falls by more than MAX_DROP, is an
    error (--force uses it anyway)."""
    noisy = data.get("noisy")
    if noisy:
        raise OracleError(
            f"{source}: the bench marked it noisy ({noisy}); re-measure on an idle machine or pass --force to use it"
        )
    big = [(a, b) for a, b in drops if points[b] < (1 - MAX_DROP) * points[a]]
    if big:
        a, b = big[0]
        raise OracleError(
            f"{source}: c({b}) = {points[b]} is {1 - points[b] / points[a]:.0%} below c({a}) = "
            f"{points[a]} (more than {MAX_DROP:.0%}: noise, not a kernel change); re-measure it "
            f"or pass --force to use it"
        )


def _int_key(key, what: str) -> int:
    """A table key as an integer ("4", " 4"); else an error saying `what` is not one."""
    try:
        return int(str(key).strip())
    except ValueError:
        raise OracleError(f"{what} is not an integer") from None


def load_ctable(path=None, what: str = "c-table", force: bool = False) -> CTable:
    """Read a c-table JSON file (default: the shipped H200 whole-call table). force: use a
    table refuse_noisy would refuse."""
    path = Path(DEFAULT_CTABLE if path is None else path)
    source = f"{what} {path}"
    data = read_json(path, what, "c-table")  # a regular file, bounded in size and nesting
    # the shipped tables' drops are known (kernel tile changes; docs/cost_model.md)
    return ctable_from_dict(data, source, warn_drops=path.resolve() not in SHIPPED_FILES, force=force)
