"""The drift probe's two verdicts on a reduced-precision backend under test (docs/DESIGN.md,
"Reduced precision"): whenever ORACLE_BACKEND declares bfloat16 or float16 (not exact), the probe
(oracle.judge.probe.probe_runs.probe_runs: 24 seeded requests in both modes) runs once per model and both
verdicts must pass:

* drift (oracle/judge/probe/drift.py): no parameter's effective drift beyond what rounding gives;
* precision (oracle/judge/probe/precision.py): no value group's error energy beyond its kind's limit
  (calibration.PRECISION_LIMITS) times the noise twin's, i.e. nothing computed or stored below the
  declared dtype.

Two models: the tiny preset (seed 0), as `check --backend` judges it, and one random model of the
property suite's sizes (strategies.model_configs' space at the ci caps: hidden 8-32, head_dim 2-8,
1-2 layers, vocab 16-256) drawn by the fixed seed RANDOM_MODEL_SEED (the same model under every
profile; ORACLE_MAX_LAYERS=1 cuts it to one layer). Exact and FP32 backends are skipped: the value
rows are far tighter than any drift, and no twin applies. A failure names the verdict, the model and
what the verdict found (the parameter, or the value group), with its reproduce line.
"""

from __future__ import annotations


import numpy as np
import pytest

from oracle.checkpoint import build_model
from oracle.config import ModelConfig
from oracle.judge.probe import precision
from oracle.judge.plans.plan import INLINE, probe_plan
from oracle.judge.plans.verdict import judge

from . import harness
from .strategies import cap, seeded_model

RANDOM_MODEL_SEED = 20260  # the random model's draw (a property-suite-sized model the correct torch-cpu-bf16 passes)


def random_model(seed: int = RANDOM_MODEL_SEED):
    """A model of strategies.model_configs' space, drawn by a fixed seed (weight seed 0-3 as weight_seeds)."""
    rng = np.random.default_rng(seed)
    kvh = int(rng.choice([1, 2]))
    cfg = ModelConfig(
        vocab_size=int(rng.integers(16, 257)),
        hidden_size=int(rng.choice([16, 8, 32])),
        intermediate_size=int(rng.choice([32, 16, 64])),
        num_layers=min(int(rng.integers(1, 3)), cap("ORACLE_MAX_LAYERS")),
        num_heads=kvh * int(rng.choice([1, 2])),
        num_kv_heads=kvh,
        head_dim=int(rng.choice([8, 2, 4])),
        rope_theta=float(rng.choice([1e6, 1e4, 10.0])),
    )
    return seeded_model(cfg, int(rng.integers(0, 4)))


MODULE = "property_tests/test_probe_verdicts.py"  # what a failure's reproduce line reruns
MODELS = {"tiny": lambda: build_model("tiny", 0), "random": random_model}


def reduced_precision_backend():
    """The backend under test, or a skip naming why the probe's verdicts do not apply."""
    bk = harness.backend()
    if bk.exact or bk.dtype not in precision.BITS:
        pytest.skip(
            f"{bk.name} is {'exact' if bk.exact else bk.dtype}: the drift and precision verdicts judge "
            f"reduced-precision backends ({', '.join(precision.BITS)}) only"
        )
    if not bk.policies:
        pytest.skip(f"{bk.name} declares no policy: the probe cannot run")
    return bk


@pytest.mark.parametrize("which", list(MODELS))
def test_probe_verdicts_pass(which):
    """The probe through the backend under test on one model, and both verdicts (one test per model:
    one probe, whichever worker runs it)."""
    bk = reduced_precision_backend()
    model = MODELS[which]()
    with harness.threads_for(model):
        v = judge(probe_plan(bk, model, probe_reproduce=harness.reproduce_line(MODULE)), INLINE)
    assert not v.failed or v.drift is not None, f"{bk.name}, {which} model {model.cfg}: {v.first_failure()}"
    rep, prec = v.drift, v.precision
    failed = [f"drift verdict: {rep.failure}"] if not rep.ok else []
    if prec is None:
        failed.append(f"precision verdict: none for a {bk.dtype} backend")
    elif not prec.ok:
        failed.append(f"precision verdict: {prec.failure}")
    assert not failed, f"{bk.name}, {which} model {model.cfg}: " + "; ".join(failed)
