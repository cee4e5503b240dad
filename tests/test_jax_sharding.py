"""Tensor parallelism of the JAX judge on 4 host devices: the same logits as 1 device.

XLA_FLAGS=--xla_force_host_platform_device_count=4 must be set before jax is imported, so
the comparison runs in a subprocess (this test process has already imported jax).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
import jax, numpy as np
from oracle.config import ModelConfig
from oracle.judge.comparison.compare import rel_err
from oracle.model import LoopedModel, random_weights
from oracle.sampling_params import SamplingParams
from judge_jax.backend import make_jax_backend
from judge_jax.model import JaxLoopedModel
from jax.sharding import Mesh

assert len(jax.devices()) == 4, jax.devices()
# 4 heads / 4 kv heads / intermediate 96 split over 4 devices; 2 query heads per kv head
cfg = ModelConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4,
                  num_kv_heads=4, head_dim=16)
cfg_gqa = ModelConfig(vocab_size=80, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=8,
                      num_kv_heads=4, head_dim=8)
out = {"cache_free": 0.0, "rounds": 0.0, "kv": 0.0, "tokens_equal": True, "sharded_params": 0}
for c in (cfg, cfg_gqa):
    ref = LoopedModel(c, random_weights(c, seed=3))
    mesh = Mesh(np.array(jax.devices()[:4]), ("tp",))  # a 1-D mesh, axis "tp" (judge_jax/sharding.py)
    one, four = JaxLoopedModel.from_reference(ref), JaxLoopedModel.from_reference(ref, mesh=mesh)
    out["sharded_params"] += sum(len(a.sharding.device_set) == 4 and not a.sharding.is_fully_replicated
                                 for a in jax.tree_util.tree_leaves(four.params))
    toks = list(np.random.default_rng(1).integers(0, c.vocab_size, 37))
    for a, b in zip(one.forward_full(toks, 4), four.forward_full(toks, 4)):
        out["cache_free"] = max(out["cache_free"], max(rel_err(b[t], a[t]) for t in range(len(toks))))
    # recurrent: whole rounds (prefill, mixed-depth loop waves, block verification) on both
    pairs = []
    for mode in ("block", "loop"):
        runs = []
        for m in (None, mesh):
            s = make_jax_backend(mesh=m).session(ref, 2, 4, mode)
            assert m is None or s.kv.k.sharding.spec[4] == "tp"
            for rid in range(3):
                s.add(rid, toks[: 5 + 7 * rid], SamplingParams(temperature=0.8, seed=rid))
            runs.append([s.step({0: 5, 1: 3, 2: 1}), s.step({0: 2, 1: 6, 2: 4})])
        pairs += list(zip(*runs))
    for t1, t4 in pairs:
        out["tokens_equal"] &= t1.emitted == t4.emitted
        for key, lg in t1.verify_logits.items():
            out["rounds"] = max(out["rounds"], rel_err(t4.verify_logits[key], lg))
        for key, lg in t1.draft_logits.items():
            out["rounds"] = max(out["rounds"], rel_err(t4.draft_logits[key], lg))
        for key, (_, k, v) in t1.kv_writes.items():
            _, k4, v4 = t4.kv_writes[key]
            out["kv"] = max(out["kv"], rel_err(k4, k), rel_err(v4, v))
print(json.dumps(out))
"""


def test_four_devices_match_one_device():
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    p = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["sharded_params"] == 2 * 2 * 7, res  # q, k, v, o, gate, up, down of both layers of both models
    assert res["cache_free"] <= 1e-5, res
    assert res["rounds"] <= 1e-5, res
    assert res["kv"] <= 1e-5, res
    assert res["tokens_equal"], res
