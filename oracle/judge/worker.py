"""Where the verdicts' NumPy work runs while the backend and the reference run: `background(fn,
*args)` returns an object whose result() is fn(*args).

The noise twin (noise.py) and the drift fit (drift.py) are NumPy on arrays of a few thousand
values: too small to release the GIL for long, so on a helper thread they mostly wait for the
main thread. Where the platform forks, fn runs in a forked child process instead (it sees the
parent's memory at the fork; its result comes back pickled through a pipe), on a second core
where there is one. Where JAX is loaded (a multithreaded runtime that must not be forked) or
os.fork is missing, fn runs on one helper thread.
"""
from __future__ import annotations

import gc
import os
import pickle
import signal
import sys

_POOL: list = []


def background(fn, *args, **kwargs):
    """fn(*args, **kwargs) off the main thread: in a forked child (Child) or on the helper thread (a
    concurrent.futures.Future). fn must not change state the caller reads later: a child's changes
    stay in the child."""
    if hasattr(os, "fork") and "jax" not in sys.modules:
        return Child(fn, args, kwargs)
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor
        _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="verdict"))
    return _POOL[0].submit(fn, *args, **kwargs)


class Child:
    """fn(*args, **kwargs) in a forked child; result() waits for it and returns its value or
    raises its exception."""

    def __init__(self, fn, args, kwargs):
        read, write = os.pipe()
        sys.stdout.flush(), sys.stderr.flush()          # nothing buffered is written twice
        pid = os.fork()
        if pid == 0:                                    # the child: compute, send, exit at once
            try:
                gc.disable()                            # its collections would touch (and copy) every shared page
                os.close(read)
                try:
                    payload = (True, fn(*args, **kwargs))
                except BaseException as e:              # noqa: BLE001 -- handed to the parent
                    payload = (False, e)
                try:
                    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as e:                  # noqa: BLE001 -- an unpicklable exception or value
                    data = pickle.dumps((False, RuntimeError(f"the verdict's result cannot be sent back: {e}")))
                with os.fdopen(write, "wb") as f:
                    f.write(data)
            finally:
                os._exit(0)
        os.close(write)
        self.pid, self.read, self.value, self.owner = pid, read, None, os.getpid()

    def result(self):
        if self.read is not None:
            with os.fdopen(self.read, "rb") as f:
                data = f.read()
            self.read = None
            os.waitpid(self.pid, 0)
            self.value = pickle.loads(data) if data else \
                (False, RuntimeError("the verdict's child process ended without a result"))
        ok, value = self.value
        if not ok:
            raise value
        return value

    def __del__(self):
        # never collected: stop the child and reap it (only in the process that forked it: a
        # handle freed inside another child is that child's copy)
        if getattr(self, "read", None) is None or self.owner != os.getpid():
            return
        try:
            os.close(self.read)
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
