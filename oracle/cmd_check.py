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
    """Options shared by `check` and `trace record`."""
    p.add_argument("--preset", default="tiny", help="model preset (default tiny)")
    p.add_argument("--checkpoint", help="HF-style checkpoint folder instead of a preset")
    p.add_argument("--seed", type=int, default=0, help="weights seed (presets) and base request seed")
    p.add_argument("--counts", type=csv_ints, help="token counts T_i per request per round, e.g. 5,3,1")
    p.add_argument("--draft-loops", "-d", type=int, default=2)
    p.add_argument("--target-loops", "-D", type=int, default=4)
    p.add_argument("--depths", type=depth_pairs, default=None, metavar="d0:D0,...",
                   help="per-request draft:target loops, one pair per request (replaces -d/-D)")
    p.add_argument("--temperature", type=float, default=None, help="0 = greedy (default: mixed batch)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--stop-tokens", type=csv_ints, default=None, metavar="ID,...",
                   help="stop token ids of every request (emission ends after the first, kept)")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens each request may generate in all")
    p.add_argument("--banned-tokens", type=csv_ints, default=None, metavar="ID,...",
                   help="token ids masked to -inf in draft and verification logits")
    p.add_argument("--min-p", type=float, default=None, help="min-p filter (vLLM: p >= min_p * max p)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--policy", default="sequential", help="RNG policy: sequential | fixed")
    p.add_argument("--prompt-len", type=int, default=None, help="prompt length (default: random 1..8)")


def custom_case(args):
    """The case described by --counts and friends."""
    check_policy(args.policy)
    if args.rounds < 1:
        raise OracleError(f"--rounds {args.rounds}: must be >= 1")
    counts = args.counts
    if counts is not None and not counts:
        raise OracleError("--counts is empty")
    counts = counts or [5, 3, 1]
    validate(counts, args.draft_loops, args.target_loops)
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
    if plen[0] < 1:
        raise OracleError(f"--prompt-len {args.prompt_len}: must be >= 1")
    repro = " ".join(["python -m oracle check", f"--preset {args.preset}", f"--seed {args.seed}",
                      "--counts " + ",".join(map(str, counts)),
                      f"-d {args.draft_loops} -D {args.target_loops}" if depths is None else
                      "--depths " + ",".join(f"{a}:{b}" for a, b in depths),
                      f"--rounds {args.rounds}", f"--policy {args.policy}"]
                     + ([f"--temperature {args.temperature}"] if args.temperature is not None else [])
                     + ([f"--top-k {args.top_k}"] if args.top_k else []) + ([f"--top-p {args.top_p}"] if args.top_p else [])
                     + ([f"--stop-tokens {','.join(map(str, args.stop_tokens))}"] if args.stop_tokens else [])
                     + ([f"--max-tokens {args.max_tokens}"] if args.max_tokens is not None else [])
                     + ([f"--banned-tokens {','.join(map(str, args.banned_tokens))}"] if args.banned_tokens else [])
                     + ([f"--min-p {args.min_p}"] if args.min_p is not None else []))
    name = f"counts {tuple(counts)} " + (f"d={args.draft_loops} D={args.target_loops}" if depths is None else
                                         "depths " + ",".join(f"{a}:{b}" for a, b in depths)) + f" x{args.rounds} rounds"
    return make_case(name, rounds, args.draft_loops, args.target_loops, params, seed=args.seed,
                     policy=args.policy, prompt_len=plen, reproduce=repro, depths=depths)


def run(args) -> int:
    t0 = time.perf_counter()
    model = build_model(args.preset, args.seed, args.checkpoint)
    custom = any(getattr(args, k) is not None for k in ("counts", "temperature", "top_k", "top_p", "prompt_len",
                                                         "depths", "stop_tokens", "max_tokens", "banned_tokens",
                                                         "min_p")) \
        or (args.draft_loops, args.target_loops, args.rounds, args.policy) != (2, 4, 4, "sequential")
    cases = [custom_case(args)] if custom else default_cases(model.cfg.vocab_size)
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
    p = sub.add_parser("check", help="compare block and loop rounds on the reference (the main job)")
    add_round_options(p)
    p.add_argument("--backend", default=None, help="compare a backend's rounds with the reference "
                   "(torch-cpu | torch-cuda | package.module:factory)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
