"""The round options' parser: `add_round_options`, shared by `check`, `trace record` and
`localize`; oracle/cli/round_args.py checks them (`check_round_args`, their preflight)."""

from __future__ import annotations

from .argtypes import add_optional, csv_ints, depth_pairs, finite_float, int_at_least
from .round_args import check_round_args
from .schedule_args import add_depth_options
from .step_options import add_filter_options, add_processor_options


def add_round_options(p) -> None:
    """Options shared by `check` and `trace record`; check_round_args checks them before any work.
    In the order --help lists them."""
    add_optional(p, "--preset", "model preset: tiny | small | ouro-1.4b (default: tiny unless --checkpoint is given)")
    add_optional(p, "--checkpoint", "HF-style checkpoint folder instead of a preset (default: none)", metavar="DIR")
    p.add_argument(
        "--seed",
        type=int_at_least(0),
        default=0,
        help="weights seed (presets) and base request seed (request i uses seed+i)",
    )
    add_optional(
        p,
        "--counts",
        "token counts T_i = K_i + 1 per request per round, e.g. 5,3,1 "
        "(default: the built-in cases; with other round options 5,3,1)",
        csv_ints,
        "T0,T1,...",
    )
    add_depth_options(p)
    add_optional(
        p,
        "--temperature",
        "0 = greedy (default: a mixed batch, even requests greedy and odd ones at 1.0)",
        finite_float,
    )
    add_filter_options(p)
    add_optional(p, "--rounds", "rounds of generation (default: 4)", int_at_least(1))
    p.add_argument("--policy", default=None, choices=("sequential", "fixed"), help="RNG policy (default: sequential)")
    depths = "per-request draft:target loops, one pair per request (replaces -d/-D; default: none)"
    add_optional(p, "--depths", depths, depth_pairs, "d0:D0,...")
    stop = "stop token ids of every request; emission ends after the first, kept (default: none)"
    add_optional(p, "--stop-tokens", stop, csv_ints, "ID,...")
    add_optional(p, "--max-tokens", "tokens each request may generate in all (default: unlimited)", int_at_least(1))
    banned = "token ids masked to -inf in draft and verification logits (default: none)"
    add_optional(p, "--banned-tokens", banned, csv_ints, "ID,...")
    add_processor_options(p)
    add_optional(
        p, "--prompt-len", "prompt length of every request (default: random 1..8 drawn from the seed)", int_at_least(1)
    )
    add_optional(
        p, "--case", "run one built-in case by name (see the reproduce lines; default: all of them)", metavar="NAME"
    )
    p.add_argument(
        "--allow-large",
        action="store_true",
        help="lift the size limits of oracle/cli/limits.py (runs may then take minutes or hours)",
    )
    p.set_defaults(preflight=check_round_args)
    if not p.description:  # `check` (its register() gives none)
        p.description = (
            "Run the block and loop rounds on the FP32 reference, for the built-in cases or the "
            "case the round options describe, and compare them bit for bit. Exit 0 all equal, "
            "1 a check failed, 2 bad usage or input, 3 internal error."
        )
