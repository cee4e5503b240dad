"""`check --backend`'s failing verdict, shrunk (issue 44): the options (--shrink-budget, --no-shrink,
--case-json's declaration, --probe-requests), the search through oracle/judge/shrinker/shrink.py with each
candidate in the form its reproduce line gives it (--case-json's round trip, oracle/cli/case_json.py),
and its renderings: text lines, the `shrunk` object of --json and of the HTML page.

cmd_check hands in what the reproduce lines carry (`flags`: the model's flags, round_case.model_flags;
`prefix`: the PYTHONPATH a plug-in needs; `suffix`: --backend X [--reference Y] [--timeout S]); the
search is oracle/judge/shrinker/shrink.py, each candidate judged there by the one verdict.

The shrunk case's reproduce line is `python -m oracle check --preset P --seed S --case-json '...'
--backend X`; a drift or precision failure shrinks to fewer probe requests, whose line is `python -m
oracle check --preset P --seed S --backend X --probe-requests N` (the drift probe alone, N requests).
"""

from __future__ import annotations

import json
import os
import re
import shlex

from . import case_json
from .argtypes import int_at_least, positive_seconds
from ..errors import OracleError
from ..judge.comparison.report import Failure, describe
from ..judge.shrinker import shrink as search
from ..judge.scenario import command

# seconds the search may take by default: with a tiny-model failure (a check of about 10-40 s on
# two cores) the whole command stays under a minute or so (docs/results.md, "Shrinking failing checks")
DEFAULT_BUDGET = 20.0
MAX_PROBE_REQUESTS = 256
# check's options that say nothing about a case: every other one given (a round option, --case,
# --case-json) would be ignored by --probe-requests (read before check_round_args fills defaults)
NOT_CASE = (
    "command",
    "func",
    "preflight",
    "preset",
    "checkpoint",
    "seed",
    "allow_large",
    "backend",
    "reference",
    "timeout",
    "threads",
    "list_cases",
    "drift",
    "json",
    "quiet",
    "report",
    "shrink_budget",
    "no_shrink",
    "probe_requests",
    "round_args_checked",
)
_REPRODUCE = re.compile(r" \(reproduce: .*\)$", re.DOTALL)


def add_options(p) -> None:
    p.add_argument(
        "--case-json",
        default=None,
        metavar="JSON",
        help="run one case given as JSON: prompts, params (SamplingParams JSON per request), rounds "
        "(request id -> T_i per round), d and D or depths, policy; what a shrunk failure's reproduce "
        "line carries (docs/cli_inputs.md)",
    )
    p.add_argument(
        "--shrink-budget",
        type=positive_seconds,
        default=None,
        metavar="S",
        help=f"with --backend: when the check fails, seconds to search for the smallest case that still "
        f"fails the same way (default: {DEFAULT_BUDGET:g}); the smallest found so far when it runs out",
    )
    p.add_argument("--no-shrink", action="store_true", help="with --backend: do not shrink a failing check's case")
    p.add_argument(
        "--probe-requests",
        type=int_at_least(2),
        default=None,
        metavar="N",
        help="with a bfloat16 or float16 --backend: run the drift probe alone, with N requests (the "
        "reproduce line of a shrunk drift or precision failure)",
    )


def preflight(args) -> None:
    """The options' rules on the arguments alone (docs/cli_inputs.md): each needs --backend; a budget
    with --no-shrink; --probe-requests with the round options or --no-drift, or above its limit."""
    judged = getattr(args, "backend", None) not in (None, "reference")
    for flag, given in (
        ("--shrink-budget", args.shrink_budget is not None),
        ("--no-shrink", args.no_shrink),
        ("--probe-requests", args.probe_requests is not None),
    ):
        if given and not judged:
            raise OracleError(
                f"{flag} acts on a backend's verdict; without --backend (or with --backend reference) "
                f"there is none: drop it or name a backend"
            )
    if args.no_shrink and args.shrink_budget is not None:
        raise OracleError("--shrink-budget bounds the search --no-shrink turns off: drop one or the other")
    if args.probe_requests is not None:
        if args.probe_requests > MAX_PROBE_REQUESTS and not args.allow_large:
            raise OracleError(
                f"--probe-requests {args.probe_requests} exceeds the limit {MAX_PROBE_REQUESTS}; "
                f"pass --allow-large to run it anyway"
            )
        given = [k for k, v in vars(args).items() if k not in NOT_CASE and v is not None and v is not False]
        if given:
            raise OracleError(
                f"--probe-requests runs the drift probe alone, no case; --{given[0].replace('_', '-')} would be "
                f"ignored: drop one or the other"
            )
        if getattr(args, "drift", True) is False:
            raise OracleError("--probe-requests runs the drift probe that --no-drift skips: drop one or the other")


def fault_prefix() -> str:
    f = os.environ.get("LOOPSPEC_FAULT")
    return f"LOOPSPEC_FAULT={shlex.quote(f)} " if f else ""


def probe_line(flags: list, k: int, prefix: str, suffix: str) -> str:
    return fault_prefix() + prefix + command(["check", *flags, "--probe-requests", str(k)]) + suffix


def probe_only(args, flags: list, prefix: str, suffix: str, model, backend, judge):
    """`check --backend X --probe-requests N`: the drift probe's two verdicts alone, over N requests
    (oracle/judge/shrinker/shrink.py probe_verdict: a probe plan over probe_runs.probe_runs)."""
    if backend.exact or backend.dtype not in ("bfloat16", "float16"):
        why = "is exact" if backend.exact else f"computes in {backend.dtype}"
        raise OracleError(
            f"--probe-requests: backend {backend.name} {why}; the drift probe judges bfloat16 and float16 "
            f"backends only: drop --probe-requests"
        )
    n = args.probe_requests
    line = probe_line(flags, n, prefix, suffix)
    return search.probe_verdict(backend, model, n, judge=judge, timeout=args.timeout, reproduce=line)


def shrink_failure(args, flags: list, prefix: str, suffix: str, v, model, cases, backend, judge, on_phase=None):
    """The failing verdict v shrunk (None where it names nothing to shrink): the `shrunk` object of
    --json (also v.info["shrunk"], so the HTML page shows it)."""
    head = fault_prefix() + prefix

    def prepare(case):
        # the line's own decode (a candidate's repetition penalty is the original's, whose range its
        # own options or built-in case checked, or off)
        text = case_json.encode(case)
        try:
            ready = case_json.decode(text, model.cfg, args.allow_large, None, getattr(args, "reference", None))
        except OracleError:
            return None
        words = ["check", *flags, "--case-json", text] + (["--allow-large"] if args.allow_large else [])
        ready.reproduce = head + command(words)
        ready.name = "shrunk"
        return ready

    def heard(n, what):
        if on_phase is not None:
            on_phase("shrink", f"candidate {n}: {what}")

    budget = DEFAULT_BUDGET if args.shrink_budget is None else args.shrink_budget
    res = search.shrink(
        v,
        cases,
        backend,
        model,
        judge=judge,
        timeout=args.timeout,
        suffix=suffix,
        prepare=prepare,
        probe_reproduce=lambda k: probe_line(flags, k, prefix, suffix),
        budget=budget,
        on_candidate=heard,
    )
    if res is None:
        return None
    return as_json(res, flags, prefix, suffix, budget)


def _with_fault(line: str) -> str:
    """A reproduce line with LOOPSPEC_FAULT in front where the check ran under one (a kernel fault)."""
    return line if line.startswith("LOOPSPEC_FAULT=") else fault_prefix() + line


def _detail(check: dict | None) -> str:
    if check is None:
        return ""
    return f"[{check['name'].rsplit(': ', 1)[-1]}] " + _text(check["detail"], check.get("failure"))


def _text(detail: str, failure: dict | None) -> str:
    """A failure's text without its reproduce line: its record's (report.describe), else the probe's
    line less its reproduce suffix."""
    if failure:
        return describe(Failure.from_json(failure), reproduce=False)
    return _REPRODUCE.sub("", detail)


def as_json(res, flags: list, prefix: str, suffix: str, budget: float) -> dict:
    t = res.target
    original_failure = f"[{t.cls}] " + _text(t.detail, t.failure)
    if t.probe:
        n0 = res.original_requests
        original = {
            "probe_requests": n0,
            "description": f"the drift probe, {n0} requests",
            "reproduce": probe_line(flags, n0, prefix, suffix).replace(f" --probe-requests {n0}", ""),
            "failure": original_failure,
        }
        shrunk = (
            {
                "probe_requests": res.requests,
                "description": f"the drift probe, {res.requests} requests",
                "reproduce": probe_line(flags, res.requests, prefix, suffix),
            }
            if res.smaller
            else None
        )
    else:
        original = {
            "case": t.case.name,
            "description": res.original_description,
            "reproduce": _with_fault(t.case.reproduce + suffix) if t.case.reproduce else "",
            "failure": original_failure,
        }
        shrunk = (
            {
                "case": json.loads(case_json.encode(res.case)),
                "description": res.description,
                "reproduce": res.case.reproduce + suffix,
            }
            if res.smaller
            else None
        )
    if shrunk is not None:
        shrunk["failure"] = _detail(res.failure)
    return {
        "class": t.cls,
        "key": t.key,
        "original": original,
        "shrunk": shrunk,
        "candidates": res.candidates,
        "refused": res.refused,
        "seconds": round(res.seconds, 2),
        "budget_s": budget,
        "partial": res.partial,
        "moves": res.moves,
    }


def text_lines(s: dict | None) -> list[str]:
    """`check --backend`'s text for the shrunk case: the search, the original and the shrunk one."""
    if not s:
        return []
    how = f"{s['candidates']} candidate run{'s' if s['candidates'] != 1 else ''} in {s['seconds']:.1f} s"
    if s["partial"]:
        how += f", PARTIAL: the budget of {s['budget_s']:g} s ran out (--shrink-budget)"
    o, n = s["original"], s["shrunk"]
    lines = [
        f"  shrunk [{s['class']}]" + (f" ({s['key']})" if s["key"] else "") + f": {how}",
        f"    original: {o['description']}",
        f"      {o['failure']}",
        f"      reproduce: {o['reproduce']}",
    ]
    if n is None:
        lines.append("    no smaller case failed the same way" + (" before the budget ran out" if s["partial"] else ""))
        return lines
    return lines + [
        f"    shrunk:   {n['description']}",
        f"      {n['failure']}",
        f"      reproduce: {n['reproduce']}",
    ]
