"""Progress bars for long work: tqdm on stderr, off with --quiet (stdout stays the result):

    for M in progress(rows, "c(M)", quiet=args.quiet):
        ...

(with `add_quiet_option(parser)` for the --quiet flag).
"""

from __future__ import annotations

import sys

from .errors import one_line


def progress(items, desc: str, quiet: bool = False, total: int | None = None):
    """Iterate over items with a progress bar on stderr unless quiet (or tqdm is missing)."""
    if quiet:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, total=total, file=sys.stderr, leave=False, dynamic_ncols=True)


def add_quiet_option(parser) -> None:
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="no progress bars on stderr (errors and warnings still go there)"
    )


def warn(message: str) -> None:
    """One `warning: ...` line on stderr."""
    print(f"warning: {one_line(message)}", file=sys.stderr)
