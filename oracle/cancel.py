"""SIGTERM and SIGHUP end a run as Ctrl-C does (issue 62): one line on stderr, every plug-in process
group and verdict child killed, the temporary files of unfinished writes removed, exit 143 (SIGTERM)
or 129 (SIGHUP).

`install()` (oracle/__main__.py, before any thread starts) blocks the two signals in every thread and
waits for them on one thread of their own with sigwaitinfo, which says who sent the signal. A signal
sent by a plug-in's process (or any process of its group) is that plug-in's failure, not the user's:
the hooks in SENDERS (oracle/isolated.py's) kill that plug-in's process, and the call in flight fails
as a `backend` check ("the backend's process sent SIGTERM to the oracle"). Every forked child
unblocks the signals again (os.register_at_fork), so a plug-in and its own processes keep the usual
behaviour. Not installed when main() runs inside another program (the tests, a notebook).

A cancelled run removes the temporary files of the writes not finished (oracle/atomic.py's
`replacing`, which lists them in atomic.TEMPORARY).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
SENDERS: list = []  # fn(pid, signo) -> True when pid is a plug-in's process (which fn then stops)
_INSTALLED: list = []


def install() -> None:
    """Block SIGTERM and SIGHUP in this thread (and so in every thread it starts later) and wait for
    them on a thread of their own. Linux and other platforms with sigwaitinfo; elsewhere nothing."""
    if _INSTALLED or not hasattr(signal, "sigwaitinfo") or threading.current_thread() is not threading.main_thread():
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    os.register_at_fork(after_in_child=_unblock)
    threading.Thread(target=_watch, name="oracle signals", daemon=True).start()
    _INSTALLED.append(True)


def _unblock() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def _watch() -> None:
    while True:
        info = signal.sigwaitinfo(SIGNALS)
        if any(hook(info.si_pid, info.si_signo) for hook in list(SENDERS)):
            continue  # a plug-in's: its call fails, the run goes on
        cancel(info.si_signo)


def remove_temporary() -> None:
    """The temporary files of oracle/atomic.py's writes not finished, removed."""
    files = sys.modules.get("oracle.atomic")
    for path in list(getattr(files, "TEMPORARY", ())):
        try:
            os.unlink(path)
        except OSError:
            pass


def stop_children() -> None:
    """Every plug-in process group and verdict child of this process, killed and reaped."""
    for name in ("oracle.judge.worker", "oracle.isolated"):
        module = sys.modules.get(name)
        if module is not None:
            try:
                module.stop_all()
            except Exception:  # noqa: BLE001 -- ending anyway: the next one still runs
                pass


def cancel(signo: int) -> None:
    """End the run now: one line, the children stopped, the temporary files removed, exit 128 + signo."""
    name = signal.Signals(signo).name
    try:
        os.write(2, f"error: interrupted by {name}\n".encode())
    except OSError:
        pass
    stop_children()
    remove_temporary()
    os._exit(128 + signo)
