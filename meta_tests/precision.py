"""The faulty backends in reduced precision: `as_bf16(bk)` runs a meta_tests.faulty backend
with BF16 emulated on the CPU, declared as dtype "bfloat16", exact False, and so judged by
the reduced-precision rules (tolerance row, per-request first-divergence rule, decisions
explained by the backend's own logits). Every fault must still be caught that way, and the
fault-free backend must still pass (meta_tests/test_faults.py).

Emulation: every stored tensor (hidden states between calls, K/V written to the planes,
embeddings, logits) is rounded to bfloat16 (nearest even); weights and the arithmetic inside
a call stay FP32. This gives relative errors of ~0.3-2% on KV and logits and near-tie token
flips. (Rounding the weights too gave errors beyond those of the torch BF16 backend on long
stateful runs, 0.125 on verification logits at depth 2, and flips at reference margin 0.132:
an emulation harsher than the engine it stands for.)
"""

from __future__ import annotations

import copy

import numpy as np

from oracle.judge.probe.drift_model import round_to
from oracle.model import LoopedModel


def bf16(x) -> np.ndarray:
    """FP32 -> the nearest bfloat16 value (ties to even), kept as FP32."""
    return round_to(x, "bfloat16")


class _RoundingKV:
    def __init__(self, kv):
        self._kv = kv

    def __getattr__(self, name):
        return getattr(self._kv, name)

    def write(self, request, position, depth, layer, k, v, call):
        self._kv.write(request, position, depth, layer, bf16(k), bf16(v), call)


class BF16Model:
    """A LoopedModel whose stored tensors are bfloat16 values."""

    def __init__(self, model: LoopedModel):
        self.inner = model
        self.cfg, self.weights = model.cfg, model.weights  # what the judge's reference uses

    def embed(self, tokens):
        return bf16(self.inner.embed(tokens))

    def recurrent_call(self, rows, h, kv, call):
        return bf16(self.inner.recurrent_call(rows, bf16(h), _RoundingKV(kv), call))

    def head(self, h):
        return bf16(self.inner.head(h))


_models: dict = {}


def _bf16_model(model):
    key = id(model)
    if key not in _models or _models[key][0] is not model:
        _models[key] = (model, BF16Model(model))
    return _models[key][1]


def as_bf16(bk):
    """The same backend (its fault included), run in emulated BF16 and declared inexact."""
    b = copy.copy(bk)
    b.exact, b.dtype, b.host_rng = False, "bfloat16", True
    base = type(bk).session

    def session(model, d, D, mode, policy="sequential"):
        return base(b, _bf16_model(model), d, D, mode, policy)

    b.session = session
    b.precision = "bf16"
    return b
