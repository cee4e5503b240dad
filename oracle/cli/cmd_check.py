"""`python -m oracle check [--backend NAME [--reference jax]]`: argument parsing and rendering.
The verdict is oracle/judge/plans/verdict.py's `judge(plan, executor)`, rendered by oracle/cli/render.py;
the built-in cases are oracle/cli/catalogue.py's. Without --backend: block vs loop on the FP32 reference, bit for bit.
With --backend: the backend's block and loop rounds judged against the reference, or the
--reference backend, by the backend's tolerance row, plus the drift probe's drift and precision
verdicts for a bfloat16 or float16 backend."""

from __future__ import annotations

import json
import os
import shlex
import time

from .argtypes import add_threads_option, add_timeout_option, check_report_dir, command_parser, write_report_last
from .catalogue import default_cases
from .option_rules import check_option_rules, refuse_ineffective, timeout_flags
from ..runtime.backends import PLUGIN_FILES, JudgeFailed, load_backend, names_help
from ..runtime import isolated
from ..judge.scenario import command
from ..judge.plans import verdict
from ..judge.plans.plan import Executor, backend_plan, reference_plan
from .progress import Progress
from .render import backend_text, reference_text, write_report
from .environment import set_threads
from ..errors import OracleError, printable
from ..checkpoint import build_model
from ..config import preset
from .round_args import check_round_args, is_custom
from .round_case import custom_case, model_flags, plugin_prefix
from .round_options import add_round_options
from . import shrinking
from ..judge.probe.calibration import HOST_HIDDEN

# dtypes a judge's side (--reference) may compute in: the tolerance rows measure a backend
# against an FP32 judge
JUDGE_DTYPES = ("float32", "float64")


def load_backends(args):
    """(backend, judge or None), loaded and checked before the model is built: a bad plug-in
    fails in seconds, not after building a 1.4B model."""
    if args.reference is not None and args.backend in (None, "reference"):
        raise OracleError(
            "--reference computes the judge's side for --backend NAME; without a backend "
            "(or with --backend reference) nothing is judged by it"
        )
    backend = isolated.load(args.backend, timeout=args.timeout)  # a plug-in: in a child process
    judge = None
    if args.reference not in (None, "reference"):
        judge = load_backend(args.reference, timeout=args.timeout)
        if not judge.exact and judge.dtype not in JUDGE_DTYPES:
            raise OracleError(
                f"--reference {args.reference}: computes in {judge.dtype}, lower precision than "
                f"the judge needs (float32; the tolerance rows measure backends against an FP32 judge)"
            )
    return backend, judge


def list_cases() -> int:
    """`check --list-cases`: the built-in cases' names, one a line (for --case NAME)."""
    for c in default_cases(64):
        print(c.name)
    return 0


def run(args) -> int:
    t0 = time.perf_counter()
    if args.list_cases:
        return list_cases()
    judged = args.backend is not None and args.backend != "reference"
    early = None
    if (
        judged
        and args.checkpoint is None
        and preset(args.preset or "tiny").hidden_size < HOST_HIDDEN
        and args.reference in (None, "reference")
        and not args.probe_requests  # the drift probe alone: no case runs
    ):
        # a small preset: the model first (milliseconds) and the reference's sides begun, so that
        # they run while the backend is imported (verdict.begin)
        model, cases = model_and_cases(args)
        set_threads(args, model.cfg.hidden_size)  # NumPy's BLAS threads, before the jobs fork
        early = verdict.begin(model, cases, args.reference)
    try:
        backend, judge = load_backends(args) if (args.backend, args.reference) != (None, None) else (None, None)
        if judged:
            refuse_ineffective(args, backend)
    except BaseException:
        verdict.cancel(early)
        raise
    if early is None:
        model, cases = model_and_cases(args)
    if judged:
        return check_backend(args, model, cases, t0, backend, judge, early)
    progress = Progress.for_args(args)
    v = verdict.judge(reference_plan(model, cases), Executor(on_phase=progress.phase))
    progress.done()
    v.seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(v.to_json()))
    else:
        print("\n".join(map(printable, reference_text(v, args.checkpoint or args.preset))))  # names escaped
    return 0 if v.ok else 1


def model_and_cases(args):
    model = build_model(args.preset, args.seed, args.checkpoint)
    cases = (
        [custom_case(args)] if is_custom(args) or args.case else default_cases(model.cfg.vocab_size, model_flags(args))
    )
    return model, cases


def check_backend(args, model, cases, t0, backend, judge, early=None) -> int:
    judge_name = "the FP32 reference" if judge is None else f"the {judge.name} judge ({judge.dtype})"
    suffix = (
        f" --backend {shlex.quote(args.backend)}"
        + (f" --reference {shlex.quote(args.reference)}" if judge else "")
        + "".join(" " + shlex.quote(w) for w in timeout_flags(args))
    )
    prefix = plugin_prefix(args.backend, args.reference, files=PLUGIN_FILES)  # PYTHONPATH a plug-in needs
    for c in cases:
        c.reproduce = prefix + (c.reproduce or "python -m oracle check")
    threads = set_threads(args, model.cfg.hidden_size)
    case_flags = ["--case", args.case] if args.case is not None else []  # the probe's line runs what this ran
    fault = f"LOOPSPEC_FAULT={shlex.quote(os.environ['LOOPSPEC_FAULT'])} " if os.environ.get("LOOPSPEC_FAULT") else ""
    progress = Progress.for_args(args)
    plan = backend_plan(
        backend,
        model,
        cases,
        judge=judge,
        probe="auto" if args.drift else "off",
        suffix=suffix,
        probe_reproduce=fault + prefix + command(["check", *model_flags(args), *case_flags]) + suffix,
        timeout=args.timeout,
    )
    try:
        carried = (model_flags(args), prefix, suffix)  # what the shrunk case's reproduce lines carry
        if args.probe_requests:  # the drift probe alone (a shrunk drift or precision failure's line)
            v = shrinking.probe_only(args, *carried, model, backend, judge)
        else:
            v = verdict.judge(plan, Executor(early=early, on_phase=progress.phase))
        if not v.ok and not args.no_shrink and not args.probe_requests:  # the smallest failing case
            v.info["shrunk"] = shrinking.shrink_failure(args, *carried, v, model, cases, backend, judge, progress.phase)
    except JudgeFailed as e:
        raise OracleError(f"the reference --reference {args.reference} failed: {e}") from None
    finally:
        progress.done()
    v.info |= {"timeout_s": args.timeout, **threads}
    v.seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(v.to_json()))
    else:
        lines = backend_text(v, judge_name)
        lines[-1:-1] = shrinking.text_lines(v.info.get("shrunk"))
        print("\n".join(map(printable, lines)))  # a backend's name escaped
    if args.report:  # after the verdict: a page that cannot be written never hides it
        return write_report_last(v.ok, args.report, lambda: write_report(v, args.report), to_stderr=args.json)
    return 0 if v.ok else 1


def register(sub) -> None:
    p = command_parser(
        sub,
        "check",
        "Run the block and loop rounds on the FP32 reference, for the built-in cases or "
        "the case the round options describe, and compare them bit for bit; with --backend, judge a "
        "backend's rounds by the one judge (its dtype's tolerance row). Exit 0 all checks hold, "
        "1 a check failed (its place named), 2 bad usage or input, 3 internal error.",
    )
    add_round_options(p)
    p.add_argument(
        "--backend",
        default=None,
        help=f"judge a backend's rounds against the reference ({names_help()})",
    )
    p.add_argument(
        "--reference",
        default=None,
        help="with --backend: the backend that computes the judge's "
        "side (default: the NumPy FP32 reference; `jax` reaches the ouro-1.4b shape on a GPU)",
    )
    add_timeout_option(
        p,
        "seconds each backend call (loading it, session, add, step, submit, collect, remove, "
        "tokens) may take (default: 300); a call past it, or one that calls sys.exit(), is a failed "
        "check; refused without --backend",
    )
    add_threads_option(
        p,
        "torch intra-op threads (and NumPy's BLAS threads) when a backend loads torch; default: "
        "OMP_NUM_THREADS when set, else 1 for a model of hidden size below 512 (threads only add "
        "overhead there), else the free cores (usable cores - round(load average), at least 1); "
        "refused without --backend",
    )
    p.add_argument("--list-cases", action="store_true", help="print the built-in cases' names and exit")
    shrinking.add_options(p)  # --case-json, --shrink-budget, --no-shrink, --probe-requests
    p.add_argument(
        "--no-drift",
        dest="drift",
        action="store_false",
        help="with a bfloat16 or float16 --backend: skip "
        "the drift probe's verdicts (parameter drifts and error energy over the noise twin; docs/DESIGN.md, "
        "'Reduced precision'); refused without --backend or with an exact or float32 backend",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--quiet", action="store_true", help="print no progress lines on stderr (the phases: cases, probe, fit)"
    )
    p.add_argument(
        "--report",
        default=None,
        metavar="DIR",
        help="with --backend: also write the verdict as one "
        "HTML page with plots to DIR/index.html (matplotlib: the plots extra)",
    )
    p.set_defaults(func=run, preflight=check_preflight)


def check_preflight(args) -> None:
    """The option rules on the arguments alone, before any work (docs/cli_inputs.md)."""
    check_option_rules(args)
    shrinking.preflight(args)
    if args.report is not None and args.backend in (None, "reference"):
        raise OracleError(
            "--report writes a backend's verdict as a page; without --backend there is none: drop it or name a backend"
        )
    if args.report is not None:  # the folder and matplotlib before the run, not after it
        check_report_dir(args.report)
        from .html_report import require_plots

        require_plots()
    check_round_args(args)
