"""A plug-in's process (issue 62): what it prints, never on the oracle's stdout; its process group.

A plug-in's process (oracle/runtime/isolated.py) writes its stdout and stderr, at the file-descriptor level
(Python's print, C's printf, a warning at import), into one pipe. A daemon thread of the oracle reads
the pipe and copies each line to the oracle's stderr as `plug-in: LINE`: control characters escaped
(errors.printable), each line cut at MAX_CHARS, at most MAX_LINES lines per plug-in process; the
rest are counted and named in one `plug-in: ... N more lines not shown` line when the process ends.
`check --json` keeps one JSON object on stdout whatever the plug-in prints.

    relay = Relay()            # before the fork
    relay.child()              # in the plug-in's process: fds 1 and 2 into the pipe
    relay.parent()             # in the oracle: the copying thread
    relay.wait(0.5)            # once the process is reaped: the count of the lines not shown

The plug-in's process leads a process group of its own (own_group, asked by both sides), which the
oracle kills whole (kill_group): the processes the plug-in started end with it.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading

from ..errors import printable

MAX_LINES = 40  # lines shown per plug-in process
MAX_CHARS = 300  # characters shown per line
PREFIX = "plug-in: "


class Relay:
    """The pipe a plug-in process writes its output into, and the thread that copies it."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        self.thread: threading.Thread | None = None
        self.shown = self.hidden = 0

    def child(self) -> None:
        """In the plug-in's process: fds 1 and 2 (and sys.stdout, sys.stderr) write into the pipe."""
        os.close(self.read_fd)
        os.dup2(self.write_fd, 1)
        os.dup2(self.write_fd, 2)
        os.close(self.write_fd)
        for name, fd in (("stdout", 1), ("stderr", 2)):
            raw = io.FileIO(fd, "w", closefd=False)
            setattr(sys, name, io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", line_buffering=True))
        import faulthandler

        if faulthandler.is_enabled():  # enabled on a file of the parent's (pytest's): a crash's trace here too
            faulthandler.enable(file=sys.stderr)

    def parent(self) -> None:
        """In the oracle: close the write end (only the plug-in's process holds it) and copy."""
        os.close(self.write_fd)
        self.thread = threading.Thread(target=self._copy, name="plug-in output", daemon=True)
        self.thread.start()

    def close_unused(self) -> None:
        """Both ends closed (a process that never started)."""
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def _copy(self) -> None:
        with io.FileIO(self.read_fd, "r") as f, io.BufferedReader(f) as lines:
            while True:
                raw = lines.readline(4 * MAX_CHARS)  # a line without end is read in bounded pieces
                if not raw:
                    break
                text = raw.decode("utf-8", "backslashreplace").rstrip("\r\n")
                if self.shown >= MAX_LINES:
                    self.hidden += 1
                    continue
                self.shown += 1
                cut = printable(text[:MAX_CHARS]) + (" ..." if len(text) > MAX_CHARS else "")
                _say(PREFIX + cut)
        if self.hidden:
            _say(f"{PREFIX}... {self.hidden} more line{'s' if self.hidden != 1 else ''} not shown")

    def wait(self, timeout: float) -> None:
        """Until the copying thread has read the pipe to its end (at most timeout seconds)."""
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)


def _say(line: str) -> None:
    try:
        enc = getattr(sys.stderr, "encoding", None) or "utf-8"
        print(line.encode(enc, "backslashreplace").decode(enc), file=sys.stderr, flush=True)
    except (OSError, ValueError, LookupError):  # a closed stderr: nothing to show it on
        pass


def flush_c_stdio() -> None:
    """Whatever the plug-in's C code left in its stdio buffers (printf to a pipe is buffered)."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def own_group(pid: int) -> None:
    """pid (0: this process) leads a new process group; the parent and the child both ask, so
    the group exists before either goes on."""
    try:
        os.setpgid(pid, pid)
    except (OSError, AttributeError):  # the child already did, or it has ended; no process groups here
        pass


def kill_group(pid: int) -> None:
    """SIGKILL to the process group pid leads (the plug-in's process and every process it started)
    and to pid itself, in case it never made the group. For a pid already reaped (the group may
    outlive it); a live one: kill_tree."""
    for kill in (getattr(os, "killpg", None), os.kill):
        try:
            if kill is not None:
                kill(pid, signal.SIGKILL)
        except OSError:
            pass
