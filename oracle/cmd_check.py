"""`python -m oracle check`: block vs loop on the reference, bit for bit."""
from __future__ import annotations

import json
import time

from .check import check_case, default_cases, make_case
from .cli import csv_ints
from .cmd_schedule import depth_pairs
from .errors import OracleError
from .model import build_model
from .rng_trace import check_policy
from .schedule import validate
from .sampling import SamplingParams


def add_round_options(p) -> None:
    """Options shared by `check` and `trace record`; checked by oracle.round_args before any work."""
    from .cli import csv_ints, finite_float, int_at_least, probability
    from .cmd_schedule import depth_pairs
    from .round_args import check_round_args
    p.add_argument("--preset", default=None, help="model preset: tiny | small | ouro-1.4b (default: tiny "
                   "unless --checkpoint is given)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="HF-style checkpoint folder instead of a preset (default: none)")
    p.add_argument("--seed", type=int_at_least(0), default=0,
                   help="weights seed (presets) and base request seed (request i uses seed+i)")
    p.add_argument("--counts", type=csv_ints, default=None, metavar="T0,T1,...",
                   help="token counts T_i = K_i + 1 per request per round, e.g. 5,3,1 "
                        "(default: the built-in cases; with other round options 5,3,1)")
    p.add_argument("--draft-loops", "-d", type=int_at_least(1), default=None, metavar="d",
                   help="loops used to draft, 1 <= d < D (default: 2)")
    p.add_argument("--target-loops", "-D", type=int_at_least(1), default=None, metavar="D",
                   help="loops used to verify (default: 4)")
    p.add_argument("--temperature", type=finite_float, default=None,
                   help="0 = greedy (default: a mixed batch, even requests greedy and odd ones at 1.0)")
    p.add_argument("--top-k", type=int_at_least(1), default=None, help="keep the k most likely tokens (default: off)")
    p.add_argument("--top-p", type=probability, default=None, help="nucleus mass in (0, 1] (default: off)")
    p.add_argument("--rounds", type=int_at_least(1), default=None, help="rounds of generation (default: 4)")
    p.add_argument("--policy", default=None, choices=("sequential", "fixed"),
                   help="RNG policy (default: sequential)")
    p.add_argument("--depths", type=depth_pairs, default=None, metavar="d0:D0,...",
                   help="per-request draft:target loops, one pair per request (replaces -d/-D; default: none)")
    p.add_argument("--stop-tokens", type=csv_ints, default=None, metavar="ID,...",
                   help="stop token ids of every request; emission ends after the first, kept (default: none)")
    p.add_argument("--max-tokens", type=int_at_least(1), default=None,
                   help="tokens each request may generate in all (default: unlimited)")
    p.add_argument("--banned-tokens", type=csv_ints, default=None, metavar="ID,...",
                   help="token ids masked to -inf in draft and verification logits (default: none)")
    p.add_argument("--min-p", type=probability, default=None,
                   help="min-p filter, vLLM's p >= min_p * max p after temperature (default: off)")
    p.add_argument("--prompt-len", type=int_at_least(1), default=None,
                   help="prompt length of every request (default: random 1..8 drawn from the seed)")
    p.add_argument("--case", default=None, metavar="NAME",
                   help="run one built-in case by name (see the reproduce lines; default: all of them)")
    p.add_argument("--allow-large", action="store_true",
                   help="lift the size limits of oracle/limits.py (runs may then take minutes or hours)")
    p.set_defaults(preflight=check_round_args)
    if not p.description:          # `check` (its register() gives none)
        p.description = ("Run the block and loop rounds on the FP32 reference, for the built-in cases or the "
                         "case the round options describe, and compare them bit for bit. Exit 0 all equal, "
                         "1 a check failed, 2 bad usage or input, 3 internal error.")


def custom_case(args):
    """The case described by --counts and friends, or the built-in case named by --case; its
    reproduce line is the exact command that regenerates it."""
    from .round_args import check_round_args, command, model_config, model_flags, round_flags
    check_round_args(args)
    cfg = model_config(args)
    if args.case is not None:
        return next(c for c in default_cases(cfg.vocab_size, model_flags(args)) if c.name == args.case)
    counts = args.counts or [5, 3, 1]
    depths = args.depths
    if depths is not None:                           # the session's (d, D): KV planes for max D_i
        if len(depths) != len(counts):
            raise OracleError(f"--depths gives {len(depths)} pairs for {len(counts)} requests (one d_i:D_i each)")
        validate(counts, [a for a, _ in depths], [b for _, b in depths])
        args.draft_loops, args.target_loops = min(a for a, _ in depths), max(b for _, b in depths)
    stops = {"stop_token_ids": tuple(args.stop_tokens or ()), "max_tokens": args.max_tokens,
             "banned_token_ids": tuple(args.banned_tokens or ())}
    filters = {"min_p": args.min_p}
    if args.temperature is None:                      # a mixed batch
        params = [SamplingParams(seed=args.seed + i, **stops) if i % 2 == 0 else
                  SamplingParams(1.0, top_k=args.top_k, top_p=args.top_p, seed=args.seed + i, **stops, **filters)
                  for i in range(len(counts))]
    else:
        params = [SamplingParams(args.temperature, args.top_k, args.top_p, seed=args.seed + i, **stops,
                                 **(filters if args.temperature else {})) for i in range(len(counts))]
    rounds = [{i: t for i, t in enumerate(counts)}] * args.rounds
    plen = (args.prompt_len, args.prompt_len) if args.prompt_len else (1, 8)
    repro = command(["check", *model_flags(args), *round_flags(args, counts)])
    name = f"counts {tuple(counts)} " + (f"d={args.draft_loops} D={args.target_loops}" if depths is None else
                                         "depths " + ",".join(f"{a}:{b}" for a, b in depths)) + f" x{args.rounds} rounds"
    return make_case(name, rounds, args.draft_loops, args.target_loops, params, seed=args.seed,
                     policy=args.policy, prompt_len=plen, reproduce=repro, vocab=cfg.vocab_size, depths=depths)


def run(args) -> int:
    t0 = time.perf_counter()
    if args.reference and not args.backend:
        raise OracleError("--reference needs --backend (the backend it judges)")
    model = build_model(args.preset, args.seed, args.checkpoint)
    from .round_args import model_flags
    custom = any(getattr(args, k) is not None for k in ("counts", "temperature", "top_k", "top_p", "prompt_len",
                                                         "depths", "stop_tokens", "max_tokens", "banned_tokens",
                                                         "min_p")) \
        or (args.draft_loops, args.target_loops, args.rounds, args.policy) != (2, 4, 4, "sequential")
    cases = [custom_case(args)] if custom or args.case else default_cases(model.cfg.vocab_size, model_flags(args))
    if args.backend and args.backend != "reference":
        from .backend_check import check_backend
        return check_backend(args, model, cases, t0)
    out = {"ok": True, "checks": [], "cases": [], "kv_writes_compared": 0, "logits_compared": 0,
           "rng_events_compared": 0, "tokens_compared": 0, "layers": model.cfg.num_layers}
    for case in cases:
        rep = check_case(model, case)
        out["ok"] &= rep.ok
        for k in ("kv_writes_compared", "logits_compared", "rng_events_compared", "tokens_compared"):
            out[k] += getattr(rep, k)
        out["checks"] += [{"name": f"{case.name}: {c.name}", "ok": c.ok, "detail": c.detail} for c in rep.checks]
        out["cases"].append({"name": case.name, "ok": rep.ok, "d": case.d, "D": case.D, "policy": case.policy,
                             "requests": len(case.prompts), "rounds": len(case.rounds)})
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"loopspec-oracle check: block round vs loop round on the reference ({args.checkpoint or args.preset}, FP32)")
        for c in out["cases"]:
            mark = "PASS" if c["ok"] else "FAIL"
            print(f"  [{mark}] {c['name']}  ({c['requests']} requests, {c['rounds']} rounds, policy {c['policy']})")
            for chk in out["checks"]:
                if chk["name"].startswith(c["name"] + ":") and (not chk["ok"] or chk["name"].endswith("cache_free")):
                    print(f"         {'ok  ' if chk['ok'] else 'FAIL'} {chk['name'][len(c['name']) + 2:]}: {chk['detail']}")
        print(f"  compared bit for bit: {out['kv_writes_compared']} KV writes, {out['logits_compared']} logits vectors, "
              f"{out['rng_events_compared']} RNG events, {out['tokens_compared']} emitted tokens "
              f"({out['layers']} layers)")
        print(f"  {'OK' if out['ok'] else 'FAILED'} in {out['seconds']} s")
    return 0 if out["ok"] else 1


def register(sub) -> None:
    p = sub.add_parser("check", help="compare block and loop rounds on the reference (the main job)",
                       description="Run the block and loop rounds on the FP32 reference, for the built-in cases or "
                       "the case the round options describe, and compare them bit for bit; with --backend, judge a "
                       "backend's rounds by the one judge (its dtype's tolerance row). Exit 0 all checks hold, "
                       "1 a check failed (its place named), 2 bad usage or input, 3 internal error.")
    add_round_options(p)
    p.add_argument("--backend", default=None, help="judge a backend's rounds against the reference "
                   "(torch-cpu | torch-cpu-bf16 | torch-cuda | jax | package.module:factory)")
    p.add_argument("--reference", default=None, help="with --backend: the backend that computes the judge's "
                   "side (default: the NumPy FP32 reference; `jax` reaches the ouro-1.4b shape on a GPU)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
