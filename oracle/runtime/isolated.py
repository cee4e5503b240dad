"""A plug-in backend in a child process (docs/DESIGN.md sections 9 and 13): its crash is a failed
check, not the oracle's end.

`load(spec, timeout)` is how `check --backend` and `trace record --backend` load a backend: a
`package.module:factory` plug-in is imported, made and checked against the contract in a child
process, and comes back as a `LoadedBackend` around an `IsolatedBackend`, a proxy whose session()
and session calls (add, step, submit, collect, remove, tokens, kv_frontiers, whatever the session
has) go to the child over a pipe and return the pickled result (a RoundTrace, a list of tokens).
A `NAMED` backend loads in this process (backends.load_backend; `ISOLATE_NAMED`). The child is
forked where the platform forks ("spawn" elsewhere) and imports the plug-in itself by its spec.

When the child dies (a segfault, an abort, os._exit), the call raises `BackendDied`: "the
backend's process died with SIGSEGV (signal 11) during step()", which the judge reports as a failed
`backend` check; calls on that process's sessions then fail at once, and the next session() starts
a new child. A death while loading is a load error (exit 2). Under `--timeout` (GuardedBackend) a
call that does not return kills the child (`OutOfProcess.kill`).

What the contract reads is read in the child once and sent back: name, dtype, exact, policies, the
optional hooks (`host_rng`, `fork_safe`, `max_in_flight` by value; a `sampling` object or a hook
function as a `Remote` whose calls go to the child) and `contract_problems`. A forked copy of a
proxy (the drift probe's child, for a `fork_safe` backend) never uses its parent's pipe: it starts
a child of its own. The model a session is made for is sent once (fork: inherited) and reused by
identity, so a backend's per-model caches hold. Results are unpickled without importing the
plug-in's own package in this process; an exception of a class defined there comes back as a
stand-in of the same name and message (a KeyboardInterrupt too: the user's Ctrl-C is this process's).

Issue 62: the child's stdout and stderr go to a pipe whose lines this process shows on its stderr,
prefixed and bounded (oracle/runtime/plugin_output.py); the child leads a process group of its own, killed
whole; a signal it sends this process is its failure (oracle/runtime/cancel.py SENDERS, `_sent_by_plugin`);
every session() it returns is checked against contract.session_problems in the child before its
first call (errors.Refused, exit 2).

The child's side is oracle/runtime/child.py (`serve`); the proxies of what it keeps (`Remote`) and
the pickling of the pipe's messages are oracle/runtime/remote.py.
"""

from __future__ import annotations

import atexit
import io
import os
import signal
import sys
import threading
import time
import weakref
from multiprocessing.connection import wait

from . import cancel
from .backends import NAMED, BackendCallFailed, OutOfProcess, load_backend, note_plugin_file
from .child import serve, unpack
from .contract import Capabilities, LoadedBackend
from ..errors import OracleError, Refused
from .plugin_output import Relay, kill_group, own_group
from .remote import STAND_IN, ParentPickler, Raised, Remote, ResultUnpickler, Unimported, plain

# The NAMED (in-tree) backends stay in this process: they are the project's own code, and their
# options and hooks are read here (docs/results.md, "Plug-in isolation overhead").
ISOLATE_NAMED = False
STOP_GRACE_S = 0.5  # stop_all: how long a child may take to end once its pipe is closed
_LIVE = weakref.WeakValueDictionary()  # id -> IsolatedBackend with a child of this process
_THREADS: list = []  # the thread count set_threads chose last (sent to every child)


class BackendDied(BackendCallFailed):
    """The plug-in's process died (a signal, os._exit) during a call, or had died before it."""


def load(spec: str | None = None, timeout: float | None = None) -> LoadedBackend:
    """The backend `spec` names, as `check --backend` runs it: a plug-in in a child process
    (IsolatedBackend), a NAMED one in this process (unless ISOLATE_NAMED). Every load problem is an
    OracleError of one line, as backends.load_backend's (a death while loading among them)."""
    spec = os.environ.get("ORACLE_BACKEND", "reference") if spec is None else spec
    if not spec.strip() or ":" not in spec or (spec in NAMED and not ISOLATE_NAMED):
        return load_backend(spec, timeout)
    return IsolatedBackend.start(spec, NAMED.get(spec, spec), timeout)


def set_threads(n: int) -> None:
    """Thread count for the children's BLAS and torch (cli.environment.set_threads calls it): sent
    with each child's next call, and to every child started later."""
    _THREADS[:] = [n]


def stop_all() -> None:
    """End and reap every child of this process (the CLI's exit, cli.exit_now; atexit): each is
    told first (its pipe closed: it flushes its C stdio buffers, whose lines the relay shows) and
    killed STOP_GRACE_S later if it has not ended (a call in flight)."""
    for bk in list(_LIVE.values()):
        bk.close(grace=STOP_GRACE_S)


atexit.register(stop_all)


def describe(exitcode: int | None) -> str:
    """'died with SIGSEGV (signal 11)' or 'exited with exit code 3'."""
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"died with {name} (signal {-exitcode})"
    return f"exited with exit code {exitcode}"


def _context():
    import multiprocessing as mp

    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


class IsolatedBackend(OutOfProcess):
    """A plug-in backend in a child process; its contract attributes as the child read them."""

    def __init__(self, spec: str, target: str):
        self.spec, self.target = spec, target
        self.top = target.partition(":")[0].split(".")[0]  # the plug-in's package: not imported here
        self._lock = threading.RLock()
        self._owner = os.getpid()
        self._proc = self._conn = None
        self._gen = 0  # which child a Remote belongs to
        self._dead = ""  # why the last child is gone
        self._ops: list = []  # housekeeping sent before the next call: drops, threads, shared objects
        self._shared: dict = {}  # id(obj) -> (obj, key): objects the child holds by identity (the model)
        self._threads = None  # the thread count the child has
        self._relay = None  # the child's stdout and stderr (plugin_output.Relay)
        self._sent = ""  # the signal the child sent this process (cancel.SENDERS), if it did

    def __repr__(self) -> str:
        return f"IsolatedBackend({self.target!r}, pid {getattr(self._proc, 'pid', None)})"

    @classmethod
    def start(cls, spec: str, target: str, timeout: float | None) -> LoadedBackend:
        """The plug-in loaded in a new child and checked there; its problems refused as
        load_backend refuses them."""
        bk = cls(spec, target)
        info = bk._spawn(timeout)
        problems = info["problems"]
        if problems:
            bk.close(kill=True)
            more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
            raise OracleError(
                f"backend {spec!r}: the object {target}() returned breaks the backend contract "
                f"(oracle/runtime/contract.py): {problems[0]}{more}"
            )
        if info["file"]:
            note_plugin_file(target.partition(":")[0], info["file"])
        bk.name, bk.dtype, bk.exact, bk.policies = (info[k] for k in ("name", "dtype", "exact", "policies"))
        for hook, value in info["hooks"].items():  # a hook object or function: a Remote
            setattr(bk, hook, bk._remote(value, hook) if isinstance(value, tuple) else value)
        return LoadedBackend(bk, Capabilities.read(bk))

    def _spawn(self, timeout: float | None = None) -> dict:
        """A new child: import, factory, contract; returns what it read. Load failures raise
        OracleError (a death while loading too), a bug of a NAMED backend its exception."""
        ctx = _context()
        mine, theirs = ctx.Pipe()
        preload = {key: obj for obj, key in self._shared.values()}
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # nothing buffered here is written twice by a forked child
        relay = Relay() if ctx.get_start_method() == "fork" else None  # the child's output (spawn: not captured)
        proc = ctx.Process(
            target=serve,
            args=(theirs, self.spec, self.target, preload, _THREADS[0] if _THREADS else None, relay, mine),
            name=f"oracle backend {self.spec}",
        )
        with cancel.forking():  # listed before a cancel can look (oracle/runtime/cancel.py)
            try:
                proc.start()
            except BaseException:
                if relay is not None:
                    relay.close_unused()
                raise
            own_group(proc.pid)
            if relay is not None:
                relay.parent()
            self._relay, self._sent = relay, ""
            theirs.close()
            self._proc, self._conn, self._gen, self._dead, self._ops = proc, mine, self._gen + 1, "", []
            self._threads = _THREADS[0] if _THREADS else None  # what the child was started with
            _LIVE[id(self)] = self
        stage = f"importing {self.target.partition(':')[0]}"
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not wait([mine, proc.sentinel], left) and left is not None:
                self.close(kill=True)
                raise OracleError(f"backend {self.spec!r}: {stage} did not finish within {timeout:g} s (--timeout)")
            try:
                kind, value = self._loads(mine.recv_bytes())
            except (EOFError, OSError):
                code = self._reap()
                where = f"while {stage}" if stage.startswith("importing") else f"in {stage}"
                why = self._sent or describe(code)  # a signal it sent the oracle (cancel.SENDERS), or how it died
                raise OracleError(f"backend {self.spec!r}: the backend's process {why} {where}") from None
            if kind == "stage":
                stage = value
            elif kind == "loaded":
                return value
            else:  # "error": the load's own OracleError, or a NAMED backend's bug
                self.close(kill=True)
                raise self._error(value)

    def _reap(self) -> int | None:
        """The dead (or dying) child's exit code, once it is reaped."""
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        _LIVE.pop(id(self), None)
        if proc is None:
            return None
        proc.join(5)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
        kill_group(proc.pid)  # the plug-in's own processes, left by a child that died alone
        if self._relay is not None:
            self._relay.wait(0.5)  # its last lines, and the count of those not shown
        return proc.exitcode

    def kill(self) -> None:
        """Kill the child now (a call past --timeout); the blocked call then sees it die."""
        proc = self._proc
        if proc is not None and self._owner == os.getpid() and proc.exitcode is None:
            cancel.kill_tree(proc.pid)  # its group, and its processes that left the group

    def close(self, kill: bool = False, grace: float | None = None) -> None:
        """End the child (kill=True: at once; grace: its pipe closed, then killed after that many
        seconds) and reap it; only in the process that started it."""
        if getattr(self, "_owner", None) != os.getpid() or getattr(self, "_proc", None) is None:
            return
        if grace is not None and self._conn is not None:
            self._conn.close()
            self._conn = None
            self._proc.join(grace)
        if kill or grace is not None:
            self.kill()
        try:
            self._reap()
        except (OSError, ValueError, AssertionError, AttributeError, TypeError):  # at interpreter exit
            pass

    def __del__(self):
        self.close(kill=True)

    # ---- calls ----

    def _call(self, what: str, oid: int, gen, name: str | None, args=(), kwargs=None, by_ref=False):
        """oid's method `name` (None: oid itself) called in the child; its result (a Remote when
        by_ref, or when it cannot be pickled). gen: the child oid belongs to (None: every child's,
        the backend's own object and its hooks, which a new child makes again at the same oid)."""
        if self._owner != os.getpid():  # a forked copy (the drift probe's child): a child of its own
            self._forked()
        with self._lock:
            if gen is None or self._proc is None:
                if gen is not None:  # a session of a child that died
                    raise BackendDied(f"{what} not run: the backend's process {self._dead or 'was stopped'} earlier")
                if self._proc is None:
                    self._spawn()
            elif gen != self._gen:
                raise BackendDied(f"{what} not run: the backend's process {self._dead or 'was stopped'} earlier")
            if (name == "session" or name is None) and args and not plain(args[0]):  # the model: sent once
                self._share(args[0])
            if _THREADS and _THREADS[0] != self._threads:
                self._threads = _THREADS[0]
                self._ops.append(("threads", self._threads))
            msg = (self._ops, oid, name, args, kwargs or {}, by_ref)
            self._ops = []
            data = self._dumps(msg)
            conn, proc = self._conn, self._proc
            try:
                conn.send_bytes(data)
                wait([conn, proc.sentinel])
                reply = conn.recv_bytes()
            except (EOFError, OSError):
                code = self._reap()
                self._dead = self._sent or describe(code)
                self._dead += f" during {what}"
                raise BackendDied(f"the backend's process {self._dead}") from None
            try:
                kind, value = self._loads(reply)
            except Unimported as e:
                raise BackendCallFailed(f"{what} returned {e}") from None
            if kind == "ok":
                return value
            if kind == "trace":
                return unpack(value)
            if kind == "ref":
                return self._remote(value)
            if kind == "contract":  # the session session() returned breaks the contract
                more = f" (and {len(value) - 1} more: {'; '.join(value[1:])})" if len(value) > 1 else ""
                raise Refused(
                    f"backend {self.spec!r}: the session {self.target}().session() returned breaks the backend "
                    f"contract (oracle/runtime/contract.py): {value[0]}{more}"
                )
            raise self._error(value)

    def _error(self, value: tuple) -> BaseException:
        """The child's exception: itself where this process can unpickle it without importing
        the plug-in, else a stand-in (Raised) with its class's name and its text."""
        exc, module, qualname, text = value
        if exc is not None and qualname not in STAND_IN:
            try:
                return self._loads(exc)
            except Exception:  # noqa: BLE001 -- the plug-in's own class: the stand-in below
                pass
        return type(qualname.rpartition(".")[2], (Raised,), {"__module__": module})(text)

    def _forked(self) -> None:
        """In a forked copy of this process: the parent's child and pipe are not this one's (its
        sessions fail at once); the next session() starts a child here."""
        if self._conn is not None:
            self._conn.close()  # this process's copy of the parent's end
        self._lock, self._owner, self._proc, self._conn, self._dead = threading.RLock(), os.getpid(), None, None, ""
        self._gen += 1
        self._ops = []

    def _remote(self, value: tuple, label: str = "") -> "Remote":
        """A Remote for what the child kept; label: a hook's name (valid in every child)."""
        oid, is_callable, methods = value
        return Remote(self, oid, None if label else self._gen, is_callable, methods, label)

    def _share(self, obj) -> None:
        """obj travels by identity from now on: the child keeps one copy (sent once)."""
        if id(obj) not in self._shared:
            key = len(self._shared) + 1
            self._shared[id(obj)] = (obj, key)
            self._ops.append(("share", key, obj))

    def _dumps(self, msg) -> bytes:
        """msg pickled for the child. The model it may carry is shared with the verdict's background
        thread (worker.background where JAX is loaded), whose forwards can add to the model's caches
        while they are pickled here ("dictionary changed size during iteration", seen once in CI under
        load): pickled again, a few times, before it counts as the backend's failure."""
        for attempt in range(5):
            buf = io.BytesIO()
            try:
                ParentPickler(buf, self, {id(op[2]) for op in msg[0] if op[0] == "share"}).dump(msg)
                return buf.getvalue()
            except RuntimeError as e:
                if "changed size during iteration" not in str(e) or attempt == 4:
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    def _loads(self, data: bytes):
        return ResultUnpickler(io.BytesIO(data), self.top).load()

    def session(self, model, d, D, mode, policy="sequential", **options):
        """A session in the child (a Remote whose methods are the session's)."""
        return self._call("session()", 0, None, "session", (model, d, D, mode, policy), options, by_ref=True)

    def __getattr__(self, name):
        """Any other attribute of the plug-in's object, read in the child."""
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._call(name, 0, None, "__getattr__", (name,))
        except BackendCallFailed as e:  # getattr(bk, name, None) stays a question
            raise AttributeError(f"{name}: {e}") from e


def _sent_by_plugin(pid: int, signo: int) -> bool:
    """cancel.SENDERS's hook: when pid is a plug-in's process of this process (or of its group),
    that plug-in is killed and its call in flight fails as the backend's."""
    try:
        group = os.getpgid(pid)
    except OSError:
        group = None
    for bk in list(_LIVE.values()):
        proc = bk._proc
        if proc is not None and proc.pid in (pid, group):
            bk._sent = f"sent {signal.Signals(signo).name} to the oracle's process (a plug-in does not end the run)"
            kill_group(proc.pid)
            return True
    return False


cancel.SENDERS.append(_sent_by_plugin)
