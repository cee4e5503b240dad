"""`python -m oracle check [--backend NAME [--reference jax]]`: argument parsing and printing.
The cases, the runner and the verdicts are oracle/cases.py's; every comparison is
oracle.compare.compare_runs. Without --backend: block vs loop on the FP32 reference, bit for
bit (`check_cases`). With --backend: the backend's block and loop rounds judged against the
reference, or the --reference backend, by the backend's tolerance row (`judge_cases`)."""
from __future__ import annotations

import json
import time

from .backends import load_backend
from .cases import check_cases, default_cases, judge_cases
from .errors import OracleError
from .model import build_model
from .round_args import add_round_options, custom_case, model_flags


def run(args) -> int:
    t0 = time.perf_counter()
    if args.reference and not args.backend:
        raise OracleError("--reference needs --backend (the backend it judges)")
    model = build_model(args.preset, args.seed, args.checkpoint)
    custom = any(getattr(args, k) is not None for k in ("counts", "temperature", "top_k", "top_p", "prompt_len",
                                                         "depths", "stop_tokens", "max_tokens", "banned_tokens",
                                                         "min_p")) \
        or (args.draft_loops, args.target_loops, args.rounds, args.policy) != (2, 4, 4, "sequential")
    cases = [custom_case(args)] if custom or args.case else default_cases(model.cfg.vocab_size, model_flags(args))
    if args.backend and args.backend != "reference":
        return check_backend(args, model, cases, t0)
    out = check_cases(model, cases)
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


def check_backend(args, model, cases, t0) -> int:
    backend = load_backend(args.backend)
    judge = None
    judge_name = "the FP32 reference"
    if getattr(args, "reference", None) not in (None, "reference"):
        judge = load_backend(args.reference)
        judge_name = f"the {judge.name} judge ({judge.dtype})"
    row = "exact" if backend.exact else backend.dtype
    suffix = f" --backend {args.backend}" + (f" --reference {args.reference}" if judge else "")
    out = {"ok": True, "backend": backend.name, "dtype": backend.dtype, "exact": bool(backend.exact),
           "judge": judge.name if judge else "reference", "tolerance_row": row, "layers": model.cfg.num_layers}
    out |= judge_cases(backend, model, cases, suffix, judge)
    skipped = out["skipped"]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if args.json:
        print(json.dumps(out))
        return 0 if out["ok"] else 1
    print(f"loopspec-oracle check: backend {backend.name} ({backend.dtype}, exact={bool(backend.exact)}) "
          f"against {judge_name}, tolerance row {row!r}")
    for c in out["cases"]:
        print(f"  [{'PASS' if c['ok'] else 'FAIL'}] {c['name']}")
    for c in out["checks"]:
        if not c["ok"]:
            print(f"  FAIL [{c['name'].rsplit(': ', 1)[-1]}] {c['detail']}")
    for s in skipped:
        print(f"  skipped: {s}")
    n_exc = len(out["excused_divergences"])
    for d in out["excused_divergences"][:10]:
        print(f"  excused: {d}")
    if n_exc > 10:
        print(f"  excused: ... {n_exc - 10} more")
    print(f"  compared: {out['request_rounds']} request-rounds, {out['kv_writes_compared']} KV writes, "
          f"{out['logits_compared']} logits vectors, {out['rng_events_compared']} RNG events, "
          f"{out['tokens_compared']} tokens; max relative error KV {out['max_rel_err']['kv']:.3g}, "
          f"logits {out['max_rel_err']['logits']:.3g}; {n_exc} excused near-tie divergences; "
          f"every decision explained by the backend's own logits: "
          f"{'yes' if not any(not c['ok'] and c['name'].endswith(': decisions') for c in out['checks']) else 'NO'}")
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
