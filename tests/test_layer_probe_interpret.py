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


# `python scripts/gpu_layer_probe.py --check` on the interpreter of tests/interpreter_speed.py (the same values)
PROBE = """
import runpy, sys
from tests import interpreter_speed
interpreter_speed.install()
sys.argv = ["scripts/gpu_layer_probe.py", "--check"]
runpy.run_path("scripts/gpu_layer_probe.py", run_name="__main__")
"""


def test_the_probe_arms_agree_bit_for_bit_and_with_torch():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads(run.stdout)
    arms = {arm for rows in report.values() for arm in rows}
    assert {"launch", "launch_nopeel", "launch_ca", "launch_pk", "layer", "layer_nopeel", "layer_pf", "call"} <= arms
    assert all(v["bitwise_vs_first"] and v["rel_vs_torch"] <= 1e-5 for rows in report.values() for v in rows.values())


def test_the_read_arms_read_every_weight_once():
    """The `read` arms (timing only) over one launch a layer or a call, whole rows or even tasks: the
    sums their programs store add up to the sum of each layer's four weight matrices."""
    code = """
import sys, torch
from tests import interpreter_speed
interpreter_speed.install()
sys.path.insert(0, "scripts")
import gpu_layer_probe as g
p = g.Probe(64, 192, 128, 2, torch.device("cpu"))
want = torch.stack([sum(w[L].float().sum() for w in (p.Wq, p.Wo, p.Wg, p.Wd)) for L in range(2)])
for arm in ({"per": "layer", "bk": 32}, {"per": "call", "bk": 32}, {"per": "call", "even": (16, 32), "bk": 32}):
    buf = p.buffers(2)
    g.call(p, {"kind": "read", **arm}, {}, buf, 2)
    got = buf["R"].view(2, 65536).sum(1)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-3), (arm, got, want)
print("ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout[-2000:] + run.stderr[-2000:]
