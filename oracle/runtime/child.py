"""The plug-in's process (oracle/runtime/isolated.py starts it): `serve` loads the plug-in, sends what
the contract reads, then answers the parent's calls over the pipe until the parent closes it. A round's
trace crosses the pipe packed (`pack` here, `unpack` in the parent). METHODS: the methods a kept
object's proxy (oracle/runtime/remote.py `Remote`) knows without asking."""

from __future__ import annotations

import dataclasses
import io
import pickle
import signal
import sys

from .contract import (
    OPTIONAL_BACKEND,
    OPTIONAL_SESSION,
    SAMPLING_INTERFACE,
    SESSION_METHODS,
    contract_problems,
    session_problems,
)
from .plugin_output import Relay, flush_c_stdio, own_group

METHODS = tuple(dict.fromkeys(SESSION_METHODS + tuple(OPTIONAL_SESSION) + SAMPLING_INTERFACE))


def serve(conn, spec, target, preload: dict, threads: int | None, relay: Relay | None = None, parent_end=None) -> None:
    """The child: load the plug-in, send what the contract reads, then answer calls until the
    parent closes the pipe. Its output goes to the relay (plugin_output.py); it leads a process
    group of its own, which the parent kills whole.
    (Over 80 lines: the child's life in order: the load, the contract, then the loop that answers
    each call, its error paths beside it.)"""
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
            conn.send_bytes(pickle.dumps(pack(value), protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 -- cannot be pickled: it stays here
            send("ref", _keep(objects, value))


# ---- a round's trace, its many small arrays stacked (pickled about twice as fast) ----

STACKED = ("draft_logits", "verify_logits", "kv_writes")  # RoundTrace fields: key -> array(s)


def pack(value) -> tuple:
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


def unpack(value):
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


def _die_with_parent() -> None:
    """Linux: SIGKILL when the process that started this one ends (an os._exit leaves no atexit)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
