"""`python -m oracle <command>`: each command lives in oracle/cmd_<name>.py with
`register(subparsers)` that adds its parser and sets `func(args) -> int`."""
from __future__ import annotations

import argparse
import importlib
import sys

from .errors import OracleError

COMMANDS = ("check", "schedule", "model", "cost", "trace", "bench")


class OneLineParser(argparse.ArgumentParser):
    """Usage errors are one `error: ...` line on stderr (exit 2), like OracleError."""

    def error(self, message: str):
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


LIST_OPTIONS = ("--counts", "--tokens", "--batch")


def _join_list_values(argv: list[str]) -> list[str]:
    """`--counts -1,2` would read as an option; pass it as `--counts=-1,2` so the value's
    own check reports it."""
    out, n = [], 0
    while n < len(argv):
        if argv[n] in LIST_OPTIONS and n + 1 < len(argv) and argv[n + 1].startswith("-"):
            out.append(f"{argv[n]}={argv[n + 1]}")
            n += 2
        else:
            out.append(argv[n])
            n += 1
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m oracle",
                                     description="loopspec-oracle: reference and oracle for loop-level speculative rounds")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"oracle.cmd_{name}")
        except ModuleNotFoundError as e:
            if e.name != f"oracle.cmd_{name}":
                raise
            continue
        mod.register(sub)
    return parser


def csv_ints(text: str) -> list[int]:
    """argparse type for '5,3,1'."""
    try:
        return [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["check"]   # the main job
    args = parser.parse_args(_join_list_values(list(argv)))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (OracleError, FileNotFoundError, NotADirectoryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
