"""Backends: what runs rounds and returns traces (docs/DESIGN.md section 9).

A backend is an object with
    name: str, dtype: str ("float32" | "bfloat16" | ...), exact: bool (bit-identical to the
    reference is expected), policies: tuple of RNG policies it supports,
    session(model, d, D, mode, policy) -> a session with
        add(rid, prompt, params, replay=None)   # prefill; replay: list of uniforms to consume
        step(counts: dict[rid, T_i]) -> RoundTrace
        remove(rid) -> committed tokens
        tokens(rid) -> committed tokens
`model` is the reference LoopedModel (config + FP32 weights by HF name); a backend converts
them as it likes. ORACLE_BACKEND picks one: reference | torch-cpu | torch-cuda |
package.module:factory (factory() returns a backend).
"""
from __future__ import annotations

import importlib
import os

from .errors import OracleError
from .session import Session


class ReferenceSession(Session):
    def tokens(self, rid) -> list[int]:
        return list(self.requests[rid].tokens)


class ReferenceBackend:
    name, dtype, exact, policies = "reference", "float32", True, ("sequential", "fixed")

    def session(self, model, d, D, mode, policy="sequential"):
        return ReferenceSession(model, d, D, mode, policy)


def load_backend(spec: str | None = None):
    spec = spec or os.environ.get("ORACLE_BACKEND", "reference")
    if spec == "reference":
        return ReferenceBackend()
    if spec in NAMED:
        return _from_factory(spec, NAMED[spec])
    if ":" in spec:
        return _from_factory(spec, spec)
    raise OracleError(f"unknown backend {spec!r} (known: {', '.join(['reference', *NAMED])}, package.module:factory)")


# Named backends resolve through the same plug-in path as a user's `module:factory`.
NAMED = {
    "torch-cpu": "kernels.backend:make_torch_cpu",
    "torch-cpu-bf16": "kernels.backend:make_torch_cpu_bf16",
    "torch-cuda": "kernels.backend:make_torch_cuda",
    "jax": "judge_jax.backend:make_jax_backend",
}
REQUIRED = ("name", "dtype", "exact", "policies", "session")


def _from_factory(spec: str, target: str):
    mod_name, _, attr = target.partition(":")
    if not mod_name or not attr:
        raise OracleError(f"backend {spec!r}: expected package.module:factory")
    try:
        factory = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise OracleError(f"backend {spec!r}: cannot load {attr} from {mod_name} ({e})") from None
    if not callable(factory):
        raise OracleError(f"backend {spec!r}: {target} is not callable (a factory returning a backend)")
    try:
        bk = factory()
    except Exception as e:                         # noqa: BLE001 -- a plug-in's failure is input
        raise OracleError(f"backend {spec!r}: {target}() raised {type(e).__name__}: {e}") from None
    missing = [a for a in REQUIRED if not hasattr(bk, a)]
    if missing:
        raise OracleError(f"backend {spec!r}: the object {target}() returned lacks {', '.join(missing)}")
    from .compare import TOLERANCES
    if not bk.exact and bk.dtype not in TOLERANCES:
        raise OracleError(f"backend {spec!r}: dtype {bk.dtype!r} has no tolerance row (known: {', '.join(TOLERANCES)})")
    return bk
