"""`python -m oracle model`: run a prompt through every loop without KV cache and show the
last position's top tokens per loop; engine teams use it to see a checkpoint load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import limits
from .argtypes import add_optional, check_report_dir, command_parser, csv_ints, int_at_least
from ..errors import OracleError, printable
from ..checkpoint import build_model
from ..progress import warn


def check_model_args(args) -> None:
    """Everything checkable before the weights are built or read."""
    from ..config import preset

    if (args.preset is None) == (args.checkpoint is None):
        raise OracleError("give exactly one of --preset NAME or --checkpoint DIR")
    if args.save and args.checkpoint:
        raise OracleError("--save writes a preset's weights; it cannot be used with --checkpoint")
    if args.tokens is None:  # --save alone: no forward to run
        if not args.save:
            raise OracleError("give --tokens ID,ID,... (the prompt to run), or --save DIR to write a preset's weights")
        given = next((f for f, v in (("--loops", args.loops), ("--json", args.json)) if v), None)
        if given:
            raise OracleError(f"{given} shapes the forward of --tokens; without --tokens it has no effect: drop it")
    if args.save:
        target = Path(args.save)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise OracleError(f"--save {args.save}: already exists; give a new (or empty) folder")
        if not target.parent.is_dir():
            raise OracleError(f"--save {args.save}: folder {target.parent} does not exist")
        check_report_dir(args.save, "--save")  # a folder that takes files (/proc does not), tried before the work
    if args.checkpoint is not None:
        from ..checkpoint import read_config, weight_files

        cfg = read_config(args.checkpoint)
        weight_files(args.checkpoint)
    else:
        cfg = preset(args.preset)
    if args.tokens is None:
        return
    if not args.allow_large and len(args.tokens) > limits.MAX_PROMPT_TOKENS:
        limits.refuse("--tokens: prompt length", len(args.tokens), limits.MAX_PROMPT_TOKENS)
    bad = [t for t in args.tokens if not 0 <= t < cfg.vocab_size]
    if bad:
        raise OracleError(f"--tokens: token id {bad[0]} is outside the vocabulary 0..{cfg.vocab_size - 1}")
    loops = args.loops or cfg.total_loops
    if not args.allow_large and loops > limits.MAX_TARGET_LOOPS:
        limits.refuse("--loops", loops, limits.MAX_TARGET_LOOPS)
    if not args.allow_large:
        limits.refuse_slow(
            limits.forward_seconds(cfg, len(args.tokens), loops),
            f"{len(args.tokens)} tokens x {loops} loops on {cfg.num_layers} layers x hidden {cfg.hidden_size}",
        )
    if loops > cfg.total_loops:
        warn(f"--loops {loops} is beyond the {cfg.total_loops} loops the model was trained with (total_ut_steps)")


def run(args) -> int:
    """Runs after check_model_args (the preflight in cli.main)."""
    model = build_model(args.preset, args.seed, args.checkpoint)
    if args.save:
        from ..checkpoint import save_checkpoint

        save_checkpoint(args.save, model.cfg, model.weights)
        if args.tokens is None:
            print(f"saved checkpoint to {printable(args.save)}")
            return 0
    loops = args.loops or model.cfg.total_loops
    per_loop = model.forward_full(args.tokens, loops)  # per loop: [T, V]
    if args.json:
        print(json.dumps({"loops": [{"depth": j, "logits": lg[-1].tolist()} for j, lg in enumerate(per_loop)]}))
        return 0
    src = printable(args.checkpoint) if args.checkpoint else f"preset {args.preset} (seed {args.seed})"
    n, s = len(args.tokens), lambda k: "s" if k != 1 else ""
    print(f"{src}: {n} token{s(n)}, {loops} loop{s(loops)}, vocab {model.cfg.vocab_size}")
    for j, lg in enumerate(per_loop):
        x = lg[-1].astype(np.float64)
        p = np.exp(x - x.max())
        p /= p.sum()
        top = np.argsort(-p, kind="stable")[:5]
        print(f"  depth {j}: " + "  ".join(f"{int(t)}:{p[t]:.4f}" for t in top))
    if args.save:
        print(f"saved checkpoint to {printable(args.save)}")
    return 0


def register(sub) -> None:
    p = command_parser(
        sub,
        "model",
        "Run a prompt through every loop without KV cache and print the last "
        "position's top-5 tokens per loop; load a checkpoint or save a preset's "
        "weights as one.",
    )
    add_optional(p, "--preset", "model preset: tiny | small | ouro-1.4b (default: none; give this or --checkpoint)")
    add_optional(p, "--checkpoint", "HF-style folder: config.json + *.safetensors (default: none)", metavar="DIR")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="weights seed of a preset")
    tokens = "prompt token ids, e.g. 1,2,3 (required unless --save alone writes a checkpoint)"
    add_optional(p, "--tokens", tokens, csv_ints, "ID,ID,...")
    add_optional(p, "--loops", "loops to run (default: the config's total_ut_steps)", int_at_least(1))
    save = "with --preset: write the weights as a checkpoint into this new folder (default: none)"
    add_optional(p, "--save", save, metavar="DIR")
    p.add_argument("--allow-large", action="store_true", help="lift the size limits (prompt length, loops)")
    p.add_argument("--json", action="store_true", help="print the last position's logits per loop as JSON")
    p.set_defaults(func=run, preflight=check_model_args)
