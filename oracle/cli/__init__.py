"""`python -m oracle <command>`: each command lives in the module COMMANDS names
(oracle/cli/cmd_<name>.py; `bench` in bench/cli.py), whose `register(subparsers)` adds its
parser and sets `func(args) -> int`; HELP holds each command's one-line help. A run imports
the module of its own command only (`build_parser(argv)`): `--help` lists every command from
HELP. Argument types live in oracle/cli/argtypes.py.

Exit codes, the same for every command:
    0  ok
    1  a check failed or two traces differ
    2  bad usage or input: one `error: ...` line on stderr
    3  internal error of the oracle: one line naming the exception and the file where its
       traceback was saved
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import tempfile
import time
import traceback

from ..errors import OracleError, Refused, one_line

# command -> "module:register". Commands resolve by name, like backends (oracle/runtime/backends.py), so
# the oracle imports nothing of the engines it judges (`bench` lives in its own package, which
# imports the torch kernels), and a run imports its own command's module only.
COMMANDS = {
    "check": "oracle.cli.cmd_check:register",
    "schedule": "oracle.cli.cmd_schedule:register",
    "model": "oracle.cli.cmd_model:register",
    "cost": "oracle.cli.cmd_cost:register",
    "trace": "oracle.cli.cmd_trace:register",
    "localize": "oracle.cli.cmd_localize:register",
    "bench": "bench.cli:register",
    "sampler": "oracle.cli.cmd_sampler:register",
}
# command -> its help line in `python -m oracle --help` (each register() passes the same one)
HELP = {
    "check": "compare block and loop rounds on the reference (the main job)",
    "schedule": "print the block and loop schedules of one round",
    "model": "run a prompt through every loop (no KV cache); load or save checkpoints",
    "cost": "predict block vs loop round time from a c-table",
    "trace": "record round traces, diff two trace files, or cut one to a round and a request",
    "localize": "where two runs of one row part, bitwise: the first operation named (any backend)",
    "bench": "c(M) tables and paired block-vs-loop round benchmarks (torch backend)",
    "sampler": "judge a speculative rejection sampler alone (module:factory) against exact distributions",
}
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows `(default: X)` after each option's help unless the help already says its default
    or the option is a switch."""

    def _get_help_string(self, action):
        text = action.help or ""
        switch = action.nargs == 0  # store_true and friends
        if (
            "default" in text
            or action.default is None
            or action.default is argparse.SUPPRESS
            or switch
            or not action.option_strings
        ):
            return text
        return text + " (default: %(default)s)"


class OneLineParser(argparse.ArgumentParser):
    """Usage errors are one `error: ...` line on stderr (exit 2), like OracleError. Subparsers
    are made with the parent's class, so every command's parser behaves the same."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        print(f"error: {self.prog}: {one_line(message)}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


LIST_OPTIONS = (
    "--counts",
    "--tokens",
    "--batch",
    "--rows",
    "--depths",
    "--stop-tokens",
    "--banned-tokens",
    "--logit-bias",
    "--bad-words",
    "--presence-penalty",
    "--frequency-penalty",
    "--repetition-penalty",
    "--min-tokens",
)


def _join_list_values(argv: list[str]) -> list[str]:
    """`--counts -1,2` would read as an option; pass it as `--counts=-1,2` so the value's
    own check reports it."""
    out, n = [], 0
    while n < len(argv):
        if (
            argv[n] in LIST_OPTIONS
            and n + 1 < len(argv)
            and argv[n + 1].startswith("-")
            and argv[n + 1] not in ("-h", "--help", "--")
        ):
            out.append(f"{argv[n]}={argv[n + 1]}")
            n += 2
        else:
            out.append(argv[n])
            n += 1
    return out


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopspec-oracle")
    except PackageNotFoundError:
        return "unknown (not installed)"


def installed(target: str) -> bool:
    """Whether the top-level package of a command's module is in this install (found, not
    imported: `bench` may be left out)."""
    return importlib.util.find_spec(target.partition(":")[0].split(".")[0]) is not None


def chosen_command(argv) -> str | None:
    """The command argv names: its first word that is not an option (the top-level options
    take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The parser of `python -m oracle`. argv None: every command's full parser (for tools and
    tests that walk every option). Else only the command argv names is imported and gets its
    full parser; the others are listed by name and HELP line."""
    parser = OneLineParser(
        prog="python -m oracle",
        description="loopspec-oracle: reference and oracle for loop-level speculative rounds. "
        "Exit codes: 0 ok, 1 a check failed or traces differ, 2 bad usage or "
        "input, 3 internal error.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"loopspec-oracle {package_version()}",
        help="print the package version and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = None if argv is None else chosen_command(argv)
    for name, target in COMMANDS.items():
        if not installed(target):  # a package left out of this install
            continue
        if argv is not None and name != chosen:
            sub.add_parser(name, help=HELP[name])
            continue
        mod_name, _, attr = target.partition(":")
        getattr(importlib.import_module(mod_name), attr)(sub)
    return parser


# ---- running a command ----


def save_traceback() -> str:
    """Write the current exception's traceback to a temp file; return its path."""
    fd, path = tempfile.mkstemp(prefix=f"oracle-traceback-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write(traceback.format_exc())
    return path


def _one_line(e: BaseException) -> str:
    return one_line(str(e)) or type(e).__name__


def exit_now(code: int) -> None:
    """End the process with `code` once stdout and stderr are flushed and every verdict child
    (oracle/judge/plans/worker.py) and plug-in process (oracle/runtime/isolated.py) is stopped, without the
    interpreter's teardown (os._exit). Every file the commands write is closed by then; atexit
    handlers do not run (oracle/runtime/isolated.py's is for other callers)."""
    for name in ("oracle.judge.plans.worker", "oracle.runtime.isolated"):  # verdict children, plug-ins' processes
        module = sys.modules.get(name)
        if module is not None:
            module.stop_all()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with the stream closed
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to say
            pass
    os._exit(code)


# NumPy's floating-point warnings ("overflow encountered in divide"): the oracle checks the values it
# computes itself (non-finite logits are refused, a judge's side that overflows fails in one line), so
# these would only repeat it on stderr, in words that name no option (issue 62)
NUMERIC_WARNINGS = r"(overflow|underflow|invalid value|divide by zero) encountered"


def prepare_streams() -> str | None:
    """stdout and stderr write any name in any encoding (`PYTHONIOENCODING=ascii` and a file named
    trace_\u00fc.json: written as trace_\\xfc.json, never a UnicodeEncodeError), and NumPy's
    floating-point warnings are not shown; the error when stdout is closed (`>&-`), else None."""
    import warnings

    warnings.filterwarnings("ignore", message=NUMERIC_WARNINGS, category=RuntimeWarning)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):  # not a TextIOWrapper, or closed
            pass
    if sys.stdout is None:
        return "stdout is closed: the command has nowhere to print its result (give it a file or > /dev/null)"
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        argv = ["check"]  # the main job
    closed = prepare_streams()
    if closed:
        if sys.stderr is not None:
            print(f"error: {closed}", file=sys.stderr)
        return EXIT_USAGE
    try:
        parser = build_parser(argv)
        # Python 3.11's argparse drops a value of "--" (`--seed=--`) and stores [] untyped
        bad = next((a for a in argv if a.startswith("-") and a.endswith("=--")), None)
        if bad is not None:
            print(f"error: python -m oracle: {one_line(bad)}: '--' is not a value", file=sys.stderr)
            return EXIT_USAGE
        try:
            args = parser.parse_args(_join_list_values(argv))
        except SystemExit as e:  # --help, --version (0) or a usage error already printed (2)
            return e.code if isinstance(e.code, int) else EXIT_USAGE
        if not getattr(args, "func", None):
            print(
                f"error: python -m oracle: give a command ({' | '.join(COMMANDS)}; --help lists them)", file=sys.stderr
            )
            return EXIT_USAGE
        from .environment import check_environment

        check_environment(args)
        if getattr(args, "preflight", None):  # a command's checks of its options, before any work
            args.preflight(args)
        return int(args.func(args) or 0)
    except (OracleError, Refused) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:  # a file named by the user: missing, a directory, unreadable
        if isinstance(e, BrokenPipeError):
            return EXIT_OK
        where = f": {e.filename}" if e.filename else ""
        print(f"error: {one_line(e.strerror or str(e))}{one_line(where)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug in the oracle
        path = save_traceback()
        print(f"internal error: {type(e).__name__}: {_one_line(e)} (traceback saved to {path})", file=sys.stderr)
        return EXIT_INTERNAL
