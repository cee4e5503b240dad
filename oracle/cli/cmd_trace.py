"""`python -m oracle trace record|diff|cut`: record a generation run's round traces (JSON +
NPZ), diff two trace files, RNG events first, and cut one to a round and a request (trace_cut.py).

A recorded trace's meta holds `reproduce`: the exact `trace record` command that writes the
same trace again (model, seed, every round option, mode, backend and output file), and the
recording backend's `backend`, `dtype`, `exact` and `tolerance_row`: `trace diff A B` judges B
by B's recorded row unless --tolerance is given."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from pathlib import Path

from .argtypes import add_threads_option, add_timeout_option, check_out_path, subcommand, subcommand_parsers
from ..runtime.backends import PLUGIN_FILES, BackendCallFailed, GuardedBackend, names_help
from ..runtime import isolated
from ..runtime.contract import tolerance_row
from ..judge.scenario import command
from ..judge.runner import REFERENCE, run_scenario
from ..judge.plans import verdict
from ..judge.plans.plan import INLINE, rules_plan, traces_plan
from .render import diff_json, diff_text
from . import trace_cut
from .environment import set_threads
from ..errors import OracleError, printable
from ..checkpoint import build_model
from ..config import ModelConfig
from ..sampling_params import SamplingParams
from .option_rules import check_threads, check_timeout, timeout_flags
from .round_args import check_penalty, check_round_args
from .round_case import custom_case, model_flags, plugin_prefix, round_flags
from .round_options import add_round_options
from ..tolerances import TOLERANCES
from ..trace_file import load_trace_file, model_identity, save_traces, weights_sha256
from ..judge.probe.calibration import HOST_HIDDEN, SIGMA


def record_command(args, out: str) -> str:
    """The `trace record` command that regenerates this recording into `out`."""
    shape = ["--case", args.case] if args.case is not None else round_flags(args, args.counts or [5, 3, 1])
    backend = ["--backend", args.backend, *timeout_flags(args)] if args.backend is not None else []
    keep = ["--keep-malformed"] if args.keep_malformed else []
    return plugin_prefix(args.backend, files=PLUGIN_FILES) + command(
        ["trace", "record", *model_flags(args), *shape, "--mode", args.mode, *backend, *keep, "--out", out]
    )


def check_record_args(args) -> None:
    """`trace record`'s preflight: --timeout and --threads only with a backend, then the round
    options (oracle/cli/round_args.py)."""
    check_timeout(args)
    check_threads(args)
    check_out_path(args.out, "--out", also=[args.out + ".npz"])  # before any work (files.check_output)
    check_round_args(args)


def record(args) -> int:
    bk = REFERENCE if args.backend is None else isolated.load(args.backend)  # before the model is built
    case = custom_case(args)
    model = build_model(args.preset, args.seed, args.checkpoint)
    threads = set_threads(args, model.cfg.hidden_size)
    try:
        traces = run_scenario(GuardedBackend(bk, args.timeout), model, case, args.mode).traces
    except BackendCallFailed as e:
        raise OracleError(f"backend {bk.name}: {e}") from None
    except Exception as e:  # noqa: BLE001 -- a plug-in's failure
        if bk is REFERENCE:
            raise
        raise OracleError(f"backend {bk.name} raised {type(e).__name__}: {e}") from None
    row = tolerance_row(bk)
    v = verdict.judge(rules_plan(traces, model, name=bk.name), INLINE)  # well formed (a rules plan)
    bad = [c["detail"] for c in v.failed if c["name"] == "malformed"]
    for line in bad:
        print(f"FAIL [malformed] {printable(line)}")
    if bad and not args.keep_malformed:
        print(
            f"FAILED: backend {printable(bk.name)} recorded {len(bad)} malformed request-round(s); nothing written "
            f"(--keep-malformed writes them, marked in meta.malformed)"
        )
        return 1
    identity = model_identity(
        model, args.preset, args.seed, None if args.checkpoint is None else Path(args.checkpoint).resolve()
    )
    save_traces(
        args.out,
        traces,
        {
            "case": case.name,
            "mode": args.mode,
            "reproduce": record_command(args, args.out),
            "check": case.reproduce,
            "backend": args.backend or "reference",
            "dtype": bk.dtype,
            "exact": bool(bk.exact),
            "tolerance_row": row,
            **threads,
            **({"malformed": bad} if bad else {}),
        },
        model=identity,
        params=case.params_for(model),
    )
    n_ev = sum(len(t.rng_events) for t in traces)
    n, plural = len(traces), lambda k: "" if k == 1 else "s"
    print(
        f"recorded {n} round{plural(n)} ({args.mode}, {printable(bk.name)}, tolerance row {row}, {n_ev} RNG "
        f"event{plural(n_ev)}) to {printable(args.out)} and {printable(args.out)}.npz"
        + (
            f"; FAILED: {len(bad)} malformed request-round(s) kept (--keep-malformed; meta.malformed lists them)"
            if bad
            else ""
        )
    )
    return 1 if bad else 0


def recorded_row(path, meta: dict) -> str:
    """The tolerance row a trace's recording names (`exact` when it names none)."""
    row = meta.get("tolerance_row", "exact")
    if row not in TOLERANCES:
        raise OracleError(
            f"trace file {path}: malformed: meta tolerance_row {row!r} is not a row of the "
            f"tolerance table ({', '.join(TOLERANCES)})"
        )
    return row


def checked_file(path):
    """A trace file (trace_file.load_trace_file) whose model config and sampling parameters are
    valid values: every token id they name in the model's vocabulary, every value in range."""
    f = load_trace_file(path)
    try:
        cfg = ModelConfig(**f.model["config"])
    except (TypeError, OracleError) as e:
        raise OracleError(f"trace file {path}: malformed: model.config is not a model config ({e})") from None
    where = [("params", f.params)] + [(f"round {n} params", t.params) for n, t in enumerate(f.traces)]
    for what, params in where:
        for rid, p in params.items():
            try:
                sp = SamplingParams(**p)
                sp.check_vocab(cfg.vocab_size, "ids")
                check_penalty(sp.repetition_penalty, "repetition_penalty")
            except (TypeError, OracleError) as e:
                raise OracleError(f"trace file {path}: malformed: {what} of request {rid}: {e}") from None
    for n, t in enumerate(f.traces):  # the tokens a round started from: ids of the vocabulary, as `model --tokens`
        for rid, toks in t.prefix.items():
            bad = [x for x in toks if x >= cfg.vocab_size]
            if bad:
                raise OracleError(
                    f"trace file {path}: round {n} is malformed: request {rid}: prefix token {bad[0]} is "
                    f"outside the vocabulary [0, {cfg.vocab_size})"
                )
    return f


def identity_difference(fa, fb) -> tuple | None:
    """(FIELD, A's value, B's value) of the first difference of model or sampling parameters, or None.
    Two files of the same weights and config are of one model (a preset and a checkpoint saved
    from it included)."""
    ma, mb = fa.model, fb.model
    if (ma["weights_sha256"], ma["config"]) != (mb["weights_sha256"], mb["config"]):
        for key in ("preset", "seed"):
            if key in ma and key in mb and ma[key] != mb[key]:
                return f"model.{key}", ma[key], mb[key]
        if ("checkpoint" in ma) != ("checkpoint" in mb):
            desc = lambda m: (
                f"checkpoint {m['checkpoint']}" if "checkpoint" in m else f"preset {m['preset']} seed {m['seed']}"
            )
            return "model", desc(ma), desc(mb)
        for key in ma["config"].keys() | mb["config"].keys():
            if ma["config"].get(key) != mb["config"].get(key):
                return f"model.config.{key}", ma["config"].get(key), mb["config"].get(key)
        return "model.weights_sha256", ma["weights_sha256"], mb["weights_sha256"]
    if sorted(fa.params) != sorted(fb.params):
        return "params (requests)", sorted(fa.params), sorted(fb.params)
    for rid in sorted(fa.params):
        pa, pb = asdict(SamplingParams(**fa.params[rid])), asdict(SamplingParams(**fb.params[rid]))
        for key in pa:
            if pa[key] != pb[key]:
                return f"params of request {rid}: {key}", pa[key], pb[key]
    return None


def rerun_path(a: str, b: str) -> str:
    """A new file beside A for a re-recording of A: never A or B."""
    taken = {Path(x).resolve() for x in (a, b)} | {Path(x + ".npz").resolve() for x in (a, b)}
    stem = str(Path(a).with_suffix("")) if Path(a).suffix == ".json" else a
    out = stem + ".rerun.json"
    while Path(out).resolve() in taken or Path(out + ".npz").resolve() in taken:
        out = out[: -len(".json")] + ".rerun.json"
    return out


def diff_reproduce(args, meta_a: dict, row: str) -> str:
    """The line that reproduces this diff: A's recording re-run into a new file (never over A
    or B), then the same diff against B. '' when A carries no `trace record` line."""
    line = meta_a.get("reproduce", "")
    try:
        words = shlex.split(line)
    except ValueError:
        return line
    if len(words) < 2 or words[-2] != "--out" or "record" not in words or not line.endswith(shlex.quote(words[-1])):
        return line
    new = rerun_path(args.a, args.b)
    tol = ["--tolerance", args.tolerance] if args.tolerance else []
    return (
        line[: -len(shlex.quote(words[-1]))] + shlex.quote(new) + " && " + command(["trace", "diff", new, args.b, *tol])
    )


# check -> the Report counter that says it compared something (0: it was not made)


def traced_model(f, path) -> tuple:
    """(the model a trace file names, rebuilt, or None; why not): its preset and seed, or its
    checkpoint folder, holding the recorded weights (weights_sha256), below the twin's size."""
    m = f.model
    if ModelConfig(**m["config"]).hidden_size >= HOST_HIDDEN:
        return None, f"hidden size {m['config']['hidden_size']}: the twin is not run on the host"
    if "checkpoint" in m and not Path(m["checkpoint"]).is_dir():
        return None, f"checkpoint {m['checkpoint']} (named by {path}) is not a folder here"
    model = build_model(checkpoint=m["checkpoint"]) if "checkpoint" in m else build_model(m["preset"], m["seed"])
    if weights_sha256(model.weights) != m["weights_sha256"]:
        return None, f"the weights {path} names are not those its model now loads (weights_sha256)"
    return model, ""


def diff(args) -> int:
    fa, fb = checked_file(args.a), checked_file(args.b)
    differ = identity_difference(fa, fb)
    if differ:
        key, va, vb = differ
        raise OracleError(
            f"trace diff: {key} differs: {va!r} in {args.a}, {vb!r} in {args.b}; traces of "
            f"different models or sampling parameters are not compared"
        )
    a, b, meta_a, meta_b = fa.traces, fb.traces, fa.meta, fb.meta
    row = args.tolerance or recorded_row(args.b, meta_b)
    # a reduced-precision row: judged by the noise twin of the model the traces name, as check --backend
    model, why = traced_model(fa, args.a) if row in SIGMA else (None, "")
    plan = traces_plan(
        a, b, row, model, reproduce=diff_reproduce(args, meta_a, row), names=(args.a, args.b), sides=("B", "A")
    )
    v = verdict.judge(plan)
    if args.json:
        out = diff_json(v, why)
        out["cut"] = trace_cut.cut_lines(v, args.a, args.b, a)  # issue 44: the smallest pair, for a bug report
        print(json.dumps(out))
    else:
        lines = diff_text(v, why, recorded=not args.tolerance)
        head = lines[0].replace(f"{args.b} judged against {args.a}", f"B {args.b} judged against A {args.a}", 1)
        cut = [] if v.ok else trace_cut.cut_lines(v, args.a, args.b, a)  # issue 44: the smallest pair
        print("\n".join(printable(line) for line in [head, *lines[1:], *cut]))
    return 0 if v.ok else 1


def register(sub) -> None:
    tsub = subcommand_parsers(
        sub,
        "trace",
        "Record the round traces of a generation run (JSON + NPZ), diff two trace files (exit 1 when "
        "they differ, 2 when a file is not a valid trace), or cut one to a round and a request.",
        "record|diff|cut",
    )
    r = tsub.add_parser(
        "record",
        help="record the round traces of a generation run",
        description="Run a case on the reference (or --backend) and write its round traces to "
        "--out (JSON) and --out.npz (arrays); the JSON records the command that "
        "regenerates it and the backend's tolerance row.",
    )
    add_round_options(r)
    r.add_argument("--mode", default="loop", choices=("block", "loop"), help="which round to run")
    r.add_argument(
        "--backend",
        default=None,
        metavar="SPEC",
        help=f"record this backend's traces ({names_help()}; default: the reference)",
    )
    add_timeout_option(r, "with --backend: seconds each backend call may take (default: 300)")
    add_threads_option(
        r, "with --backend: torch intra-op threads when the backend loads torch (default: the free cores)"
    )
    r.add_argument(
        "--keep-malformed",
        action="store_true",
        help="write the file even when a recorded round is malformed (NaN logits, a token outside the "
        "vocabulary, ...); the rounds are listed in meta.malformed and the exit code is still 1",
    )
    r.add_argument("--out", required=True, metavar="FILE", help="trace file (JSON); arrays go to FILE.npz")
    r.set_defaults(func=record, preflight=check_record_args)
    d = subcommand(
        tsub,
        "diff",
        help="compare two trace files (exit 1 on a difference)",
        description="Compare two trace files, RNG events first; exit 0 identical, 1 they "
        "differ, 2 a file is missing, malformed or paired with the wrong NPZ.",
        func=diff,
    )
    d.add_argument("a", metavar="A", help="the reference trace file (JSON, with A.npz beside it)")
    d.add_argument("b", metavar="B", help="the trace file compared with A (JSON, with B.npz beside it)")
    d.add_argument(
        "--tolerance",
        default=None,
        choices=tuple(TOLERANCES),
        help="exact, or a dtype's tolerance row (default: the row B was recorded with, exact for the reference)",
    )
    d.add_argument("--json", action="store_true", help="print one JSON object")
    trace_cut.register(tsub, checked_file)  # `trace cut`: one round, one request (issue 44)
