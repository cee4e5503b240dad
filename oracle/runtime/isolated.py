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
"""

from __future__ import annotations

import atexit
import dataclasses
import io
import os
import pickle
import signal
import sys
import threading
import time
import weakref
from multiprocessing.connection import wait

from . import cancel
from .backends import NAMED, BackendCallFailed, OutOfProcess, load_backend, note_plugin_file
from .contract import (
    OPTIONAL_BACKEND,
    OPTIONAL_SESSION,
    SAMPLING_INTERFACE,
    SESSION_METHODS,
    Capabilities,
    LoadedBackend,
    contract_problems,
    session_problems,
)
from ..errors import OracleError, Refused
from .plugin_output import Relay, flush_c_stdio, kill_group, own_group

# The NAMED (in-tree) backends stay in this process: they are the project's own code, and their
# options and hooks are read here (docs/results.md, "Plug-in isolation overhead").
ISOLATE_NAMED = False
STOP_GRACE_S = 0.5  # stop_all: how long a child may take to end once its pipe is closed
BY_REF = ("session", "submit")  # calls whose result stays in the child (a session, a round in flight)
METHODS = tuple(dict.fromkeys(SESSION_METHODS + tuple(OPTIONAL_SESSION) + SAMPLING_INTERFACE))
_LIVE = weakref.WeakValueDictionary()  # id -> IsolatedBackend with a child of this process
_THREADS: list = []  # the thread count set_threads chose last (sent to every child)


class BackendDied(BackendCallFailed):
    """The plug-in's process died (a signal, os._exit) during a call, or had died before it."""


class Raised(Exception):
    """Stand-in for an exception whose class this process does not import (the plug-in's own)."""


# exceptions of the plug-in that would read as this process's own (a KeyboardInterrupt as the user's
# Ctrl-C): a stand-in of the same name, an Exception, so that the call fails as the backend's
STAND_IN = ("KeyboardInterrupt", "GeneratorExit")


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
            target=_serve,
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
            cancel.kill_tree(proc.pid)  # its processes, those that left its group too
            kill_group(proc.pid)

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
            if (name == "session" or name is None) and args and not _plain(args[0]):  # the model: sent once
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
            except _Refused as e:
                raise BackendCallFailed(f"{what} returned {e}") from None
            if kind == "ok":
                return value
            if kind == "trace":
                return _unpack(value)
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
                _ParentPickler(buf, self, {id(op[2]) for op in msg[0] if op[0] == "share"}).dump(msg)
                return buf.getvalue()
            except RuntimeError as e:
                if "changed size during iteration" not in str(e) or attempt == 4:
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    def _loads(self, data: bytes):
        return _Unpickler(io.BytesIO(data), self.top).load()

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


def _plain(x) -> bool:
    return isinstance(x, (int, float, str, bytes, bool, type(None), list, tuple, dict, Remote))


class Remote:
    """An object that lives in the child (a session, a submitted round, a hook): its methods'
    calls go there. Listed methods are known without asking; others are read there."""

    def __init__(self, owner: IsolatedBackend, oid: int, gen: int, is_callable: bool, methods, label: str = ""):
        self._owner, self._oid, self._gen, self._is_callable = owner, oid, gen, is_callable
        self._methods, self._label = frozenset(methods), label or "call"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._methods:
            return _Method(self, name)
        if name in METHODS:  # a contract method the object lacks
            raise AttributeError(name)
        try:
            return self._owner._call(name, self._oid, self._gen, "__getattr__", (name,))
        except BackendCallFailed as e:  # getattr(x, name, None) stays a question
            raise AttributeError(f"{name}: {e}") from e

    def __call__(self, *args, **kwargs):
        if not self._is_callable:
            raise TypeError(f"{self!r} is not callable")
        return self._owner._call(f"{self._label}()", self._oid, self._gen, None, args, kwargs)

    def __repr__(self) -> str:
        return f"Remote({self._oid} in {self._owner!r})"

    def __reduce__(self):
        raise TypeError(f"{self!r} lives in the plug-in's process and cannot be pickled")

    def __del__(self):
        owner = getattr(self, "_owner", None)
        if owner is not None and owner._owner == os.getpid() and owner._gen == self._gen and owner._proc is not None:
            owner._ops.append(("drop", self._oid))


class _Method:
    def __init__(self, remote: Remote, name: str):
        self.remote, self.name = remote, name

    def __call__(self, *args, **kwargs):
        r = self.remote
        return r._owner._call(f"{self.name}()", r._oid, r._gen, self.name, args, kwargs, self.name in BY_REF)


class _ParentPickler(pickle.Pickler):
    def __init__(self, f, owner: IsolatedBackend, fresh: set):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.owner, self.fresh = owner, fresh  # fresh: ids shared by this message (sent by value)

    def persistent_id(self, obj):
        if isinstance(obj, Remote):
            return ("ref", obj._oid)
        hit = self.owner._shared.get(id(obj))
        if hit is not None and hit[0] is obj and id(obj) not in self.fresh:
            return ("shared", hit[1])
        return None


class _Refused(Exception):
    pass


class _Unpickler(pickle.Unpickler):
    """Results from the child, without importing the plug-in's own package here."""

    def __init__(self, f, top: str):
        super().__init__(f)
        self.top = top

    def find_class(self, module, name):
        if module.split(".")[0] == self.top and module not in sys.modules:
            raise _Refused(f"an object of class {module}.{name} (the plug-in's own: not imported by the oracle)")
        return super().find_class(module, name)


# ---- the child ----


def _serve(conn, spec, target, preload: dict, threads: int | None, relay: Relay | None = None, parent_end=None) -> None:
    """The child: load the plug-in, send what the contract reads, then answer calls until the
    parent closes the pipe. Its output goes to the relay (plugin_output.py); it leads a process
    group of its own, which the parent kills whole."""
    if relay is not None:
        relay.child()
    if parent_end is not None:  # the parent's end, inherited: closed, so the parent closing its own is EOF here
        parent_end.close()
    own_group(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _die_with_parent()
    import gc

    gc.freeze()  # what the fork shared stays shared
    objects: dict = {}
    shared = dict(preload)
    if threads:
        _apply_threads(threads)

    def send(kind, value) -> None:
        conn.send_bytes(_child_dumps(kind, value, objects))

    class Stage(list):
        def append(self, what):
            super().append(what)
            send("stage", what)

    from .backends import _from_factory

    try:
        bk = _from_factory(spec, target, Stage())
        problems = contract_problems(bk)
        info = {"problems": problems, "file": getattr(sys.modules.get(target.partition(":")[0]), "__file__", None)}
        if not problems:
            info |= {k: getattr(bk, k) for k in ("name", "dtype", "exact")}
            info["policies"] = tuple(bk.policies)
            info["hooks"] = {}
            for hook in OPTIONAL_BACKEND:
                v = getattr(bk, hook, None)
                info["hooks"][hook] = _keep(objects, v) if hook in ("sampling",) or callable(v) else v
    except BaseException as e:  # noqa: BLE001 -- the load's error, sent as it is
        send("error", e)
        return
    if threads:
        _apply_threads(threads)  # the plug-in may have imported torch
    objects[0] = bk
    send("loaded", info)
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):  # the parent closed the pipe: C stdio's lines out, then end
            flush_c_stdio()
            return
        try:
            ops, oid, name, args, kwargs, by_ref = _ChildUnpickler(io.BytesIO(data), objects, shared).load()
        except BaseException as e:  # noqa: BLE001
            send("error", e)
            continue
        for op in ops:
            if op[0] == "drop":
                objects.pop(op[1], None)
            elif op[0] == "share":
                shared[op[1]] = op[2]
            elif op[0] == "threads":
                _apply_threads(op[1])
        try:
            obj = objects[oid]
            if name == "__getattr__":
                value = getattr(obj, args[0])
            else:
                value = (obj if name is None else getattr(obj, name))(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 -- SystemExit included: the parent's guard names it
            send("error", e)
            continue
        problems = session_problems(value) if oid == 0 and name == "session" else []
        if problems:  # checked at every session(), before its first call
            send("contract", problems)
            continue
        if by_ref or callable(value) and name == "__getattr__":
            send("ref", _keep(objects, value))
            continue
        try:
            conn.send_bytes(pickle.dumps(_pack(value), protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 -- cannot be pickled: it stays here
            send("ref", _keep(objects, value))


# ---- a round's trace, its many small arrays stacked (pickled about twice as fast) ----

STACKED = ("draft_logits", "verify_logits", "kv_writes")  # RoundTrace fields: key -> array(s)


def _pack(value) -> tuple:
    """("ok", value), or for an oracle.traces.RoundTrace ("trace", (fields, stacks)): each dict of
    STACKED whose values are arrays of one shape and dtype (kv_writes: (call, k, v)) as its keys and
    stacked arrays, the other fields as they are."""
    cls = type(value)
    if cls.__name__ != "RoundTrace" or cls.__module__ != "oracle.traces":
        return ("ok", value)
    fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    stacks = {}
    for name in STACKED:
        m = fields.get(name)
        if type(m) is not dict or not m:
            continue
        if name == "kv_writes":
            vals = list(m.values())
            if not all(type(v) is tuple and len(v) == 3 for v in vals):
                continue
            parts = ([v[0] for v in vals], _stack([v[1] for v in vals]), _stack([v[2] for v in vals]))
            if parts[1] is None or parts[2] is None:
                continue
        else:
            parts = (_stack(list(m.values())),)
            if parts[0] is None:
                continue
        stacks[name], fields[name] = (list(m), *parts), None
    return ("trace", (fields, stacks))


def _stack(arrays: list):
    """One array of them all, or None where they are not arrays of one shape and dtype."""
    import numpy as np

    first = arrays[0]
    if type(first) is not np.ndarray or not all(
        type(a) is np.ndarray and a.shape == first.shape and a.dtype == first.dtype for a in arrays
    ):
        return None
    return np.stack(arrays)


def _unpack(value):
    """The RoundTrace _pack sent (its arrays: rows of the stacked ones)."""
    import importlib

    fields, stacks = value
    for name, (keys, *parts) in stacks.items():
        if name == "kv_writes":
            calls, k, v = parts
            fields[name] = {key: (c, a, b) for key, c, a, b in zip(keys, calls, k, v)}
        else:
            fields[name] = dict(zip(keys, parts[0]))
    tr = object.__new__(importlib.import_module("oracle.traces").RoundTrace)
    for name, x in fields.items():
        object.__setattr__(tr, name, x)
    return tr


def _keep(objects: dict, value):
    """value kept in the child; what the parent needs to make its Remote."""
    if value is None:
        return None
    oid = max(objects, default=0) + 1
    objects[oid] = value
    return (oid, callable(value), [m for m in METHODS if callable(getattr(value, m, None))])


def _child_dumps(kind, value, objects) -> bytes:
    if kind == "error":  # the exception pickled (None if it cannot be), its class's name and its text
        try:
            exc = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 -- an exception that cannot be pickled: its name and text
            exc = None
        cls = type(value)
        value = (exc, cls.__module__, cls.__qualname__, _text(value))
    return pickle.dumps((kind, value), protocol=pickle.HIGHEST_PROTOCOL)


def _text(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:  # noqa: BLE001 -- a __str__ that raises
        return repr(e)


class _ChildUnpickler(pickle.Unpickler):
    def __init__(self, f, objects, shared):
        super().__init__(f)
        self.objects, self.shared = objects, shared

    def persistent_load(self, pid):
        kind, key = pid
        return self.objects[key] if kind == "ref" else self.shared[key]


def _apply_threads(n: int) -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(n, user_api="blas")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


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


def _die_with_parent() -> None:
    """Linux: SIGKILL when the process that started this one ends (an os._exit leaves no atexit)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
