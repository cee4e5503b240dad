"""The drift verdict is right in both directions on the CPU (BF16): the correct torch-cpu-bf16
backend passes, and each kernel fault of meta_tests/faulty_kernels.py fails `check --backend`
with its parameter named (docs/DESIGN.md, "Reduced precision")."""

from __future__ import annotations

import json

import pytest

from meta_tests import faulty_kernels
from oracle.cli import main
from oracle.judge.plans.plan import probe_plan
from oracle.judge.plans.verdict import judge
from oracle.checkpoint import build_model

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", 0)


def test_correct_bf16_backend_has_no_drift(tiny):
    from kernels.backend import make_torch_cpu_bf16

    rep = judge(probe_plan(make_torch_cpu_bf16(), tiny)).drift
    assert rep.ok, rep.failure
    assert max(abs(e.t) for e in rep.estimates) < rep.threshold


@pytest.mark.parametrize("fault", ["rope_theta", "input_norm"])
def test_kernel_fault_is_named(tiny, fault):
    rep = judge(probe_plan(getattr(faulty_kernels, f"make_{fault}_bf16")(), tiny)).drift
    assert not rep.ok
    assert faulty_kernels.NAMES[fault] in rep.failure.split(" 1.0")[0], rep.failure
    assert "a systematic error, not rounding" in rep.failure


def test_attn_scale_fault_fails_check_backend(capsys):
    rc = main(
        [
            "check",
            "--backend",
            "meta_tests.faulty_kernels:make_attn_scale_bf16",
            "--case",
            "ragged (5,3,1) d=2 D=4",
            "--json",
            "--no-shrink",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and not out["ok"]
    drift = [c for c in out["checks"] if c["name"].endswith("drift") and not c["ok"]]
    assert drift and faulty_kernels.NAMES["attn_scale"] in drift[0]["detail"].split(" 1.0")[0], drift
    # every value check passed: only the drift verdict sees a 1% scale
    assert all(c["ok"] for c in out["checks"] if not c["name"].endswith("drift")), out["checks"]
    est = {e["parameter"]: e for e in out["drift"]["estimates"]}
    assert abs(est["attention logit scale (all layers)"]["scale"] - 1.01) < 0.003
