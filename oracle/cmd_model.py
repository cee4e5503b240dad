"""`python -m oracle model`: run a prompt through every loop without KV cache and show the
last position's top tokens per loop; engine teams use it to see a checkpoint load."""
from __future__ import annotations

import json

import numpy as np

from .cli import csv_ints
from .errors import OracleError
from .model import build_model


def run(args) -> int:
    if (args.preset is None) == (args.checkpoint is None):
        raise OracleError("give exactly one of --preset NAME or --checkpoint DIR")
    if args.save and args.checkpoint:
        raise OracleError("--save writes a preset's weights; it cannot be used with --checkpoint")
    if not args.tokens:
        raise OracleError("--tokens is empty")
    model = build_model(args.preset, args.seed, args.checkpoint)
    if args.save:
        from .checkpoint import save_checkpoint
        save_checkpoint(args.save, model.cfg, model.weights)
    loops = args.loops or model.cfg.total_loops
    if loops < 1:
        raise OracleError(f"--loops {loops}: must be >= 1")
    per_loop = model.forward_full(args.tokens, loops)               # per loop: [T, V]
    if args.json:
        print(json.dumps({"loops": [{"depth": j, "logits": lg[-1].tolist()} for j, lg in enumerate(per_loop)]}))
        return 0
    src = args.checkpoint or f"preset {args.preset} (seed {args.seed})"
    print(f"{src}: {len(args.tokens)} tokens, {loops} loops, vocab {model.cfg.vocab_size}")
    for j, lg in enumerate(per_loop):
        x = lg[-1].astype(np.float64)
        p = np.exp(x - x.max())
        p /= p.sum()
        top = np.argsort(-p, kind="stable")[:5]
        print(f"  depth {j}: " + "  ".join(f"{int(t)}:{p[t]:.4f}" for t in top))
    if args.save:
        print(f"saved checkpoint to {args.save}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("model", help="run a prompt through every loop (no KV cache); load or save checkpoints")
    p.add_argument("--preset", default=None)
    p.add_argument("--checkpoint", default=None, help="HF-style folder: config.json + *.safetensors")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokens", type=csv_ints, required=True, help="prompt token ids, e.g. 1,2,3")
    p.add_argument("--loops", type=int, default=None, help="loops to run (default: the config's total)")
    p.add_argument("--save", default=None, help="with --preset: write the weights as a checkpoint folder")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
