"""argparse value types and output-file checks shared by the commands (oracle/cmd_*.py and
bench/cli.py). Each type refuses a bad value with a message naming it; argparse turns
that into one `error: ...` line (exit 2)."""

from __future__ import annotations

import argparse
import math
import sys
import threading
from pathlib import Path

from ..errors import OracleError, one_line, printable


def csv_ints(text: str) -> list[int]:
    """argparse type for '5,3,1'; empty items ('5,,3', '5,') are refused."""
    items = text.split(",")
    if any(x.strip() == "" for x in items):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers without empty items, got {text!r}")
    try:
        return [int(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def int_at_least(low: int):
    """argparse type: an integer >= low."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum {low}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def finite_float(text: str) -> float:
    """argparse type: a finite float (no nan, no inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def probability(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    value = finite_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


# the longest `--timeout`: 1e6 s (11.6 days), well inside what threading's waits accept
# (threading.TIMEOUT_MAX, about 9.2e9 s on Linux; beyond it they raise OverflowError)
MAX_SECONDS = min(1e6, threading.TIMEOUT_MAX)


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds in (0, MAX_SECONDS] (`--timeout`)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text} s is beyond the longest timeout, {MAX_SECONDS:g} s")
    return value


def depth_pairs(text: str) -> list[tuple[int, int]]:
    """argparse type: '2:4,1:3' -> [(2, 4), (1, 3)] (range checks are the planner's)."""
    out = []
    for item in text.split(","):
        d, sep, D = item.strip().partition(":")
        try:
            out.append((int(d), int(D)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not a pair d_i:D_i of integers") from None
        if not sep:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not a pair d_i:D_i of integers")
    return out


def token_biases(text: str) -> dict[int, float]:
    """argparse type: '5:2.0,9:-1.5' -> {5: 2.0, 9: -1.5} (`--logit-bias`)."""
    out = {}
    for item in text.split(","):
        t, sep, b = item.strip().partition(":")
        try:
            t, b = int(t), float(b)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not a pair token:bias") from None
        if not sep or not math.isfinite(b):
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not a pair token:bias with a finite bias")
        if t in out:
            raise argparse.ArgumentTypeError(f"token {t} is given twice")
        out[t] = b
    return out


def token_words(text: str) -> list[tuple[int, ...]]:
    """argparse type: '3,4/7' -> [(3, 4), (7,)] (`--bad-words`: words split by '/')."""
    try:
        return [tuple(csv_ints(w)) for w in text.split("/")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected token-id words like 3,4/7 (ids by ',', words by '/'), got {text!r}"
        ) from None


# ---- output files ----


def check_out_path(path: str, option: str = "--out", inputs=(), also=()) -> None:
    """An output file path, before any work (files.check_output): a file name in a folder that
    exists and takes a file, not a special file (/dev/full), none of the command's inputs."""
    from ..files import check_output

    check_output(path, option, inputs, also)


def check_report_dir(path: str, option: str = "--report") -> None:
    """A folder for a report, checked before any work: one that exists and is writable, or one
    that can be made (its nearest existing parent a writable folder). Writability is tried (a
    probe file made and removed), not guessed from permission bits."""
    if path.strip() == "":
        raise OracleError(f"{option}: empty folder name")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OracleError(f"{option} {path} needs a folder, {path} is a file")
    parent = p
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OracleError(f"{option} {path}: the folder cannot be made, {parent} is a file")
    from ..files import try_write_in  # numpy with it: imported on use

    try:
        try_write_in(parent, ".oracle-report-probe-")
    except OSError as e:
        made = "" if parent == p else f" (where {path} would be made)"
        raise OracleError(f"{option} {path}: cannot write in {parent}{made}: {e.strerror or e}") from None


def write_report_last(ok: bool, directory: str, write, to_stderr: bool = False) -> int:
    """Write a report once the verdict is printed, and say where it went ('report: PATH', on
    stderr when stdout holds JSON). A failure to write it loses neither the verdict nor its exit
    code: it is one line on stderr, and the exit code is 1 when the check failed, else 2 (3 for a
    bug of the page's code, its traceback saved)."""
    from . import save_traceback

    option = f"--report {printable(directory)}"
    try:
        page = write()
    except (OSError, OracleError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        where = f" ({e.filename})" if isinstance(e, OSError) and e.filename else ""
        print(f"error: {option}: the page was not written: {one_line(why + where)}", file=sys.stderr)
        return 1 if not ok else 2
    except Exception as e:  # noqa: BLE001 -- a bug of the page's code: the verdict above still stands
        print(
            f"internal error: {option}: {type(e).__name__}: {one_line(str(e))} (traceback saved to {save_traceback()})",
            file=sys.stderr,
        )
        return 1 if not ok else 3
    print(f"report: {printable(page)}", file=sys.stderr if to_stderr else sys.stdout)
    return 0 if ok else 1


def write_out(path: str, text: str, summary: str, option: str = "--out") -> None:
    """Write the result to a file and print one summary line instead of the result."""
    from ..files import write_text

    check_out_path(path, option)
    write_text(path, text if text.endswith("\n") else text + "\n")  # whole or not at all
    print(f"{summary}; wrote {printable(path)}")


def add_optional(p, flag: str, help: str, kind=None, metavar: str | None = None) -> None:
    """An option that is None unless given (its help says what None means), of argparse type `kind`."""
    p.add_argument(flag, type=kind, default=None, metavar=metavar, help=help)


def add_threads_option(p, help: str) -> None:
    """`--threads N` (N >= 1; None: the command's default), as `check`, `trace record` and `bench` take it."""
    p.add_argument("--threads", type=int_at_least(1), default=None, metavar="N", help=help)


def add_timeout_option(p, help: str) -> None:
    """`--timeout S` (seconds each backend call may take; None: the default), as `check` and `trace record` take it."""
    p.add_argument("--timeout", type=positive_seconds, default=None, metavar="S", help=help)


def command_parser(sub, name: str, description: str):
    """A command's parser: its help line from the CLI's HELP table, and its description."""
    from . import HELP

    return sub.add_parser(name, help=HELP[name], description=description)


def subcommand(subs, name: str, help: str, description: str, **defaults):
    """A subcommand's parser (`bench c-table`, `trace diff`, ...) with its defaults (func, preflight)."""
    p = subs.add_parser(name, help=help, description=description)
    p.set_defaults(**defaults)
    return p


def subcommand_parsers(sub, name: str, description: str, metavar: str):
    """A command with subcommands (`trace`, `bench`): its parser (command_parser) and the
    subparsers its subcommands are added to; the one given lands in args.<name>_command."""
    p = command_parser(sub, name, description)
    return p.add_subparsers(dest=f"{name}_command", metavar=metavar, required=True)
