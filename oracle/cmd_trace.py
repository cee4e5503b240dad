"""`python -m oracle trace record|diff`: record a generation run's round traces (JSON +
NPZ) and diff two trace files, RNG events first."""
from __future__ import annotations

import json

from .check import run_case
from .cmd_check import add_round_options, custom_case
from .compare import TOLERANCES, compare_runs
from .errors import OracleError
from .model import build_model
from .traces import load_traces, save_traces


def record(args) -> int:
    model = build_model(args.preset, args.seed, args.checkpoint)
    case = custom_case(args)
    traces, _ = run_case(model, case, args.mode)
    save_traces(args.out, traces, {"case": case.name, "mode": args.mode, "reproduce": case.reproduce})
    n_ev = sum(len(t.rng_events) for t in traces)
    print(f"recorded {len(traces)} rounds ({args.mode}, {n_ev} RNG events) to {args.out} and {args.out}.npz")
    return 0


def diff(args) -> int:
    a, meta_a = load_traces(args.a)
    b, _ = load_traces(args.b)
    if args.tolerance not in TOLERANCES:
        raise OracleError(f"unknown tolerance {args.tolerance!r} (known: {', '.join(TOLERANCES)})")
    rep = compare_runs(a, b, args.tolerance, meta_a.get("reproduce", ""))
    order = ["rng_events", "kv_writes", "draft_logits", "verify_logits", "tokens", "stats"]
    checks = sorted(rep.checks, key=lambda c: order.index(c.name) if c.name in order else len(order))
    if args.json:
        print(json.dumps({"ok": rep.ok, "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
                          "kv_writes_compared": rep.kv_writes_compared, "logits_compared": rep.logits_compared,
                          "rng_events_compared": rep.rng_events_compared}))
    else:
        for c in checks:
            print(f"{'ok  ' if c.ok else 'DIFF'} {c.name}{': ' + c.detail if c.detail else ''}")
        print("identical" if rep.ok else "traces differ")
    return 0 if rep.ok else 1


def register(sub) -> None:
    p = sub.add_parser("trace", help="record round traces or diff two trace files")
    tsub = p.add_subparsers(dest="trace_command", metavar="record|diff", required=True)
    r = tsub.add_parser("record", help="record the round traces of a generation run")
    add_round_options(r)
    r.add_argument("--mode", default="loop", choices=("block", "loop"))
    r.add_argument("--out", required=True, help="trace file (JSON); arrays go to FILE.npz")
    r.set_defaults(func=record)
    d = tsub.add_parser("diff", help="compare two trace files (exit 1 on a difference)")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--tolerance", default="exact", help="exact | float32 | bfloat16 | float16")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=diff)
