"""scripts/gpu_layer_probe.py under the Triton interpreter (CPU): its arms (four launches per
layer, with and without the peeled first weight tile, activations with and without .cg; one
persistent launch per layer or per call) compute the same values bit for bit, and those of a
torch chain of the same roundings (`--check`, exit 0). Skipped where Triton is not installed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
REPO = Path(__file__).resolve().parents[1]


def test_the_probe_arms_agree_bit_for_bit_and_with_torch():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "scripts/gpu_layer_probe.py", "--check"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads(run.stdout)
    arms = {arm for rows in report.values() for arm in rows}
    assert {"launch", "launch_nopeel", "launch_ca", "launch_pk", "layer", "layer_nopeel", "layer_pf", "call"} <= arms
    assert all(v["bitwise_vs_first"] and v["rel_vs_torch"] <= 1e-5 for rows in report.values() for v in rows.values())
