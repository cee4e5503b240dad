"""Cost model of a speculative round (docs/DESIGN.md section 10; docs/cost_model.md).

c(M) = measured ms of one recurrent call (one pass of the layer stack) over M rows, each on
its own KV plane; a round's predicted time is the sum of c(rows) over its recurrent calls,
plus, given a head table h(M), one head call per call that runs the draft head and one
verification head call over all rows.

Rows of one request at one depth share a KV plane (a block round's verification calls: T_i
rows on each plane), and a call reads each plane's keys once. A table that also measured
calls with r rows per plane ("c_ms_shared": {r: {M: ms}}) prices a call of M rows on P
planes at c(M; r = M/P), linear in r between the measured r (r = 1 is c_ms); its calls are
then keyed (M, P) everywhere below, and the deciding inequality reads c(M@P).

Block and loop rounds have the same number of recurrent calls and the same total rows, so
only the row counts that differ between them decide which is faster:
`deciding_row_counts` returns that multiset difference and `deciding_inequality` puts it in
the form "loop wins iff sum_block m*[c(M)-c(b)] > sum_loop m*[c(M)-c(b)]".
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

from .errors import OracleError
from .files import read_json
from .schedule import Schedule, plan, validate

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


def head_row_counts(s: Schedule) -> list[int]:
    """Rows of each head call: one per call that runs the draft head, then the verification head."""
    return [n for n in s.draft_head_counts() if n] + [len(s.verify_head)]


def planes(call) -> int:
    """KV planes a call's rows touch: one per (request, depth)."""
    return len({(i, j) for i, _, j in call.rows})


def call_keys(schedule: Schedule, by_planes: bool) -> list:
    """Each call's cost key: its row count M, or (M, P) with P its KV planes."""
    return [(len(c.rows), planes(c)) if by_planes else len(c.rows) for c in schedule.calls]


def key_cost(ctable: CTable):
    """The cost of a key of call_keys: c(M) or ctable.call(M, P)."""
    return lambda k: ctable.call(*k) if isinstance(k, tuple) else ctable.c(k)


def predict(schedule: Schedule, ctable: CTable, head_table: CTable | None = None) -> dict:
    """Predicted ms of one round: sum of c(rows) over calls (+ h(rows) over head calls); with
    a table that measured shared planes, c(M; r) of each call's rows per plane."""
    call_ms = [ctable.call(len(c.rows), planes(c)) for c in schedule.calls]
    head_rows = head_row_counts(schedule)
    # fsum: exactly rounded, so equal multisets of row counts give equal ms in either order
    head_ms = math.fsum(head_table.c(n) for n in head_rows) if head_table is not None else 0.0
    recurrent_ms = math.fsum(call_ms)
    return {
        "total_ms": recurrent_ms + head_ms,
        "recurrent_ms": recurrent_ms,
        "head_ms": head_ms,
        "calls": len(call_ms),
        "rows": schedule.row_counts(),
        "call_ms": call_ms,
        "head_calls": len(head_rows),
        "head_rows": head_rows,
    }


def multiset_difference(a, b) -> tuple[dict[int, int], dict[int, int]]:
    """(a - b, b - a) as {value: multiplicity}, sorted by value."""
    ca, cb = Counter(a), Counter(b)
    return dict(sorted((ca - cb).items())), dict(sorted((cb - ca).items()))


def deciding_row_counts(token_counts, d, D, by_planes: bool = False) -> tuple[dict, dict]:
    """Row counts of block calls not matched by a loop wave, and of loop waves not matched by
    a block call ({M: multiplicity}; by_planes: {(M, P): multiplicity}, P the call's KV
    planes). Both sides have as many rows, and as many calls when the requests share (d, D)
    (ragged depths: the block round may run more calls), and

        block_ms - loop_ms = sum_block m*c(M) - sum_loop m*c(M).

    Head calls are not included: both rounds run the same head calls (the draft head after
    offset o's depth d-1 over the same requests, then one verification head), so they cancel.
    """
    counts = validate(token_counts, d, D)
    block = call_keys(plan("block", counts, d, D), by_planes)
    loop = call_keys(plan("loop", counts, d, D), by_planes)
    return multiset_difference(block, loop)


@dataclass(frozen=True)
class Inequality:
    """Loop wins iff sum_block m*[c(M)-c(base)] > sum_loop m*[c(M)-c(base)].

    block/loop are {M: m} with the base row count removed and multiplicities divided by
    `scale`, so block_ms - loop_ms = scale * (block side - loop side). base None (ragged
    depths with unequal call counts): the sides are plain sums of m*c(M). Keyed by planes,
    M is (rows, planes) throughout and reads c(M@P)."""

    base: int | tuple | None
    block: dict
    loop: dict
    scale: int

    def sides(self, c) -> tuple[float, float]:
        """(block side, loop side) in ms for a cost function c of a key (cost.key_cost)."""

        def side(terms):
            return sum(m * (c(M) - (0.0 if self.base is None else c(self.base))) for M, m in terms.items())

        return side(self.block), side(self.loop)

    def side_text(self, terms: dict[int, int], unit: str = "") -> str:
        """'4*[c(2C)-c(C)]' with unit='C' (row counts per request), '4*[c(8)-c(4)]' without."""

        def rows(M):
            if isinstance(M, tuple):  # (rows, planes)
                return rows(M[0]) if M[0] == M[1] else f"{rows(M[0])}@{rows(M[1])}"
            return unit if unit and M == 1 else f"{M}{unit}"

        if self.base is None:
            return " + ".join(f"c({rows(M)})" if m == 1 else f"{m}*c({rows(M)})" for M, m in terms.items()) or "0"
        base = rows(self.base)
        bare = len(terms) == 1  # brackets only where a term is scaled or summed
        parts = [
            f"c({rows(M)})-c({base})"
            if m == 1 and bare
            else f"{m}*[c({rows(M)})-c({base})]"
            if m > 1
            else f"[c({rows(M)})-c({base})]"
            for M, m in terms.items()
        ]
        return " + ".join(parts) or "0"

    def block_text(self, unit: str = "") -> str:
        return self.side_text(self.block, unit)

    def loop_text(self, unit: str = "") -> str:
        return self.side_text(self.loop, unit)

    def text(self, unit: str = "") -> str:
        """e.g. 'c(5C)-c(C) > 4*[c(2C)-c(C)]': loop wins iff this holds."""
        return f"{self.block_text(unit)} > {self.loop_text(unit)}"


def deciding_inequality(token_counts, d, D, by_planes: bool = False) -> Inequality | None:
    """The deciding inequality, or None when both rounds run the same row counts (uniform K=0
    or K=1: same predicted time for any c).

    The base is the smallest differing row count: both sides have equally many terms, so
    subtracting c(base) from each leaves the comparison unchanged and drops the base terms.
    For uniform counts T=K+1 over C requests (K >= 2) the base is C and this is
    (D-d)*[c(T*C)-c(C)] > sum_w [c(n_w*C)-c(C)] over the loop waves w (n_w cells each)."""
    block, loop = deciding_row_counts(token_counts, d, D, by_planes)
    if not block and not loop:
        return None
    if sum(block.values()) != sum(loop.values()):  # ragged depths: no common base to subtract
        scale = reduce(math.gcd, list(block.values()) + list(loop.values()), 0) or 1
        return Inequality(
            None, {M: m // scale for M, m in block.items()}, {M: m // scale for M, m in loop.items()}, scale
        )
    base = min(min(block), min(loop))
    block = {M: m for M, m in block.items() if M != base}
    loop = {M: m for M, m in loop.items() if M != base}
    scale = reduce(math.gcd, list(block.values()) + list(loop.values()), 0) or 1
    return Inequality(base, {M: m // scale for M, m in block.items()}, {M: m // scale for M, m in loop.items()}, scale)


def compare_rounds(token_counts, d, D, ctable: CTable, head_table: CTable | None = None) -> dict:
    """Predicted block and loop ms for one round, their ratio block/loop (> 1: loop faster),
    and the deciding row counts with both sides of the inequality in ms."""
    counts = validate(token_counts, d, D)
    block = predict(plan("block", counts, d, D), ctable, head_table)
    loop = predict(plan("loop", counts, d, D), ctable, head_table)
    by_planes = bool(ctable.shared)
    block_extra, loop_extra = deciding_row_counts(counts, d, D, by_planes)
    ineq = deciding_inequality(counts, d, D, by_planes)
    block_side, loop_side = ineq.sides(key_cost(ctable)) if ineq else (0.0, 0.0)
    diff = block["total_ms"] - loop["total_ms"]
    tie = abs(diff) <= 1e-12 * (block["total_ms"] + loop["total_ms"])
    return {
        "counts": list(counts),
        "d": d,
        "D": D,
        "block_ms": block["total_ms"],
        "loop_ms": loop["total_ms"],
        "ratio": block["total_ms"] / loop["total_ms"],
        "faster": "tie" if tie else ("loop" if diff > 0 else "block"),
        "block": block,
        "loop": loop,
        "block_extra": block_extra,
        "loop_extra": loop_extra,
        "by_planes": by_planes,
        "inequality": ineq,
        "block_side_ms": block_side,
        "loop_side_ms": loop_side,
    }


# ---- the FP32 judge's floor (judge_jax on one GPU) -----------------------------------------
# Peak rates of the GPUs the judge runs on. h200: NVIDIA H200 Tensor Core GPU datasheet, SXM
# column (nvidia.com/en-us/data-center/h200): GPU memory bandwidth 4.8 TB/s; FP32 67 TFLOPS
# (the non-tensor-core rate: the judge's matmuls run at Precision.HIGHEST, true FP32, no TF32).
GPU_PEAKS = {
    "h200": {
        "hbm_bytes_per_s": 4.8e12,
        "fp32_flops_per_s": 67e12,
        "what": "NVIDIA H200 SXM: HBM3e 4.8 TB/s, FP32 67 TFLOP/s (datasheet)",
    }
}
FP32_BYTES = 4


def judge_layer_params(cfg) -> int:
    """Weights one row multiplies through in one loop of the stack (all layers; no head)."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    q = H * cfg.num_heads * cfg.head_dim
    kv = H * cfg.num_kv_heads * cfg.head_dim
    return cfg.num_layers * (2 * q + 2 * kv + 3 * H * I + 4 * H)  # q, o, k, v, gate/up/down, 4 norms


def judge_round_floor(
    cfg, counts, context: int, d, D, mode: str = "block", K: int | None = None, gpu: str = "h200"
) -> dict:
    """Seconds an FP32 round of the judge cannot beat on `gpu`: per recurrent call (and head
    call) the roofline max(bytes / HBM bandwidth, FLOPs / FP32 rate), summed over the round.

    counts: the token counts T_i, or a request count C with K (every T_i = K + 1). context:
    the position of offset 0 (every request's committed tokens - 1), so the row at offset o
    attends to context + o + 1 keys. Per call:
      * weight bytes: every layer's matrices and norms once (judge_layer_params * 4 B);
      * KV bytes: each KV plane the call touches (one per request and depth) read once, up to
        the call's last row on it, all layers, K and V; plus the rows' own K/V writes;
      * FLOPs: 2 per weight per row, plus attention's 4 * keys * heads * head_dim per layer;
      * hidden states in and out (rows * H * 4 B each).
    A head call reads lm_head (H * V * 4 B) and does 2 * H * V FLOPs per row.
    Returns {"floor_s", "weights_s", "kv_s", "flops_s", "head_s", ...}: the *_s terms are each
    part alone at its peak rate, so floor_s <= weights_s + kv_s + flops_s + head_s."""
    if gpu not in GPU_PEAKS:
        raise OracleError(f"no peak rates for GPU {gpu!r} (known: {', '.join(GPU_PEAKS)})")
    peak = GPU_PEAKS[gpu]
    bw, rate = peak["hbm_bytes_per_s"], peak["fp32_flops_per_s"]
    if isinstance(counts, int) and not isinstance(counts, bool):
        if K is None:
            raise OracleError("judge_round_floor: a request count needs K (every T_i = K + 1)")
        counts = [K + 1] * counts
    s = plan(mode, validate(counts, d, D), d, D)
    L, H, V = cfg.num_layers, cfg.hidden_size, cfg.vocab_size
    kv_row = L * 2 * cfg.num_kv_heads * cfg.head_dim * FP32_BYTES  # one position's K and V, all layers
    weight_bytes = judge_layer_params(cfg) * FP32_BYTES
    attn_flops_per_key = 4 * cfg.num_heads * cfg.head_dim * L  # q.k and p.v, every layer
    out = {
        "gpu": gpu,
        "peaks": peak,
        "mode": mode,
        "calls": len(s.calls),
        "rows": sum(len(c.rows) for c in s.calls),
        "weight_bytes_per_call": weight_bytes,
        "weight_bytes": 0,
        "kv_bytes": 0,
        "flops": 0,
        "head_calls": 0,
        "head_bytes": 0,
        "head_flops": 0,
        "call_s": [],
    }
    floor = 0.0
    for c in s.calls:
        last: dict = {}  # plane -> keys read
        keys = 0
        for i, o, j in c.rows:
            n_keys = context + o + 1
            last[(i, j)] = max(last.get((i, j), 0), n_keys)
            keys += n_keys
        kv_bytes = sum(last.values()) * kv_row + len(c.rows) * kv_row
        flops = len(c.rows) * 2 * judge_layer_params(cfg) + keys * attn_flops_per_key
        moved = weight_bytes + kv_bytes + 2 * len(c.rows) * H * FP32_BYTES
        t = max(moved / bw, flops / rate)
        out["call_s"].append(t)
        floor += t
        out["weight_bytes"] += weight_bytes
        out["kv_bytes"] += kv_bytes
        out["flops"] += flops
    for n in head_row_counts(s):
        hb, hf = H * V * FP32_BYTES + n * (H + V) * FP32_BYTES, 2 * n * H * V
        floor += max(hb / bw, hf / rate)
        out["head_calls"] += 1
        out["head_bytes"] += hb
        out["head_flops"] += hf
    out.update(
        floor_s=floor,
        weights_s=out["weight_bytes"] / bw,
        kv_s=out["kv_bytes"] / bw,
        flops_s=out["flops"] / rate,
        head_s=max(out["head_bytes"] / bw, out["head_flops"] / rate),
    )
    return out
