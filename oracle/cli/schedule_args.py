"""Depth options: -d/-D of every round command, and the options of `schedule` and `cost`
(-d/-D or --depths and --allow-large of one planned round) with their resolution."""

from __future__ import annotations

from .argtypes import depth_pairs, int_at_least
from ..errors import OracleError


def add_depth_options(p) -> None:
    """-d/--draft-loops and -D/--target-loops (None: the command's default, 2 and 4)."""
    for short, long, meta, text in (
        ("-d", "--draft-loops", "d", "loops used to draft, 1 <= d < D (default: 2)"),
        ("-D", "--target-loops", "D", "loops used to verify (default: 4)"),
    ):
        p.add_argument(long, short, type=int_at_least(1), default=None, metavar=meta, help=text)


def add_schedule_options(p) -> None:
    """-d/-D, --depths and --allow-large of `schedule` and `cost` (one round, planned only)."""
    add_depth_options(p)
    p.add_argument(
        "--allow-large", action="store_true", help="lift the size limits on requests, token counts, D and schedule rows"
    )
    p.add_argument(
        "--depths",
        type=depth_pairs,
        default=None,
        metavar="d0:D0,d1:D1,...",
        help="per-request draft and target loops, one pair per request (replaces -d/-D)",
    )


def resolve_schedule_depths(args) -> None:
    """-d/-D defaults (2, 4) in place; -d/-D together with --depths is refused (idempotent)."""
    if args.depths is not None and (args.draft_loops is not None or args.target_loops is not None):
        raise OracleError("--depths gives every request its own d_i:D_i; do not combine it with -d/-D")
    if args.depths is None:
        args.draft_loops = 2 if args.draft_loops is None else args.draft_loops
        args.target_loops = 4 if args.target_loops is None else args.target_loops


def round_depths(args, counts) -> tuple:
    """(d, D) for the planner: two ints from -d/-D, or per-request lists from --depths."""
    resolve_schedule_depths(args)
    if args.depths is None:
        return args.draft_loops, args.target_loops
    if len(args.depths) != len(counts):
        raise OracleError(f"--depths gives {len(args.depths)} pairs for {len(counts)} requests (one d_i:D_i each)")
    return [d for d, _ in args.depths], [D for _, D in args.depths]


def max_depths(d, D) -> tuple[int, int]:
    """The largest d and D of a round (ints, or per-request lists from --depths)."""
    return (max(d) if isinstance(d, list) else d), (max(D) if isinstance(D, list) else D)
