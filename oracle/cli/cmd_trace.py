"""`python -m oracle trace record|diff`: record a generation run's round traces (JSON +
NPZ) and diff two trace files, RNG events first.

A recorded trace's meta holds `reproduce`: the exact `trace record` command that writes the
same trace again (model, seed, every round option, mode, backend and output file), and the
recording backend's `backend`, `dtype`, `exact` and `tolerance_row`: `trace diff A B` judges B
by B's recorded row unless --tolerance is given."""
from __future__ import annotations

import json

from . import HELP
from .argtypes import check_out_path, int_at_least, positive_seconds
from ..backends import BackendCallFailed, GuardedBackend, import_prefix, load_backend
from ..judge.scenario import command
from ..judge.runner import REFERENCE, run_scenario
from ..judge.compare import TOLERANCES, compare_runs
from .environment import set_threads
from ..errors import OracleError
from ..checkpoint import build_model
from .round_args import add_round_options, custom_case, model_flags, round_flags
from ..traces import load_traces, save_traces


def record_command(args, out: str) -> str:
    """The `trace record` command that regenerates this recording into `out`."""
    shape = ["--case", args.case] if args.case is not None else round_flags(args, args.counts or [5, 3, 1])
    backend = ["--backend", args.backend] if args.backend is not None else []
    return import_prefix(args.backend) + command(["trace", "record", *model_flags(args), *shape, "--mode", args.mode,
                                                  *backend, "--out", out])


def record(args) -> int:
    check_out_path(args.out, "--out")
    bk = REFERENCE if args.backend is None else load_backend(args.backend)     # before the model is built
    case = custom_case(args)
    model = build_model(args.preset, args.seed, args.checkpoint)
    threads = set_threads(args, model.cfg.hidden_size)
    try:
        traces = run_scenario(GuardedBackend(bk, args.timeout), model, case, args.mode).traces
    except BackendCallFailed as e:
        raise OracleError(f"backend {bk.name}: {e}") from None
    except Exception as e:                                          # noqa: BLE001 -- a plug-in's failure
        if bk is REFERENCE:
            raise
        raise OracleError(f"backend {bk.name} raised {type(e).__name__}: {e}") from None
    row = "exact" if bk.exact else bk.dtype
    save_traces(args.out, traces, {"case": case.name, "mode": args.mode, "reproduce": record_command(args, args.out),
                                   "check": case.reproduce, "backend": args.backend or "reference",
                                   "dtype": bk.dtype, "exact": bool(bk.exact), "tolerance_row": row, **threads})
    n_ev = sum(len(t.rng_events) for t in traces)
    print(f"recorded {len(traces)} rounds ({args.mode}, {bk.name}, tolerance row {row}, {n_ev} RNG events) "
          f"to {args.out} and {args.out}.npz")
    return 0


def recorded_row(path, meta: dict) -> str:
    """The tolerance row a trace's recording names (`exact` when it names none)."""
    row = meta.get("tolerance_row", "exact")
    if row not in TOLERANCES:
        raise OracleError(f"trace file {path}: malformed: meta tolerance_row {row!r} is not a row of the "
                          f"tolerance table ({', '.join(TOLERANCES)})")
    return row


def diff(args) -> int:
    a, meta_a = load_traces(args.a)
    b, meta_b = load_traces(args.b)
    row = args.tolerance or recorded_row(args.b, meta_b)
    rep = compare_runs(a, b, row, meta_a.get("reproduce", ""))
    order = ["rng_events", "kv_writes", "draft_logits", "verify_logits", "tokens", "stats"]
    checks = sorted(rep.checks, key=lambda c: order.index(c.name) if c.name in order else len(order))
    if args.json:
        print(json.dumps({"ok": rep.ok, "tolerance_row": row, "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
                          "kv_writes_compared": rep.kv_writes_compared, "logits_compared": rep.logits_compared,
                          "rng_events_compared": rep.rng_events_compared}))
    else:
        print(f"{args.b} judged against {args.a} by tolerance row {row!r}"
              + ("" if args.tolerance else " (recorded with B)"))
        for c in checks:
            print(f"{'ok  ' if c.ok else 'DIFF'} {c.name}{': ' + c.detail if c.detail else ''}")
        print(("identical" if row == "exact" else f"equal within tolerance row {row!r}") if rep.ok else "traces differ")
    return 0 if rep.ok else 1


def register(sub) -> None:
    p = sub.add_parser("trace", help=HELP["trace"],
                       description="Record the round traces of a generation run (JSON + NPZ), or diff two "
                                   "trace files (exit 1 when they differ, 2 when a file is not a valid trace).")
    tsub = p.add_subparsers(dest="trace_command", metavar="record|diff", required=True)
    r = tsub.add_parser("record", help="record the round traces of a generation run",
                        description="Run a case on the reference (or --backend) and write its round traces to "
                                    "--out (JSON) and --out.npz (arrays); the JSON records the command that "
                                    "regenerates it and the backend's tolerance row.")
    add_round_options(r)
    r.add_argument("--mode", default="loop", choices=("block", "loop"), help="which round to run")
    r.add_argument("--backend", default=None, metavar="SPEC",
                   help="record this backend's traces (torch-cpu | torch-cpu-bf16 | torch-cuda | jax | "
                        "package.module:factory; default: the reference)")
    r.add_argument("--timeout", type=positive_seconds, default=300.0, metavar="S",
                   help="seconds each backend call may take")
    r.add_argument("--threads", type=int_at_least(1), default=None, metavar="N",
                   help="torch intra-op threads when the backend loads torch (default: the free cores)")
    r.add_argument("--out", required=True, metavar="FILE", help="trace file (JSON); arrays go to FILE.npz")
    r.set_defaults(func=record)
    d = tsub.add_parser("diff", help="compare two trace files (exit 1 on a difference)",
                        description="Compare two trace files, RNG events first; exit 0 identical, 1 they "
                                    "differ, 2 a file is missing, malformed or paired with the wrong NPZ.")
    d.add_argument("a", metavar="A", help="the reference trace file (JSON, with A.npz beside it)")
    d.add_argument("b", metavar="B", help="the trace file compared with A (JSON, with B.npz beside it)")
    d.add_argument("--tolerance", default=None, choices=tuple(TOLERANCES),
                   help="exact, or a dtype's tolerance row (default: the row B was recorded with, "
                        "exact for the reference)")
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(func=diff)
