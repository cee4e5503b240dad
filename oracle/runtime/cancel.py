"""SIGTERM and SIGHUP end a run as Ctrl-C does (issue 62): one line on stderr, every plug-in process
group and verdict child killed, the temporary files of unfinished writes removed, exit 143 (SIGTERM)
or 129 (SIGHUP).

`install()` (oracle/__main__.py, before any thread starts) blocks the two signals in every thread and
waits for them on one thread of their own with sigwaitinfo, which says who sent the signal. A signal
sent by a plug-in's process (or any process of its group) is that plug-in's failure, not the user's:
the hooks in SENDERS (oracle/runtime/isolated.py's) kill that plug-in's process, and the call in flight fails
as a `backend` check ("the backend's process sent SIGTERM to the oracle"). Every forked child
unblocks the signals again (os.register_at_fork), so a plug-in and its own processes keep the usual
behaviour. Not installed when main() runs inside another program (the tests, a notebook).

A cancel leaves no process of the run behind, whatever the other threads do meanwhile:
- every fork of the oracle (a plug-in's process, a verdict's child) happens inside `forking()` until
  the child is listed where stop_children finds it; a cancel takes that gate and never gives it back,
  so no fork is half-listed and none begins after the children are stopped;
- what a child started (a plug-in's processes, the plug-in copy of a forked drift probe) dies with it:
  `kill_tree` freezes each process below as it is found, then kills them all and the groups they lead.

A cancelled run removes the temporary files of the writes not finished (oracle/atomic.py's
`replacing`, which lists them in atomic.TEMPORARY).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
SENDERS: list = []  # fn(pid, signo) -> True when pid is a plug-in's process (which fn then stops)
GATE_WAIT_S = 5.0  # how long a cancel waits for a fork in progress to list its child
_INSTALLED: list = []
_GATE = [threading.Lock()]  # held by a fork until its child is listed, and by a cancel for good


@contextlib.contextmanager
def forking():
    """Around a fork and the listing of its child (isolated._spawn, worker.Child). Once a cancel has
    begun, the fork never starts: the thread waits here until the process exits."""
    gate = _GATE[0]
    with gate:
        yield


def _fresh_gate() -> None:
    _GATE[0] = threading.Lock()  # a forked child's copy may be held by the thread that forked it


os.register_at_fork(after_in_child=_fresh_gate)


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process /proc lists (empty where there is no /proc)."""
    parents = {}
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return parents
    for entry in entries:
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass  # ended meanwhile
    return parents


def kill_tree(root: int, with_root: bool = True) -> None:
    """SIGKILL every process below root (and root, with_root), and each process group one of them
    leads, but never this process's own group. Where /proc lists processes, each one found is frozen
    (SIGSTOP) first, and the walk repeats until it finds no more: none of them starts another or is
    handed to init before the kills. Elsewhere: root and the group it leads only."""
    found, frozen = {root}, set() if with_root else {root}
    while True:
        for pid in found - frozen:
            _send(pid, signal.SIGSTOP)
            frozen.add(pid)
        before = len(found)
        children: dict = {}
        for pid, parent in _parents().items():
            children.setdefault(parent, []).append(pid)
        todo = [root]
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        if len(found) == before:
            break
    own = os.getpgrp()
    for pid in found if with_root else found - {root}:
        try:
            if os.getpgid(pid) == pid != own:
                os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _send(pid, signal.SIGKILL)


def _send(pid: int, signo: int) -> None:
    try:
        os.kill(pid, signo)
    except OSError:
        pass


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
    for name in ("oracle.judge.plans.worker", "oracle.runtime.isolated"):
        module = sys.modules.get(name)
        if module is not None:
            try:
                module.stop_all()
            except Exception:  # noqa: BLE001 -- ending anyway: the next one still runs
                pass


def cancel(signo: int) -> None:
    """End the run now: one line, no fork after this, the children and whatever they started
    stopped, the temporary files removed, exit 128 + signo."""
    name = signal.Signals(signo).name
    try:
        os.write(2, f"error: interrupted by {name}\n".encode())
    except OSError:
        pass
    _GATE[0].acquire(timeout=GATE_WAIT_S)  # a fork in progress lists its child first; none begins after
    stop_children()
    kill_tree(os.getpid(), with_root=False)  # what the children started, and a child no list holds
    remove_temporary()
    os._exit(128 + signo)
