"""`check`'s progress on stderr: the phases of the verdict as they start (the executor's on_phase).
On a terminal one line, rewritten in place, with the phase, its detail and the seconds so far;
otherwise one line per phase (a case's own step only on a terminal); nothing with --quiet."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, stream=None, quiet: bool = False):
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.last = None  # the last phase printed
        self.width = 0  # the terminal line's length, to clear it

    @classmethod
    def for_args(cls, args) -> "Progress":
        return cls(quiet=bool(getattr(args, "quiet", False)))

    def phase(self, name: str, detail: str = "") -> None:
        if self.quiet:
            return
        line = f"check: {name}" + (f": {detail}" if detail else "") + f" ({time.perf_counter() - self.t0:.1f} s)"
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width)[:200])
            self.width = min(len(line), 200)
        elif name != self.last:
            self.stream.write(line + "\n")
        else:
            return
        self.last = name
        self.stream.flush()

    def done(self) -> None:
        """Clears the terminal line (the verdict follows on stdout)."""
        if self.tty and self.width and not self.quiet:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0
