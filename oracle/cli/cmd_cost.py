"""`python -m oracle cost`: predicted block vs loop round time from a c-table.

Uniform rounds: `--k K --batch 1,4,16` (C requests with K drafts each, one line per C);
ragged: `--counts 5,3,1` (token counts T_i = K_i + 1), with `--depths 2:4,1:3,...` for
per-request depths (the two rounds may then run different numbers of calls, and the
deciding inequality compares plain sums). Ratio = block/loop (> 1: loop faster).
"""

from __future__ import annotations

import json

from . import limits
from .argtypes import add_optional, command_parser, csv_ints, int_at_least
from .schedule_args import add_schedule_options, max_depths, resolve_schedule_depths, round_depths
from ..cost import compare_rounds, deciding_inequality, key_cost, planes
from ..ctable import DEFAULT_GPU, SHIPPED, load_ctable
from ..errors import OracleError, printable
from ..schedule import plan, validate

DEFAULT_BATCH = [1, 4, 8, 16, 32, 64, 128]


def register(subparsers) -> None:
    p = command_parser(subparsers, "cost", "Predict block and loop round times from a measured c(M) table.")
    p.add_argument(
        "--ctable",
        default=None,
        metavar="FILE",
        help='c-table JSON {"c_ms": {"1": ms, ...}} (default: the shipped whole-call tables of '
        "--gpu, c(M) and the head table h(M))",
    )
    p.add_argument(
        "--gpu",
        default=None,
        choices=tuple(SHIPPED),
        help=f"whose shipped tables to use when no --ctable is given (default: {DEFAULT_GPU})",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="use a c-table the bench marked noisy, or whose c(M) drops by more than 25%%",
    )
    p.add_argument("--k", type=int_at_least(0), default=None, metavar="K", help="drafts per request (default: 4)")
    batch = f"concurrencies C (default: {','.join(map(str, DEFAULT_BATCH))})"
    add_optional(p, "--batch", batch, csv_ints, "C,...")
    counts = "ragged round: token count T_i = K_i + 1 per request (instead of --k/--batch; default: none)"
    add_optional(p, "--counts", counts, csv_ints, "T0,T1,...")
    add_schedule_options(p)
    p.add_argument(
        "--head-ctable",
        default=None,
        metavar="FILE",
        help="h(M) table for head calls (draft heads and the verification head); default: the "
        "shipped head table of --gpu when no --ctable is given, none (head costs left out) with "
        "--ctable",
    )
    p.add_argument("--json", action="store_true", help='print {"rows": [...]} as JSON')
    p.set_defaults(func=run, preflight=check_cost_args)


def check_cost_args(args) -> None:
    """Options and sizes before any table is read."""
    resolve_schedule_depths(args)
    if args.gpu is not None and args.ctable is not None:
        raise OracleError("--gpu picks the shipped tables; do not combine it with --ctable")
    if args.counts is None and args.k is not None and not args.allow_large and args.k + 1 > limits.MAX_TOKEN_COUNT:
        limits.refuse("--k: drafts per request K", args.k, limits.MAX_TOKEN_COUNT - 1)  # --k's name, not --counts'
    if args.batch and args.counts is None and not args.allow_large:  # before the rounds are built
        rows = max(args.batch) * ((4 if args.k is None else args.k) + 1) * (args.target_loops or 4)
        if rows > limits.MAX_SCHEDULE_ROWS:
            limits.refuse("schedule size C*(K+1)*D =", rows, limits.MAX_SCHEDULE_ROWS, " rows")
    todo = rounds(args)
    for _, counts in todo:
        d, D = round_depths(args, counts)
        dmax, Dmax = max_depths(d, D)
        limits.check_counts([max(counts)], Dmax, args.allow_large)  # T_i and D (cost is cheap in C)
        validate(counts, d, D)
        limits.check_schedule_size(counts, dmax, Dmax, args.allow_large)


def rounds(args) -> list[tuple[int | None, list[int]]]:
    """[(batch C or None, token counts)] to compare."""
    if args.depths is not None and args.counts is None:
        raise OracleError("--depths gives one d_i:D_i pair per request: use it with --counts")
    if args.counts is not None:
        if args.k is not None or args.batch is not None:
            raise OracleError("--counts gives the whole round; do not combine it with --k or --batch")
        return [(None, args.counts)]
    K = 4 if args.k is None else args.k
    batch = DEFAULT_BATCH if args.batch is None else args.batch
    if K < 0:
        raise OracleError(f"K={K}: drafts per request must be >= 0")
    if not batch:
        raise OracleError("--batch is empty: give at least one concurrency C >= 1")
    for C in batch:
        if C < 1:
            raise OracleError(f"batch C={C}: concurrency must be >= 1")
    return [(C, [K + 1] * C) for C in batch]


def run(args) -> int:
    todo = rounds(args)
    d, D = round_depths(args, todo[0][1])  # ints, or per-request lists from --depths
    validate(todo[0][1], d, D)  # bad d/D/counts: say so before any table lookups
    ctable_path, head_path = tables(args)
    ctable = load_ctable(ctable_path, force=args.force)
    heads = load_ctable(head_path, "head table", force=args.force) if head_path else None
    results = []
    for C, counts in todo:
        try:
            results.append((C, compare_rounds(counts, d, D, ctable, heads)))
        except OracleError as e:
            raise OracleError(f"C={C}: {e}" if C is not None else str(e)) from None
    if args.json:
        print(
            json.dumps(
                {
                    "ctable": ctable_path,
                    "head_ctable": head_path,
                    "shipped": args.ctable is None,
                    "gpu": (args.gpu or DEFAULT_GPU) if args.ctable is None else None,
                    "rows": [json_row(C, r) for C, r in results],
                }
            )
        )
    else:
        print("\n".join(map(printable, report(args, ctable, heads, results).split("\n"))))  # file names escaped
    return 0


def tables(args) -> tuple[str, str | None]:
    """(c-table path, head table path or None): --ctable/--head-ctable, else the shipped
    whole-call tables of --gpu (both)."""
    if args.ctable is not None:
        return args.ctable, args.head_ctable
    shipped = SHIPPED[args.gpu or DEFAULT_GPU]
    return shipped_name(shipped["ctable"]), args.head_ctable or shipped_name(shipped["head"])


def shipped_name(path) -> str:
    """oracle/data/NAME: a shipped table as the report names it (an absolute path if the
    package is installed elsewhere)."""
    from pathlib import Path

    rel = Path("oracle") / "data" / Path(path).name
    return str(rel) if rel.resolve() == Path(path).resolve() else str(path)


def key_text(M) -> str:
    """A deciding key as JSON text: "20" (rows) or "20@4" (rows on KV planes)."""
    if isinstance(M, tuple):
        return str(M[0]) if M[0] == M[1] else f"{M[0]}@{M[1]}"
    return str(M)


def json_row(C, r) -> dict:
    ineq = r["inequality"]
    return {
        "batch": C,
        "block_ms": r["block_ms"],
        "loop_ms": r["loop_ms"],
        "ratio": r["ratio"],
        "faster": r["faster"],
        "counts": r["counts"],
        "d": r["d"],
        "D": r["D"],
        "block_recurrent_ms": r["block"]["recurrent_ms"],
        "block_head_ms": r["block"]["head_ms"],
        "loop_recurrent_ms": r["loop"]["recurrent_ms"],
        "loop_head_ms": r["loop"]["head_ms"],
        "recurrent_calls": r["block"]["calls"],
        "loop_recurrent_calls": r["loop"]["calls"],
        "block_rows": r["block"]["rows"],
        "loop_rows": r["loop"]["rows"],
        "block_extra_rows": {key_text(M): m for M, m in r["block_extra"].items()},
        "loop_extra_rows": {key_text(M): m for M, m in r["loop_extra"].items()},
        "by_planes": r["by_planes"],
        "deciding": None
        if ineq is None
        else {
            "inequality": ineq.text(),
            "base_rows": None if ineq.base is None else key_text(ineq.base),
            "scale": ineq.scale,
            "block_side": {key_text(M): m for M, m in ineq.block.items()},
            "loop_side": {key_text(M): m for M, m in ineq.loop.items()},
            "block_side_ms": r["block_side_ms"],
            "loop_side_ms": r["loop_side_ms"],
        },
    }


def side_numbers(terms: dict[int, int], c, base: int) -> str:
    """'4*0.0032 = 0.0128' for one term, '0.0012 + 2*0.0030 = 0.0072' for several."""
    cb = 0.0 if base is None else c(base)  # base None: ragged depths, plain sums
    parts = [f"{c(M) - cb:.4f}" if m == 1 else f"{m}*{c(M) - cb:.4f}" for M, m in terms.items()]
    total = sum(m * (c(M) - cb) for M, m in terms.items())
    return parts[0] if parts == [f"{total:.4f}"] else f"{' + '.join(parts) or '0'} = {total:.4f}"


def report(args, ctable, heads, results) -> str:
    d, D = round_depths(args, results[0][1]["counts"])
    device = (ctable.meta or {}).get("device")
    gpu = args.gpu or DEFAULT_GPU
    where = (
        args.ctable
        if args.ctable is not None
        else f"{tables(args)[0]} (shipped default for --gpu {gpu}: {SHIPPED[gpu]['what']})"
    )
    out = [
        f"c-table: {where}"
        + (f", {device}" if device and args.ctable is not None else "")
        + f", measured M = {ctable.rows[0]}..{ctable.rows[-1]}"
    ]
    if ctable.shared:
        out.append(
            "  with rows sharing KV planes: r = "
            + ", ".join(f"{r} (M = {t.rows[0]}..{t.rows[-1]})" for r, t in ctable.shared)
            + " rows per plane; c(M@P) = M rows on P planes"
        )
    if heads is not None:
        shipped = " (shipped default)" if args.head_ctable is None else ""
        out.append(f"head table: {tables(args)[1]}{shipped}, measured M = {heads.rows[0]}..{heads.rows[-1]}")
    else:
        out.append("head costs: not included (no --head-ctable); they are the same in both rounds")
    first = results[0][1]
    if results[0][0] is not None:  # uniform: state the condition in units of C
        K = first["counts"][0] - 1
        out.append(
            f"round: K={K} drafts per request, d={d}, D={D}: {first['block']['calls']} recurrent calls "
            f"and {sum(first['block']['rows'])}C rows in both rounds"
        )
        out.append(f"  block rows per call: {rows_in_c(first['block']['rows'], results[0][0])}")
        out.append(f"  loop rows per wave:  {rows_in_c(first['loop']['rows'], results[0][0])}")
        ineq = deciding_inequality([K + 1], d, D, bool(ctable.shared))
        out.append(
            f"loop beats block iff {ineq.text('C')}"
            if ineq
            else "both rounds run the same row counts: the same time for any c"
        )
    else:
        if args.depths is None:
            out.append(
                f"round: counts T={first['counts']}, d={d}, D={D}: {first['block']['calls']} recurrent calls "
                f"and {sum(first['block']['rows'])} rows in both rounds"
            )
        else:
            out.append(
                f"round: counts T={first['counts']}, depths {','.join(f'{a}:{b}' for a, b in args.depths)}: "
                f"block {first['block']['calls']} recurrent calls, loop {first['loop']['calls']}, "
                f"{sum(first['block']['rows'])} rows in both rounds"
            )
        out.append(f"  block rows per call: {first['block']['rows']}")
        out.append(f"  loop rows per wave:  {first['loop']['rows']}")
    shares = any(len(c.rows) > planes(c) for c in plan("block", first["counts"], d, D).calls)
    if shares and not ctable.shared and args.ctable is not None:  # the shipped table has no attention
        out.append(
            "note: this c-table has no c_ms_shared, so the block round's verification calls (several rows "
            "per KV plane) are priced as if every row had its own plane (docs/cost_model.md)"
        )
    out.append("ratio = block ms / loop ms (> 1: loop faster)")
    return "\n".join(out + result_table(ctable, results))


def result_table(ctable, results) -> list[str]:
    """The report's table: a blank line, the header, then per C the predicted ms, the ratio and
    the deciding inequality in ms."""
    out = ["", f"{'C':>6} {'block ms':>10} {'loop ms':>10} {'ratio':>7}  {'faster':<6}  deciding (ms)"]
    for C, r in results:
        ineq = r["inequality"]
        if ineq is None:
            why = "same row counts in both rounds"
        else:
            c, base = key_cost(ctable), ineq.base
            rel = (
                ">"
                if r["block_side_ms"] > r["loop_side_ms"]
                else ("<" if r["block_side_ms"] < r["loop_side_ms"] else "=")
            )
            why = (
                f"{ineq.block_text()} {rel} {ineq.loop_text()}: "
                f"{side_numbers(ineq.block, c, base)} {rel} {side_numbers(ineq.loop, c, base)}"
            )
        label = "-" if C is None else str(C)
        out.append(
            f"{label:>6} {r['block_ms']:>10.4f} {r['loop_ms']:>10.4f} {r['ratio']:>7.3f}  {r['faster']:<6}  {why}"
        )
    return out


def rows_in_c(rows: list[int], C: int) -> str:
    """[4, 4, 8] at C=4 -> 'C C 2C' (uniform rounds: every call is a multiple of C)."""
    return " ".join("C" if n == C else f"{n // C}C" for n in rows)
