"""`python -m oracle trace record|diff`: record a generation run's round traces (JSON +
NPZ) and diff two trace files, RNG events first.

A recorded trace's meta holds `reproduce`: the exact `trace record` command that writes the
same trace again (model, seed, every round option, mode and output file)."""
from __future__ import annotations

import json

from .argtypes import check_out_path
from .cases import REFERENCE, command, run
from .compare import TOLERANCES, compare_runs
from .model import build_model
from .round_args import add_round_options, custom_case, model_flags, round_flags
from .traces import load_traces, save_traces


def record_command(args, out: str) -> str:
    """The `trace record` command that regenerates this recording into `out`."""
    shape = ["--case", args.case] if args.case is not None else round_flags(args, args.counts or [5, 3, 1])
    return command(["trace", "record", *model_flags(args), *shape, "--mode", args.mode, "--out", out])


def record(args) -> int:
    check_out_path(args.out, "--out")
    case = custom_case(args)
    model = build_model(args.preset, args.seed, args.checkpoint)
    traces = run(REFERENCE, model, case, args.mode).traces
    save_traces(args.out, traces, {"case": case.name, "mode": args.mode, "reproduce": record_command(args, args.out),
                                   "check": case.reproduce})
    n_ev = sum(len(t.rng_events) for t in traces)
    print(f"recorded {len(traces)} rounds ({args.mode}, {n_ev} RNG events) to {args.out} and {args.out}.npz")
    return 0


def diff(args) -> int:
    a, meta_a = load_traces(args.a)
    b, _ = load_traces(args.b)
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
    p = sub.add_parser("trace", help="record round traces or diff two trace files",
                       description="Record the round traces of a generation run (JSON + NPZ), or diff two "
                                   "trace files (exit 1 when they differ, 2 when a file is not a valid trace).")
    tsub = p.add_subparsers(dest="trace_command", metavar="record|diff", required=True)
    r = tsub.add_parser("record", help="record the round traces of a generation run",
                        description="Run a case on the reference and write its round traces to --out "
                                    "(JSON) and --out.npz (arrays); the JSON records the command that "
                                    "regenerates it.")
    add_round_options(r)
    r.add_argument("--mode", default="loop", choices=("block", "loop"), help="which round to run")
    r.add_argument("--out", required=True, metavar="FILE", help="trace file (JSON); arrays go to FILE.npz")
    r.set_defaults(func=record)
    d = tsub.add_parser("diff", help="compare two trace files (exit 1 on a difference)",
                        description="Compare two trace files, RNG events first; exit 0 identical, 1 they "
                                    "differ, 2 a file is missing, malformed or paired with the wrong NPZ.")
    d.add_argument("a", metavar="A", help="the reference trace file (JSON, with A.npz beside it)")
    d.add_argument("b", metavar="B", help="the trace file compared with A (JSON, with B.npz beside it)")
    d.add_argument("--tolerance", default="exact", choices=tuple(TOLERANCES),
                   help="exact, or a dtype's tolerance table")
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(func=diff)
