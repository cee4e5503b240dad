"""The fixed runs whose RNG event sequences are stored under golden/ (the RNG-order
regression check, DESIGN.md section 6). `python scripts/regen_golden.py` rewrites the files
from the reference; property_tests/test_golden.py compares the backend under test with them.
"""

from __future__ import annotations

from pathlib import Path

from oracle.judge.scenario import Case
from oracle.config import ModelConfig, preset
from oracle.sampling_params import SamplingParams

from .strategies import MODES

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"

_S = SamplingParams
_MIXED = (
    _S(),  # greedy: draws nothing
    _S(temperature=1.0, top_k=8, seed=11),
    _S(temperature=0.7, top_p=0.9, seed=12),
    _S(temperature=1.5, seed=13),
    _S(temperature=1.0, top_k=20, top_p=0.8, seed=14),
)
_MIXED_PROMPTS = ((1, 2, 3), (40, 41), (7,), (9, 60, 33, 12, 5), (17, 18, 19, 20))
_MIXED_OPS = (
    ("add", 0),
    ("add", 1),
    ("add", 2),
    ("add", 3),
    ("step", ((0, 5), (1, 3), (2, 1), (3, 4))),
    ("step", ((1, 5), (2, 3), (3, 9))),
    ("remove", 1),
    ("add", 4),
    ("step", ((0, 2), (2, 9), (3, 1), (4, 6))),
    ("step", ((2, 4), (3, 3), (4, 9))),
)

_SMALL = ModelConfig(
    vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8
)
_HIGH_K = tuple(_S(temperature=t, seed=200 + n) for n, t in enumerate((1.0, 0.8, 1.2, 1.0)))
_HIGH_K_PROMPTS = ((3, 4, 5), (6,), (7, 8), (9, 10, 11, 12))
_HIGH_K_OPS = (("add", 0), ("add", 1), ("add", 2), ("add", 3)) + tuple(
    ("step", tuple((i, 9) for i in range(4))) for _ in range(5)
)


def _case(cfg, d, D, policy, prompts, params, ops):
    return Case.from_ops(cfg, 0, d, D, policy, prompts, params, ops)


CASES: dict[str, Case] = {
    "sequential_mixed_d2_D4": _case(preset("tiny"), 2, 4, "sequential", _MIXED_PROMPTS, _MIXED, _MIXED_OPS),
    "fixed_mixed_d2_D4": _case(preset("tiny"), 2, 4, "fixed", _MIXED_PROMPTS, _MIXED, _MIXED_OPS),
    "sequential_k8_d1_D2": _case(_SMALL, 1, 2, "sequential", _HIGH_K_PROMPTS, _HIGH_K, _HIGH_K_OPS),
    "fixed_k8_d1_D2": _case(_SMALL, 1, 2, "fixed", _HIGH_K_PROMPTS, _HIGH_K, _HIGH_K_OPS),
}


def path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.json"


def run_events(bk, name: str, mode: str) -> list:
    """Every RNG event of a golden case's run on `bk`, in round order."""
    from .harness import run

    return [e for tr in run(bk, CASES[name], mode).traces for e in tr.rng_events]


__all__ = ["CASES", "GOLDEN_DIR", "MODES", "path", "run_events"]
