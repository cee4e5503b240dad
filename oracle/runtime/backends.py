"""Backends: what runs rounds and returns traces (docs/DESIGN.md section 9), found by name.

What a backend is, is oracle/runtime/contract.py (`Backend`, `Session`, the optional hooks,
`Capabilities`). Here: `load_backend(spec, timeout)` (a `NAMED` backend or
`package.module:factory`; ORACLE_BACKEND when no spec is given), which imports the module and
calls the factory within `timeout` seconds, refuses an object that breaks the contract
(`contract_problems`) and returns it as a `LoadedBackend` (`.caps`), in this process (a plug-in in
a child process is oracle/runtime/isolated.py, built on this module); backend calls under a time limit
(`GuardedBackend`, `check --timeout`); and where a plug-in's module was found when another process
imported it (`PLUGIN_FILES`, for the PYTHONPATH its reproduce line needs: round_case.plugin_prefix).
Every backend, the FP32 reference among them
(oracle/reference_backend.py), is reached through its "module:factory" string, so this
module imports none of them.
"""

from __future__ import annotations

import importlib
import os
import queue
import sys
import threading

from .contract import Capabilities, LoadedBackend, capabilities, contract_problems, unwrap
from ..errors import OracleError


def load_backend(spec: str | None = None, timeout: float | None = None) -> LoadedBackend:
    """The backend `spec` names, checked against the contract. timeout: seconds the module's
    import and the factory's call may take together (None: no limit; `check --timeout`). Every
    load problem is an OracleError of one line (exit 2)."""
    spec = os.environ.get("ORACLE_BACKEND", "reference") if spec is None else spec
    if not spec.strip():
        raise OracleError(f"backend '': empty name (known: {', '.join(NAMED)}, package.module:factory)")
    if spec in NAMED:
        target = NAMED[spec]
    elif ":" in spec:
        target = spec
    else:
        raise OracleError(f"unknown backend {spec!r} (known: {', '.join(NAMED)}, package.module:factory)")
    bk = _within(timeout, spec, target)
    problems = contract_problems(bk)
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
        raise OracleError(
            f"backend {spec!r}: the object {target}() returned breaks the backend contract "
            f"(oracle/runtime/contract.py): {problems[0]}{more}"
        )
    return LoadedBackend(bk, Capabilities.read(bk))


# Named backends resolve through the same plug-in path as a user's `module:factory`.
NAMED = {
    "reference": "oracle.reference_backend:make_reference_backend",
    "torch-cpu": "kernels.backend:make_torch_cpu",
    "torch-cpu-bf16": "kernels.backend:make_torch_cpu_bf16",
    "torch-cuda": "kernels.backend:make_torch_cuda",
    "torch-cpu-bf16-inv": "kernels.backend:make_torch_cpu_bf16_inv",  # batch-invariant (kernels/invariant.py)
    "torch-cuda-inv": "kernels.backend:make_torch_cuda_inv",
    "jax": "judge_jax.backend:make_jax_backend",
}
# The Hypothesis profile of `make test`'s property-suite run against a named backend where it
# is not "ci-slow-backend" (a quarter of the ci examples): None, no such run (the reference: the
# suite's first run, in "ci"; a GPU backend, whose name holds "cuda": `make gpu-parity`). A quarter
# keeps fresh-clone CI within 12 minutes on 2 cores (the four runs took 59 / 81 / 66 / 55 s with
# torch-cpu and torch-cpu-bf16 in "ci", 2026-12-05); `make test-backends-full` runs every one in "ci".
SUITE_PROFILES = {"reference": None}


def suite_runs() -> list[tuple[str, str]]:
    """(name, Hypothesis profile) of each named backend `make test` runs the property suite
    against on a CPU machine, in NAMED's order (the Makefile reads `python -m oracle.runtime.backends`)."""
    runs = [(n, SUITE_PROFILES.get(n, None if "cuda" in n else "ci-slow-backend")) for n in NAMED]
    return [(n, p) for n, p in runs if p is not None]


def suite_command(name: str, profile: str, env: dict) -> tuple[list[str], dict]:
    """(argv, environment) of the property suite's run against backend `name` in Hypothesis `profile`:
    a pytest process of its own with one torch thread (env: the caller's environment, whose pytest
    and xdist variables are left out)."""
    keep = {k: v for k, v in env.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
    run_env = keep | {"OMP_NUM_THREADS": "1", "ORACLE_BACKEND": name, "HYPOTHESIS_PROFILE": profile}
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "property_tests"], run_env


def names_help() -> str:
    """The backend names for a command's help: 'reference | torch-cpu | ... | package.module:factory'."""
    return " | ".join([*NAMED, "package.module:factory"])


def _within(timeout: float | None, spec: str, target: str):
    """_from_factory(spec, target), given at most `timeout` seconds (None: in this thread, no
    limit). It runs on a daemon thread, which a hung import or factory leaves behind."""
    if timeout is None:
        return _from_factory(spec, target)
    stage = [f"importing {target.partition(':')[0]}"]  # what the thread is doing, for the message
    done: list = []
    event = threading.Event()

    def load():
        try:
            done.append((True, _from_factory(spec, target, stage)))
        except BaseException as e:  # noqa: BLE001 -- handed back to the caller's thread
            done.append((False, e))
        event.set()

    threading.Thread(target=load, name=f"load backend {spec}", daemon=True).start()
    if not event.wait(None if timeout >= threading.TIMEOUT_MAX else timeout):
        raise OracleError(f"backend {spec!r}: {stage[-1]} did not finish within {timeout:g} s (--timeout)")
    ok, value = done[0]
    if ok:
        return value
    raise value


def _from_factory(spec: str, target: str, stage: list | None = None):
    """The backend `target` makes (call_factory); a NAMED backend's failing import is a bug (exit 3)."""
    return call_factory(f"backend {spec!r}", target, "backend", own=spec in NAMED, stage=stage)


def call_factory(label: str, target: str, what: str, own: bool = False, stage: list | None = None):
    """Import `package.module:factory` (target) and call the factory: a plug-in's backend or
    sampler. Every failure is an OracleError of one line starting with label ("backend 'x'");
    what: what the factory returns; own: the project's own module, whose failing import is a
    bug (raised as it is); stage: a list the factory's call is appended to (for a time limit's
    message)."""
    mod_name, _, attr = target.partition(":")
    if not mod_name or not attr:
        raise OracleError(f"{label}: expected package.module:factory")
    try:
        factory = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise OracleError(f"{label}: cannot load {attr} from {mod_name} ({e})") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 -- a plug-in's module that fails to import
        if own and not isinstance(e, SystemExit):  # the project's own module: a bug (exit 3)
            raise
        where = f" ({e.filename}, line {e.lineno})" if isinstance(e, SyntaxError) else ""
        raise OracleError(
            f"{label}: importing {mod_name} raised {type(e).__name__}: "
            f"{e.msg if isinstance(e, SyntaxError) else e}{where}"
        ) from None
    if not callable(factory):
        raise OracleError(f"{label}: {target} is not callable (a factory returning a {what})")
    if stage is not None:
        stage.append(f"{target}()")
    try:
        return factory()
    except OracleError:  # the factory's own one-line reason (no CUDA device, ...)
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 -- a plug-in's failure is input
        raise OracleError(f"{label}: {target}() raised {type(e).__name__}: {e}") from None


# ---- backend calls with a time limit (`check --timeout`) ----


class BackendCallFailed(Exception):
    """A backend call that timed out or called sys.exit(): a failed check, like any exception
    a backend raises."""


class WrongReturn(BackendCallFailed):
    """A session call returned what the contract does not allow ("step() returned str, expected
    RoundTrace"): the backend's error, named as such (oracle/judge/runner.py `returned`)."""


class JudgeFailed(BaseException):
    """The judge's side (`check --reference`) raised: not the backend's failure, so it passes
    the `except Exception` that turns a backend's exceptions into failed checks; `check`
    reports it as the reference's error (exit 2)."""


TIMED_CALLS = ("session", "add", "step", "submit", "collect", "remove", "tokens")


class OutOfProcess:
    """A backend whose calls run in another process (oracle/runtime/isolated.py IsolatedBackend):
    kill() ends that process, so a call past --timeout does not keep a core busy."""

    def kill(self) -> None:
        raise NotImplementedError


class CallGuard:
    """Runs a backend's calls on one worker thread (the same thread every time, so thread-local
    state a backend sets in session() holds in step()) and waits at most `timeout` seconds
    (None: no limit). A call that times out, or that raises SystemExit, raises
    BackendCallFailed naming the call; after a time-out every later call fails at once
    (the worker is still busy; on_hang(), when given, is called first: an OutOfProcess
    backend's kill). judge=True: every failure raises JudgeFailed instead."""

    def __init__(self, name: str, timeout: float | None, judge: bool = False, on_hang=None):
        self.name, self.timeout, self.judge, self.on_hang = name, timeout, judge, on_hang
        self.hung: str | None = None
        self.jobs: queue.Queue = queue.Queue()
        self.worker: threading.Thread | None = None

    def _serve(self) -> None:
        while True:
            fn, args, kwargs, done, event = self.jobs.get()
            try:
                done.append((True, fn(*args, **kwargs)))
            except BaseException as e:  # noqa: BLE001 -- SystemExit included: handed back
                done.append((False, e))
            event.set()

    def call(self, what: str, fn, *args, **kwargs):
        if self.hung:
            self._fail(f"{what} not run: {self.hung} earlier did not return")
        if self.worker is None:
            self.worker = threading.Thread(target=self._serve, name=f"backend {self.name}", daemon=True)
            self.worker.start()
        done: list = []
        event = threading.Event()
        self.jobs.put((fn, args, kwargs, done, event))
        if not event.wait(self.timeout):
            self.hung = what
            if self.on_hang is not None:
                self.on_hang()
            self._fail(f"{what} did not return within {self.timeout:g} s (--timeout)")
        ok, value = done[0]
        if ok:
            return value
        if isinstance(value, SystemExit):
            self._fail(f"{what} called sys.exit({value.code!r})")
        if isinstance(value, KeyboardInterrupt):  # raised on this worker thread: the backend's, not a Ctrl-C
            self._fail(f"{what} raised KeyboardInterrupt{': ' + str(value) if str(value) else ''}")
        if self.judge:
            raise JudgeFailed(f"{what} raised {type(value).__name__}: {value}") from value
        raise value

    def _fail(self, message: str):
        raise (JudgeFailed if self.judge else BackendCallFailed)(message)


class GuardedSession:
    """A backend session whose calls go through a CallGuard; other attributes pass through."""

    def __init__(self, inner, guard: CallGuard):
        self._inner, self._guard = inner, guard

    def __getattr__(self, name):
        value = getattr(self._inner, name)
        if name in TIMED_CALLS and callable(value):
            return lambda *a, **k: self._guard.call(f"{name}()", value, *a, **k)
        return value


class GuardedBackend:
    """A backend whose session() and session calls run under a CallGuard (`check --timeout`,
    SystemExit caught); every other attribute is the backend's own."""

    def __init__(self, inner, timeout: float | None, judge: bool = False):
        self._inner = inner
        out = unwrap(inner)
        self._guard = CallGuard(
            getattr(inner, "name", type(inner).__name__),
            timeout,
            judge,
            on_hang=out.kill if isinstance(out, OutOfProcess) else None,
        )

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_inner", "_guard"):  # not yet set (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self._inner, name)

    @property
    def caps(self) -> Capabilities:
        """The guarded backend's Capabilities (oracle/runtime/contract.py)."""
        return capabilities(self._inner)

    def fresh(self) -> "GuardedBackend":
        """The same backend under a new guard (a forked child's: the old guard's thread is not in it)."""
        return GuardedBackend(self._inner, self._guard.timeout, self._guard.judge)

    def session(self, *args, **kwargs):
        return GuardedSession(self._guard.call("session()", self._inner.session, *args, **kwargs), self._guard)


# ---- what a reproduce line needs to import a plug-in ----

PLUGIN_FILES: dict = {}  # module -> its file, for a plug-in imported in another process only


def note_plugin_file(module: str, path: str) -> None:
    """Where a plug-in's module was found, when another process imported it (oracle/runtime/isolated.py)."""
    PLUGIN_FILES[module] = path


if __name__ == "__main__":  # `python -m oracle.runtime.backends`: the Makefile's suite runs, one per line
    for name, profile in suite_runs():
        print(name, profile)
