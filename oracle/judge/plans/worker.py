"""Where the verdicts' NumPy work runs while the backend and the reference run: `background(fn,
*args)` returns an object whose result() is fn(*args).

The noise twin (noise.py) and the drift fit (drift.py) are NumPy on arrays of a few thousand
values: too small to release the GIL for long, so on a helper thread they mostly wait for the
main thread. Where the platform forks, fn runs in a forked child process instead (it sees the
parent's memory at the fork; its result comes back pickled through a pipe), on a second core
where there is one. Where JAX is loaded (a multithreaded runtime that must not be forked) or
os.fork is missing, fn runs on one helper thread.

An Inbox carries one value to a job after it started (`check --backend` begins the reference's
sides before the backend is loaded and sends the job the backend's dtype once it is:
sides.start_sides).
"""

from __future__ import annotations

import gc
import os
import pickle
import struct
import sys

from ...runtime.cancel import forking, kill_tree

_POOL: list = []
_LIVE: dict = {}  # pid -> Child not yet reaped, of this process
_INLINE: list = []  # non-empty: background() computes at once, in this thread (inline())


class inline:
    """`with inline():` background() runs each job at once, here (the property suite judges many
    small examples: a fork per example would cost more than it overlaps)."""

    def __enter__(self):
        _INLINE.append(True)
        return self

    def __exit__(self, *exc):
        _INLINE.pop()
        return False


class Done:
    """A job already computed: result() gives its value or raises its exception."""

    def __init__(self, fn, args, kwargs):
        try:
            self.value, self.error = fn(*args, **kwargs), None
        except Exception as e:  # noqa: BLE001 -- raised by result(), as a job's
            self.value, self.error = None, e

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value


def stop_all() -> None:
    """Stop and reap every child still running (the CLI's exit, cli.exit_now)."""
    for child in list(_LIVE.values()):
        child.stop()


def forks() -> bool:
    """Whether background() runs its job in a forked child (else on the helper thread)."""
    return hasattr(os, "fork") and "jax" not in sys.modules


def background(fn, *args, **kwargs):
    """fn(*args, **kwargs) off the main thread: in a forked child (Child) or on the helper thread (a
    concurrent.futures.Future). fn must not change state the caller reads later: a child's changes
    stay in the child."""
    if _INLINE:
        return Done(fn, args, kwargs)
    if forks():
        return Child(fn, args, kwargs)
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="verdict"))
    return _POOL[0].submit(fn, *args, **kwargs)


class Part:
    """Item `index` of the list a background job returns: result() is job.result()[index]."""

    __slots__ = ("job", "index")

    def __init__(self, job, index: int):
        self.job, self.index = job, index

    def result(self):
        return self.job.result()[self.index]


class Child:
    """fn(*args, **kwargs) in a forked child; result() waits for it and returns its value or
    raises its exception."""

    def __init__(self, fn, args, kwargs):
        read, write = os.pipe()
        sys.stdout.flush(), sys.stderr.flush()  # nothing buffered is written twice
        with forking():  # listed before a cancel can look (oracle/runtime/cancel.py)
            pid = os.fork()
            if pid != 0:
                self.pid, self.read, self.value, self.owner = pid, read, None, os.getpid()
                _LIVE[pid] = self
        if pid == 0:  # the child: compute, send, exit at once
            try:
                gc.disable()  # its collections would touch (and copy) every shared page
                os.close(read)
                try:
                    payload = (True, fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 -- handed to the parent
                    payload = (False, e)
                try:
                    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as e:  # noqa: BLE001 -- an unpicklable exception or value
                    data = pickle.dumps((False, RuntimeError(f"the verdict's result cannot be sent back: {e}")))
                with os.fdopen(write, "wb") as f:
                    f.write(data)
            finally:
                os._exit(0)
        os.close(write)

    def result(self):
        if self.read is not None:
            with os.fdopen(self.read, "rb") as f:
                data = f.read()
            self.read = None
            os.waitpid(self.pid, 0)
            _LIVE.pop(self.pid, None)
            self.value = (
                pickle.loads(data)
                if data
                else (False, RuntimeError("the verdict's child process ended without a result"))
            )
        ok, value = self.value
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        """Kill the child and reap it, unless its result was read (only in the process that
        forked it: a handle inherited by another child is that child's copy)."""
        try:
            if getattr(self, "read", None) is None or self.owner != os.getpid():
                return
            _LIVE.pop(self.pid, None)
            os.close(self.read)
            self.read = None
            kill_tree(self.pid)  # and what it started: a forked drift probe's plug-in copy
            os.waitpid(self.pid, 0)
        except (OSError, AttributeError, TypeError):  # at interpreter exit the module may be torn down
            pass

    __del__ = stop  # never collected: stopped


class Inbox:
    """One value sent to a background job after it started: send(value) by the caller, get() in
    the job (it waits until the value is there). A pipe with a length header, so it serves a
    forked child and the helper thread alike, and a copy of the pipe that another child inherited
    cannot hold a reader back. send() returns at once for a value within the pipe's buffer (the
    backend's facts of sides.sides); a larger one waits for the reader. cancel(): get() raises
    instead."""

    HEADER = struct.Struct("<q")
    CANCELLED = -1

    def __init__(self):
        self.read, self.write = os.pipe()

    def send(self, value) -> None:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._put(self.HEADER.pack(len(data)) + data)

    def cancel(self) -> None:
        if self.write is not None:
            self._put(self.HEADER.pack(self.CANCELLED))

    def _put(self, message: bytes) -> None:
        assert self.write is not None, "an Inbox carries one value"
        fd, self.write = self.write, None
        with os.fdopen(fd, "wb") as f:
            f.write(message)

    def get(self):
        with os.fdopen(self.read, "rb", closefd=False) as f:
            n = self.HEADER.unpack(_exactly(f, self.HEADER.size))[0]
            if n == self.CANCELLED:
                raise RuntimeError("the job's input was cancelled")
            return pickle.loads(_exactly(f, n))


def _exactly(f, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise RuntimeError("the job's input ended early")
    return data
