"""`python -m oracle localize --backend NAME [round options]`: where two runs of one row part, on any
backend (invariant or not). It runs the backend's block and loop rounds of each case (the built-in
cases, `--case NAME`, or the round options' case), then the exactness tier's claims
(oracle/judge/plans/invariance.py: block = loop, spec = plain decoding, alone = batched), each bitwise,
and names for each claim that fails its first place and, where the backend offers capture, its first
differing operation (oracle/judge/plans/localize.py). Exit 0: every claim holds bitwise; 1: a claim parts
(named); 2: bad usage or input."""

from __future__ import annotations

import json
import time

from ..runtime import isolated
from ..errors import printable
from ..judge.plans.plan import Executor, invariance_plan
from ..judge.plans.verdict import judge
from .argtypes import add_threads_option, command_parser
from .cmd_check import model_and_cases
from .environment import set_threads
from .progress import Progress
from .round_args import check_round_args
from .round_options import add_round_options

CLAIMS = {"block-loop": "block = loop", "spec-plain": "spec = plain", "alone": "alone = batched"}


def run(args) -> int:
    t0 = time.perf_counter()
    backend = isolated.load(args.backend)
    model, cases = model_and_cases(args)
    set_threads(args, model.cfg.hidden_size)
    progress = Progress.for_args(args)
    try:
        v = judge(invariance_plan(backend, model, cases), Executor(on_phase=progress.phase))
    finally:
        progress.done()
    want = set(CLAIMS.values()) if args.claim == "all" else {CLAIMS[args.claim]}
    results = [r for r in v.info.get("invariance", {}).get("results", []) if r["claim"] in want]
    failures = {(c["failure"]["case"], c["failure"]["mode"]): c for c in v.checks if not c["ok"] and c.get("failure")}
    ok = bool(results) and all(r["ok"] for r in results)
    if args.json:
        out = [r | {"failure": failures.get((r["case"], r["claim"]), {}).get("failure")} for r in results]
        print(
            json.dumps(
                {
                    "ok": ok,
                    "backend": backend.name,
                    "seconds": round(time.perf_counter() - t0, 2),
                    "claims": out,
                    "skipped": v.skipped,
                }
            )
        )
    else:
        print(printable(f"loopspec-oracle localize: backend {backend.name} ({backend.dtype}), bitwise"))
        for r in results:
            c = failures.get((r["case"], r["claim"]))
            text = c["detail"] if c is not None else f"{r['case']}: {r['claim']}: bitwise equal"
            print(printable(f"  [{'SAME' if r['ok'] else 'PART'}] {text} ({r['values']:,} values)"))
        print(f"  {'bitwise equal' if ok else 'the runs part'} in {round(time.perf_counter() - t0, 2)} s")
    return 0 if ok else 1


def register(sub) -> None:
    p = command_parser(
        sub,
        "localize",
        "Run a backend's block and loop rounds and the exactness tier's claims (block = loop, spec = plain "
        "decoding, alone = batched), bitwise, on any backend; for a claim that fails, name the first place "
        "and, where the backend offers capture, the first operation whose bits differ. Exit 0 all claims "
        "hold bitwise, 1 a claim parts (named), 2 bad usage or input.",
    )
    add_round_options(p)
    p.add_argument("--backend", required=True, help="the backend (a named one or package.module:factory)")
    p.add_argument("--claim", choices=["all", *CLAIMS], default="all", help="which claim to check")
    add_threads_option(p, "torch intra-op threads (and NumPy's BLAS threads), as check --threads")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="print no progress lines on stderr")
    p.set_defaults(func=run, preflight=check_round_args)
