"""`check`'s progress on stderr: the phases of the verdict as they start (the executor's on_phase).
On a terminal one line, rewritten in place, with the phase, its detail and the seconds so far.
Otherwise (a pipe, a log file) one line per phase and per case (`case: 3/9 NAME`), and each step
within one (`case: 1/1 NAME: loop round`, a shrink candidate) once the phase or case has run STEP_S
seconds: a long case on the CPU shows its steps as they pass, a fast run prints a line a case.
Nothing with --quiet."""

from __future__ import annotations

import sys
import time

STEP_S = 2.0  # piped: the steps of a phase or case are printed once it has run this long


class Progress:
    def __init__(self, stream=None, quiet: bool = False):
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.last = None  # the last phase printed, with its case: (name, detail before ": ")
        self.detail = ""  # the last detail heard
        self.began = self.t0  # when the phase or case of the last line began (piped)
        self.width = 0  # the terminal line's length, to clear it

    @classmethod
    def for_args(cls, args) -> "Progress":
        return cls(quiet=bool(getattr(args, "quiet", False)))

    def phase(self, name: str, detail: str = "") -> None:
        if self.quiet:
            return
        now = time.perf_counter()
        line = f"check: {name}" + (f": {detail}" if detail else "") + f" ({now - self.t0:.1f} s)"
        key = (name, detail.split(": ", 1)[0])  # a case's steps share their case's key
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width)[:200])
            self.width = min(len(line), 200)
        elif key != self.last or (detail != self.detail and now - self.began >= STEP_S):
            self.stream.write(line + "\n")
            self.began = now if key != self.last else self.began
        else:
            self.detail = detail
            return
        self.last, self.detail = key, detail
        self.stream.flush()

    def done(self) -> None:
        """Clears the terminal line (the verdict follows on stdout)."""
        if self.tty and self.width and not self.quiet:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0
