"""The rule every option follows (docs/cli_inputs.md, "Options that would do nothing"): an
option that would have no effect is refused with one `error: ...` line (exit 2) naming it and
why, before any work; never dropped in silence. A warning is the convention only where the
option does take effect but its result is outside what the model was made for (`-D` past the
trained loops: the logits past them are extrapolation).

Here live the rules of `check`'s own options (`check_option_rules`, on the arguments alone;
`refuse_ineffective`, once the backend is loaded) and the `--timeout` rule `trace record`
shares. The round options' rules (`--policy fixed` with `--temperature 0`, filters with
greedy requests, ...) are in oracle/cli/round_args.py `check_round_args`, which both `check`
and `trace record` run.
"""

from __future__ import annotations

from ..errors import OracleError

DEFAULT_TIMEOUT = 300.0  # seconds a backend call may take (`check`/`trace record --timeout`)
# what `--list-cases` never drops in silence: every other option given (a value other than None
# or False, read before check_round_args resolves the defaults), except these
LIST_CASES_KEEPS = ("command", "func", "preflight", "list_cases", "drift", "timeout", "seed", "round_args_checked")


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def backend_named(args) -> bool:
    """Whether a backend other than the reference is judged or recorded."""
    return getattr(args, "backend", None) not in (None, "reference")


def timeout_given(args) -> bool:
    """Whether --timeout was given (a value other than the default; None is the parser's default
    where it tells 'not given' apart)."""
    return args.timeout is not None and args.timeout != DEFAULT_TIMEOUT


def check_timeout(args) -> None:
    """`--timeout` bounds a backend's calls: without --backend (or with the reference) it would
    do nothing. Resolves the default in place."""
    if timeout_given(args) and not backend_named(args):
        raise OracleError(
            f"--timeout {args.timeout:g} bounds a backend's calls; without --backend (or with "
            f"--backend reference) no backend runs: drop it or name a backend"
        )
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT


def timeout_flags(args) -> list[str]:
    """['--timeout', S] for a reproduce line when --timeout was given (the rerun then has the
    same bound), else []."""
    return ["--timeout", repr(float(args.timeout))] if timeout_given(args) else []


def check_threads(args) -> None:
    """`--threads` sets torch's threads for a backend: without one it would do nothing (the
    reference runs on NumPy)."""
    if getattr(args, "threads", None) is not None and not backend_named(args):
        raise OracleError(
            f"--threads {args.threads} sets a backend's torch threads; without --backend the "
            f"reference runs on NumPy and would ignore it: drop it or name a backend"
        )


def check_option_rules(args) -> None:
    """`check`'s options on the arguments alone (before any work): --list-cases with any option
    it would drop, --no-drift, --timeout and --threads without --backend."""
    if args.list_cases:
        given = [
            flag(d) for d, v in vars(args).items() if d not in LIST_CASES_KEEPS and v is not None and v is not False
        ]
        given += ["--no-drift"] if getattr(args, "drift", True) is False else []
        given += ["--timeout"] if timeout_given(args) else []
        given += ["--seed"] if getattr(args, "seed", 0) != 0 else []
        if given:
            raise OracleError(
                f"--list-cases prints the built-in cases' names and exits; {given[0]} would be "
                f"ignored: drop one or the other"
            )
    if getattr(args, "drift", True) is False and not backend_named(args):
        raise OracleError(
            "--no-drift skips the drift verdict of a backend; without --backend there is none "
            "to skip: drop it or name a backend"
        )
    check_timeout(args)
    check_threads(args)


def refuse_ineffective(args, backend=None) -> None:
    """Once the backend is loaded: --no-drift with a backend the drift verdict never runs for
    (exact, or computing in float32/float64: the value rows are far tighter than any drift)."""
    if backend is None or getattr(args, "drift", True) is not False:
        return
    if backend.exact or backend.dtype in ("float32", "float64"):
        why = "is exact" if backend.exact else f"computes in {backend.dtype}"
        raise OracleError(
            f"--no-drift: backend {backend.name} {why}, and the drift verdict runs for bfloat16 "
            f"and float16 backends only; there is nothing to skip: drop --no-drift"
        )
