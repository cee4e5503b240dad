"""The round options shared by `check` and `trace record` (added by
oracle.cmd_check.add_round_options): their defaults, their checks before any work, and the
command line that reproduces a run.

`check_round_args(args)` runs in cli.main before the command (argparse `preflight` default):
it resolves defaults, refuses bad or contradictory values and sizes beyond oracle.limits,
and warns about values that are legal but suspicious.
"""
from __future__ import annotations

import os
import shlex

from . import limits
from .config import ModelConfig, preset
from .errors import OracleError
from .progress import warn
from .rng_trace import check_policy
from .schedule import validate

# option dest -> default; None in the parser so an explicit value can be told apart
DEFAULTS = {"draft_loops": 2, "target_loops": 4, "rounds": 4, "policy": "sequential"}
ROUND_SHAPE = ("counts", "temperature", "top_k", "top_p", "prompt_len", "draft_loops", "target_loops",
               "rounds", "policy", "depths", "stop_tokens", "max_tokens", "banned_tokens", "min_p")
DEFAULT_COUNTS = [5, 3, 1]


def model_config(args) -> ModelConfig:
    """The config of --checkpoint (config.json only) or of --preset."""
    if args.checkpoint is not None:
        from .checkpoint import read_config, weight_files
        cfg = read_config(args.checkpoint)
        weight_files(args.checkpoint)              # index and shards present before any work
        return cfg
    return preset(args.preset)


def check_round_args(args) -> None:
    """Resolve and check the round options in place (idempotent)."""
    if getattr(args, "round_args_checked", False):
        return
    if args.checkpoint is not None and args.preset is not None:
        raise OracleError("give --preset NAME or --checkpoint DIR, not both (a checkpoint has its own shape)")
    explicit = [k for k in ROUND_SHAPE if getattr(args, k) is not None]
    if args.case is not None and explicit:
        raise OracleError(f"--case {args.case} runs a built-in case as it is; do not combine it with "
                          f"--{explicit[0].replace('_', '-')}")
    if args.checkpoint is None and args.preset is None:
        args.preset = "tiny"
    for k, v in DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    cfg = model_config(args)
    recording = hasattr(args, "mode")               # trace record: one mode, no cache-free recompute
    if args.case is not None or not explicit:       # built-in cases: one named, or all of them (check)
        from .check import default_cases
        cases = default_cases(cfg.vocab_size)
        if args.case is not None:
            if args.case not in [c.name for c in cases]:
                raise OracleError(f"--case {args.case!r}: unknown (known: {'; '.join(c.name for c in cases)})")
            cases = [c for c in cases if c.name == args.case]
        if args.case is not None or not recording:
            limits.check_cases_work(cfg, cases, args.allow_large, check=not recording)
            args.round_args_checked = True
            return
    check_policy(args.policy)
    counts = DEFAULT_COUNTS if args.counts is None else args.counts
    if args.depths is not None:
        if len(args.depths) != len(counts):
            raise OracleError(f"--depths gives {len(args.depths)} pairs for {len(counts)} requests (one d_i:D_i each)")
        validate(counts, [a for a, _ in args.depths], [b for _, b in args.depths])
        args.draft_loops, args.target_loops = min(a for a, _ in args.depths), max(b for _, b in args.depths)
    limits.check_counts(counts, args.target_loops, args.allow_large)
    validate(counts, args.draft_loops, args.target_loops)
    for flag, ids in (("--stop-tokens", args.stop_tokens), ("--banned-tokens", args.banned_tokens)):
        bad = [t for t in ids or () if not 0 <= t < cfg.vocab_size]
        if bad:
            raise OracleError(f"{flag}: token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})")
    if args.temperature is not None and args.temperature < 0:
        raise OracleError(f"--temperature {args.temperature}: must be >= 0 (0 = greedy)")
    if args.temperature == 0 and (args.top_k is not None or args.top_p is not None):
        warn("--top-k/--top-p have no effect with --temperature 0 (greedy)")
    if args.top_k is not None and args.top_k > cfg.vocab_size:
        warn(f"--top-k {args.top_k} is above the vocabulary size {cfg.vocab_size}: it keeps every token")
    if args.target_loops > cfg.total_loops:
        warn(f"-D {args.target_loops} is beyond the {cfg.total_loops} loops the model was trained with "
             f"(total_ut_steps); its logits past depth {cfg.total_loops - 1} are extrapolation")
    plen = args.prompt_len if args.prompt_len is not None else 8
    limits.check_work(cfg, counts, args.target_loops, args.rounds, plen, args.allow_large, check=not recording)
    args.round_args_checked = True


def model_flags(args) -> list[str]:
    """--checkpoint ABSPATH or --preset NAME, then --seed."""
    where = ["--checkpoint", os.path.abspath(args.checkpoint)] if args.checkpoint is not None \
        else ["--preset", args.preset or "tiny"]
    return where + ["--seed", str(args.seed)]


def round_flags(args, counts) -> list[str]:
    """Every option that shapes a custom case, in a fixed order."""
    out = ["--counts", ",".join(map(str, counts))]
    out += ["--depths", ",".join(f"{a}:{b}" for a, b in args.depths)] if args.depths is not None else \
        ["-d", str(args.draft_loops), "-D", str(args.target_loops)]
    out += ["--rounds", str(args.rounds), "--policy", args.policy]
    for flag, value in (("--prompt-len", args.prompt_len), ("--temperature", args.temperature),
                        ("--top-k", args.top_k), ("--top-p", args.top_p), ("--max-tokens", args.max_tokens),
                        ("--min-p", args.min_p)):
        if value is not None:
            out += [flag, repr(value)]
    for flag, ids in (("--stop-tokens", args.stop_tokens), ("--banned-tokens", args.banned_tokens)):
        if ids:
            out += [flag, ",".join(map(str, ids))]
    if args.allow_large:
        out.append("--allow-large")
    return out


def command(words: list[str]) -> str:
    return shlex.join(["python", "-m", "oracle", *words])
