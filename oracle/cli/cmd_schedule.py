"""`python -m oracle schedule`: print the block and loop schedules of one round.

Text: per request a grid of offsets (lines) against calls/waves (columns); a cell holds the
depth that row runs in that call, `*` when the draft head runs on it after the call.
`--json`: one object {"block": Schedule.to_json(), "loop": Schedule.to_json()}.
"""

from __future__ import annotations

import json

from . import limits
from .argtypes import command_parser, csv_ints
from .schedule_args import add_schedule_options, max_depths, round_depths
from ..schedule import Schedule, check_schedule, plan, validate


def register(subparsers) -> None:
    p = command_parser(subparsers, "schedule", "Print the block and loop schedules of one speculative round.")
    p.add_argument(
        "--counts",
        type=csv_ints,
        required=True,
        metavar="T0,T1,...",
        help="token count T_i = K_i + 1 per request, e.g. 5,3,1 (required)",
    )
    add_schedule_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the diagram")
    p.set_defaults(func=run, preflight=check_schedule_args)


def check_schedule_args(args) -> None:
    """Sizes and d/D before any planning."""
    d, D = round_depths(args, args.counts)
    dmax, Dmax = max_depths(d, D)
    limits.check_counts(args.counts, Dmax, args.allow_large)
    validate(args.counts, d, D)
    limits.check_schedule_size(args.counts, dmax, Dmax, args.allow_large, diagram=not args.json)


def run(args) -> int:
    d, D = round_depths(args, args.counts)
    counts = validate(args.counts, d, D)
    rounds = {mode: plan(mode, counts, d, D) for mode in ("block", "loop")}
    for s in rounds.values():
        check_schedule(s)
    if args.json:
        print(json.dumps({mode: s.to_json() for mode, s in rounds.items()}))
    else:
        print("\n\n".join(diagram(s) for s in rounds.values()))
    return 0


def totals(s: Schedule) -> dict:
    heads = [n for n in s.draft_head_counts() if n]
    return {
        "recurrent_calls": len(s.calls),
        "rows": sum(s.row_counts()),
        "draft_head_rows": sum(heads),
        "draft_head_calls": len(heads),
        "verify_head_rows": len(s.verify_head),
    }


def diagram(s: Schedule) -> str:
    """Offsets x calls grid per request, then rows per call and totals."""
    n = len(s.calls)
    cell: dict[tuple[int, int], dict[int, str]] = {}  # (request, offset) -> {call: "depth[*]"}
    for c, call in enumerate(s.calls):
        heads = set(call.draft_head)
        for i, o, j in call.rows:
            cell.setdefault((i, o), {})[c] = f"{j}*" if (i, o) in heads else str(j)
    rows, heads = s.row_counts(), s.draft_head_counts()
    width = 1 + max(len(str(n - 1)), len(str(max(D for _, D in s.depths) - 1)) + 1, len(str(max(rows))))
    label = 18

    def line(name: str, values) -> str:
        return name.ljust(label) + "".join(str(v).rjust(width) for v in values)

    unit = "call" if s.mode == "block" else "wave"
    depths = f"d={s.d}, D={s.D}" if s.d is not None else "depths " + ",".join(f"{a}:{b}" for a, b in s.depths)
    out = [
        f"{s.mode} round: counts T={list(s.token_counts)}, {depths}  "
        f"(cell = depth run in that {unit}; * = draft head runs on it after the {unit})",
        line(unit, range(n)),
    ]
    for i, t in enumerate(s.token_counts):
        out.append(
            f"request {i} (T={t})"
            if s.d is not None
            else f"request {i} (T={t}, d={s.depths[i][0]}, D={s.depths[i][1]})"
        )
        for o in range(t):
            got = cell.get((i, o), {})
            out.append(line(f"  offset {o}", (got.get(c, ".") for c in range(n))))
    out.append(line("rows", rows))
    out.append(line("draft head rows", (h if h else "." for h in heads)))
    t = totals(s)
    out.append(
        f"totals: {t['recurrent_calls']} recurrent calls, {t['rows']} rows, "
        f"{t['draft_head_rows']} draft head rows in {t['draft_head_calls']} head calls, "
        f"{t['verify_head_rows']} verification head rows in 1 head call"
    )
    return "\n".join(out)
