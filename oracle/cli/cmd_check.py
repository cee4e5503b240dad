"""`python -m oracle check [--backend NAME [--reference jax]]`: argument parsing and printing.
The runner is oracle/judge/runner.py's, the verdicts oracle/judge/cases.py's, the built-in cases oracle/cli/catalogue.py's; every comparison is
oracle.judge.compare.compare_runs. Without --backend: block vs loop on the FP32 reference, bit for
bit (`check_cases`). With --backend: the backend's block and loop rounds judged against the
reference, or the --reference backend, by the backend's tolerance row (`judge_cases`)."""
from __future__ import annotations

import json
import os
import shlex
import time

from . import HELP
from .argtypes import int_at_least, positive_seconds
from .catalogue import default_cases
from ..backends import GuardedBackend, JudgeFailed, import_prefix, load_backend
from ..judge.scenario import command
from ..judge.cases import (cancel_sides, check_cases, judge_cases, reference_sides, sides_ahead_apply, sides_for,
                           start_sides)
from ..judge.drift import drift_lines, finish_drift, start_drift
from ..judge import precision
from .environment import set_threads
from ..errors import OracleError
from ..checkpoint import build_model
from ..config import preset
from ..progress import warn
from .round_args import add_round_options, custom_case, is_custom, model_flags

DEFAULT_TIMEOUT = 300.0          # seconds a backend call may take (`--timeout`)
# dtypes a judge's side (--reference) may compute in: the tolerance rows measure a backend
# against an FP32 judge
JUDGE_DTYPES = ("float32", "float64")


def load_backends(args):
    """(backend, judge or None), loaded and checked before the model is built: a bad plug-in
    fails in seconds, not after building a 1.4B model."""
    if args.reference is not None and args.backend in (None, "reference"):
        raise OracleError("--reference computes the judge's side for --backend NAME; without a backend "
                          "(or with --backend reference) nothing is judged by it")
    backend = load_backend(args.backend)
    judge = None
    if args.reference not in (None, "reference"):
        judge = load_backend(args.reference)
        if not judge.exact and judge.dtype not in JUDGE_DTYPES:
            raise OracleError(f"--reference {args.reference}: computes in {judge.dtype}, lower precision than "
                              f"the judge needs (float32; the tolerance rows measure backends against an FP32 judge)")
    return backend, judge


def list_cases() -> int:
    """`check --list-cases`: the built-in cases' names, one a line (for --case NAME)."""
    for c in default_cases(64):
        print(c.name)
    return 0


def nothing_compared(out: dict) -> None:
    """A check that compared nothing fails (a backend with no supported policy, every case
    skipped, or rounds without a compared request)."""
    if out["cases"] and out.get("request_rounds", 1) and out["tokens_compared"] + out["logits_compared"]:
        return
    out["ok"] = False
    why = "; ".join(out.get("skipped", [])) or "no request-round was compared"
    out["checks"].append({"name": "nothing compared", "ok": False, "detail": f"nothing compared: {why}"})


def run(args) -> int:
    t0 = time.perf_counter()
    if args.list_cases:
        return list_cases()
    if args.threads is not None and args.backend in (None, "reference"):
        warn("--threads has no effect without --backend: the reference check runs on NumPy, not torch")
    judged = args.backend is not None and args.backend != "reference"
    early = None
    if judged and args.checkpoint is None and sides_ahead_apply(preset(args.preset or "tiny"), args.reference):
        # a small preset: the model first (milliseconds) and the reference's side begun, so that
        # it runs while the backend is imported (oracle/judge/cases.py, start_sides)
        model, cases = model_and_cases(args)
        set_threads(args, model.cfg.hidden_size)           # NumPy's BLAS threads, before the jobs fork
        early = start_sides(model, cases)
    try:
        backend, judge = load_backends(args) if (args.backend, args.reference) != (None, None) else (None, None)
    except BaseException:
        cancel_sides(early)
        raise
    if early is None:
        model, cases = model_and_cases(args)
    if judged:
        return check_backend(args, model, cases, t0, backend, judge, early)
    out = check_cases(model, cases)
    nothing_compared(out)
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


def model_and_cases(args):
    model = build_model(args.preset, args.seed, args.checkpoint)
    cases = [custom_case(args)] if is_custom(args) or args.case else default_cases(model.cfg.vocab_size, model_flags(args))
    return model, cases


def check_backend(args, model, cases, t0, backend, judge, early=None) -> int:
    judge_name = "the FP32 reference" if judge is None else f"the {judge.name} judge ({judge.dtype})"
    row = "exact" if backend.exact else backend.dtype
    suffix = f" --backend {shlex.quote(args.backend)}" + (f" --reference {shlex.quote(args.reference)}" if judge else "")
    prefix = import_prefix(args.backend, args.reference)      # PYTHONPATH a plug-in needs
    for c in cases:
        c.reproduce = prefix + (c.reproduce or "python -m oracle check")
    out = {"ok": True, "backend": backend.name, "dtype": backend.dtype, "exact": bool(backend.exact),
           "judge": judge.name if judge else "reference", "tolerance_row": row, "layers": model.cfg.num_layers,
           "timeout_s": args.timeout, **set_threads(args, model.cfg.hidden_size)}
    guarded = GuardedBackend(backend, args.timeout)
    # the reference's sides: begun before the backend loaded (its facts sent now), else started now
    sides = sides_for(early, backend) if early is not None else reference_sides(backend, model, cases, judge)
    drift = None
    if args.drift:             # the probe through the backend first: its fit runs while the cases are judged
        fault = f"LOOPSPEC_FAULT={shlex.quote(os.environ['LOOPSPEC_FAULT'])} " if os.environ.get("LOOPSPEC_FAULT") else ""
        drift = start_drift(guarded, model, fault + prefix + command(["check", *model_flags(args)]) + suffix, judge)
    try:
        out |= judge_cases(guarded, model, cases, suffix,
                           None if judge is None else GuardedBackend(judge, args.timeout, judge=True), sides)
    except JudgeFailed as e:
        raise OracleError(f"the reference --reference {args.reference} failed: {e}") from None
    nothing_compared(out)
    finish_drift(drift, out)
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
    for line in drift_lines(out["drift"]) if "drift" in out else []:
        print(line)
    for line in precision.report_lines(out["precision"]) if "precision" in out else []:
        print(line)
    print(f"  {'OK' if out['ok'] else 'FAILED'} in {out['seconds']} s")
    return 0 if out["ok"] else 1


def register(sub) -> None:
    p = sub.add_parser("check", help=HELP["check"],
                       description="Run the block and loop rounds on the FP32 reference, for the built-in cases or "
                       "the case the round options describe, and compare them bit for bit; with --backend, judge a "
                       "backend's rounds by the one judge (its dtype's tolerance row). Exit 0 all checks hold, "
                       "1 a check failed (its place named), 2 bad usage or input, 3 internal error.")
    add_round_options(p)
    p.add_argument("--backend", default=None, help="judge a backend's rounds against the reference "
                   "(torch-cpu | torch-cpu-bf16 | torch-cuda | jax | package.module:factory)")
    p.add_argument("--reference", default=None, help="with --backend: the backend that computes the judge's "
                   "side (default: the NumPy FP32 reference; `jax` reaches the ouro-1.4b shape on a GPU)")
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help="seconds each backend call (session, add, step, submit, collect, remove, tokens) may "
                        "take; a call past it, or one that calls sys.exit(), is a failed check")
    p.add_argument("--threads", type=int_at_least(1), default=None, metavar="N",
                   help="torch intra-op threads when a backend loads torch (default: the free cores, "
                        "usable cores - round(load average), or OMP_NUM_THREADS when set)")
    p.add_argument("--list-cases", action="store_true", help="print the built-in cases' names and exit")
    p.add_argument("--no-drift", dest="drift", action="store_false", help="with --backend: skip the drift verdict "
                   "(the fit of parameter drifts over probe requests; docs/DESIGN.md, 'Reduced precision')")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
