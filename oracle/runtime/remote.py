"""The parent's side of what a plug-in's process keeps (oracle/runtime/isolated.py): `Remote`, a proxy
whose method calls go to the child, and the pickling of the pipe's messages: kept objects by reference,
the shared model by key (`ParentPickler`); results unpickled without importing the plug-in's own package
(`ResultUnpickler`); an exception of a class this process does not import comes back as a `Raised`."""

from __future__ import annotations

import os
import pickle
import sys

from .backends import BackendCallFailed, OutOfProcess  # the owner: isolated.IsolatedBackend
from .child import METHODS

BY_REF = ("session", "submit")  # calls whose result stays in the child (a session, a round in flight)


class Raised(Exception):
    """Stand-in for an exception whose class this process does not import (the plug-in's own)."""


# exceptions of the plug-in that would read as this process's own (a KeyboardInterrupt as the user's
# Ctrl-C): a stand-in of the same name, an Exception, so that the call fails as the backend's
STAND_IN = ("KeyboardInterrupt", "GeneratorExit")


def plain(x) -> bool:
    return isinstance(x, (int, float, str, bytes, bool, type(None), list, tuple, dict, Remote))


class Remote:
    """An object that lives in the child (a session, a submitted round, a hook): its methods'
    calls go there. Listed methods are known without asking; others are read there."""

    def __init__(self, owner: OutOfProcess, oid: int, gen: int, is_callable: bool, methods, label: str = ""):
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


class ParentPickler(pickle.Pickler):
    def __init__(self, f, owner: OutOfProcess, fresh: set):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.owner, self.fresh = owner, fresh  # fresh: ids shared by this message (sent by value)

    def persistent_id(self, obj):
        if isinstance(obj, Remote):
            return ("ref", obj._oid)
        hit = self.owner._shared.get(id(obj))
        if hit is not None and hit[0] is obj and id(obj) not in self.fresh:
            return ("shared", hit[1])
        return None


class Unimported(Exception):
    pass


class ResultUnpickler(pickle.Unpickler):
    """Results from the child, without importing the plug-in's own package here."""

    def __init__(self, f, top: str):
        super().__init__(f)
        self.top = top

    def find_class(self, module, name):
        if module.split(".")[0] == self.top and module not in sys.modules:
            raise Unimported(f"an object of class {module}.{name} (the plug-in's own: not imported by the oracle)")
        return super().find_class(module, name)
