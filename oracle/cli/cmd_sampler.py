"""`python -m oracle sampler --backend package.module:factory`: judge a speculative rejection
sampler alone (oracle/sampler/: the contract, the rules, the statistics; docs/DESIGN.md, "The
sampler judge"). Exit 0 when every case passes, 1 when one fails, 2 for bad input (a sampler
that cannot be loaded or breaks the contract's shapes, --exact with one that takes no uniforms)."""

from __future__ import annotations

import json
import sys

from .argtypes import check_report_dir, command_parser, finite_float, int_at_least, positive_seconds, probability
from .argtypes import write_report_last
from ..errors import OracleError, printable


def register(subparsers) -> None:
    p = command_parser(
        subparsers,
        "sampler",
        "Judge a speculative rejection sampler alone: drawn cases, each request's outcome (accepted drafts, "
        "final token) against the exact distribution of oracle.sampling's rules (chi-square with stated power), "
        "or, with --exact, its decisions value by value on the oracle's uniforms.",
    )
    p.add_argument(
        "--backend",
        required=True,
        metavar="SPEC",
        help="the sampler: reference, torch, or package.module:factory (oracle/sampler/contract.py)",
    )
    p.add_argument("--exact", action="store_true", help="pass the oracle's uniforms; compare every decision exactly")
    p.add_argument("--cases", type=int_at_least(1), default=20, metavar="N", help="cases to draw")
    p.add_argument("--seed", type=int_at_least(0), default=0, metavar="N", help="seed of the cases and the draws")
    p.add_argument("--case-json", default=None, metavar="JSON", help="judge this one case (a reproduce line's)")
    p.add_argument(
        "--budget", type=positive_seconds, default=None, metavar="S", help="stop drawing new cases after S seconds"
    )
    p.add_argument("--fail-fast", action="store_true", help="stop drawing new cases after the first failing one")
    p.add_argument("--shrink-budget", type=finite_float, default=30.0, metavar="S", help="seconds to shrink a failure")
    p.add_argument("--tv", type=probability, default=0.05, metavar="DELTA", help="TV distance to detect with 99%%")
    p.add_argument("--alpha", type=probability, default=1e-3, metavar="A", help="family-wise false-alarm rate")
    p.add_argument("--max-draws", type=int_at_least(1), default=200_000, metavar="N", help="draws per case, at most")
    p.add_argument("--json", action="store_true", help="print the run as JSON (schema oracle.sampler/1)")
    p.add_argument("--report", default=None, metavar="DIR", help="HTML page with each case's distribution plot")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run_command, preflight=preflight)


def preflight(args) -> None:
    if args.report is not None:  # the folder and matplotlib before the run
        check_report_dir(args.report)
        from ..sampler.report import require_plots

        require_plots()
    if args.shrink_budget < 0:
        raise OracleError(f"--shrink-budget must be >= 0 seconds, got {args.shrink_budget:g}")
    if args.alpha >= 1:
        raise OracleError("--alpha must be below 1")


def _say(quiet: bool):
    import time

    t0 = time.perf_counter()
    return (
        (lambda _: None)
        if quiet
        else (lambda s: print(f"sampler: {s} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr))
    )


def run_command(args) -> int:
    import numpy as np

    from ..sampler.cases import draw_case, from_json
    from ..sampler.contract import load_sampler
    from ..sampler.judge import Settings
    from ..sampler.report import text_lines, write_report
    from ..sampler.run import family_size, run

    sampler = load_sampler(args.backend)
    if args.exact and not sampler.takes_uniforms:
        raise OracleError(
            f"sampler {printable(args.backend)!r} does not take uniforms (takes_uniforms is False): "
            "--exact needs one that does; drop --exact to judge its distribution"
        )
    if not args.exact:
        try:
            import scipy.stats  # noqa: F401
        except ImportError:
            raise OracleError("the distribution mode needs scipy: pip install scipy (or use --exact)") from None
    if args.case_json is not None:
        cases = [from_json(args.case_json, "case")]
    else:
        rng = np.random.default_rng([args.seed, 1])
        cases = [draw_case(rng, f"case {n}") for n in range(args.cases)]
    st = Settings(args.exact, args.alpha, args.tv, 0.99, args.max_draws, family_size(cases, args.exact, sampler))
    say = _say(args.quiet)
    r = run(sampler, args.backend, cases, st, args.seed, args.budget, args.shrink_budget, say, args.fail_fast)
    if args.json:
        print(json.dumps(r.to_json(), indent=1))
    else:
        print("\n".join(text_lines(r)))
    if args.report:
        return write_report_last(r.ok, args.report, lambda: write_report(r, args.report), to_stderr=args.json)
    return 0 if r.ok else 1
