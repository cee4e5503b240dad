"""Backends: what runs rounds and returns traces (shared/DESIGN.md section 9).

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
    if spec in ("torch-cpu", "torch-cuda"):
        try:
            from kernels.backend import make_torch_backend
        except ImportError as e:
            raise OracleError(f"backend {spec!r}: cannot import kernels.backend ({e})") from None
        return make_torch_backend("cpu" if spec == "torch-cpu" else "cuda")
    if ":" in spec:
        mod_name, _, attr = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as e:
            raise OracleError(f"backend {spec!r}: cannot load {attr} from {mod_name} ({e})") from None
        return factory()
    raise OracleError(f"unknown backend {spec!r} (known: reference, torch-cpu, torch-cuda, package.module:factory)")
