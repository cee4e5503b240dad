"""A cheaper Triton interpreter for the interpreter tests (speed only, the same values).

Two costs of triton 3.7's interpreter that buy nothing:
- it patches triton.language anew (inspect.getmembers over five modules) on every call of a
  @triton.jit helper inside a kernel. `install()` keeps the first patch of each helper per
  launch and skips the repeats; the launch's own patch and its restore are untouched.
- with sanitize_overflow on, every 32-bit integer add, sub and mul is redone in int64 and
  compared with the type's bounds for a device_assert that, without debug, returns at once
  (triton/language/semantic.py). Off, as where debug is off on the GPU: no check is lost.
Where the interpreter's internals are not as expected, it does nothing."""

from __future__ import annotations

import dataclasses


def install() -> bool:
    """Install once per process; True where installed."""
    try:
        import triton.runtime.interpreter as interp
    except ImportError:
        return False
    grid, fn = getattr(interp, "GridExecutor", None), getattr(interp, "InterpretedFunction", None)
    if grid is None or fn is None or not hasattr(fn, "rewrite") or not hasattr(interp, "InterpreterError"):
        return False
    if getattr(grid.__call__, "_patched_once", False):
        return True
    launches: list[set] = []  # per running launch: the helpers already patched in it
    grid_call, fn_call = grid.__call__, fn.__call__

    def launch(self, *args, **kwargs):
        launches.append(set())
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            launches.pop()

    def helper(self, *args, **kwargs):
        if not launches or self.fn not in launches[-1]:
            if launches:
                launches[-1].add(self.fn)
            return fn_call(self, *args, **kwargs)
        try:  # as fn_call, less its _patch_lang
            return self.rewrite()(*args, **kwargs)
        except Exception as e:
            raise interp.InterpreterError(repr(e)) from e

    launch._patched_once = True
    grid.__call__, fn.__call__ = launch, helper
    builder = getattr(interp, "interpreter_builder", None)
    opts = getattr(builder, "options", None)
    if dataclasses.is_dataclass(opts) and hasattr(opts, "sanitize_overflow") and not getattr(opts, "debug", True):
        builder.options = dataclasses.replace(opts, sanitize_overflow=False)
    return True
