"""The precision verdict is right in both directions on the CPU (BF16, tiny preset): the correct
torch-cpu-bf16 backend passes the drift probe's two verdicts, and each precision fault of
meta_tests/faulty_kernels.py (kernels/options.py PRECISION_FAULTS: FP8 K or V storage, the MLP
activation or one layer's gate/up weights through FP8) fails the precision verdict naming the value
group where the error enters (docs/DESIGN.md, "Reduced precision"). Through the CLI the
failure is a failed "drift probe: precision" check while every value check passes; through the
property suite (property_tests/test_probe_verdicts.py) a faulty ORACLE_BACKEND fails naming the
fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meta_tests import faulty_kernels
from property_tests.harness import threads_for
from oracle.checkpoint import build_model
from oracle.cli import main
from oracle.judge.probe import precision, probe_runs
from oracle.judge.plans.plan import probe_plan
from oracle.judge.plans.verdict import judge
from oracle.judge.probe.calibration import PROBE_REQUESTS

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
# what the verdict names for FP8 K / V storage: the first group past the threshold in compute order
NAMES = {"fp8_k": "K writes, depth 0, layer 0", "fp8_v": "V writes, depth 0, layer 0"}


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", 0)


@pytest.fixture(scope="module")
def verdicts(tiny):
    """fault (None: the correct backend) -> (DriftReport, PrecisionReport): the drift probe through
    torch-cpu-bf16 with that fault, and both verdicts, once per module."""
    done: dict = {}

    def get(fault):
        if fault not in done:
            from kernels.backend import make_torch_cpu_bf16

            bk = make_torch_cpu_bf16() if fault is None else getattr(faulty_kernels, f"make_{fault}_bf16")()
            with threads_for(tiny):
                v = judge(probe_plan(bk, tiny, probe_runs.probe_runs(bk, tiny)))
                done[fault] = v.drift, v.precision
        return done[fault]

    return get


def first_past(prec) -> tuple:
    """The group the failure must name: the first past the threshold in compute order."""
    bad = [g for g in prec.groups if g.t > prec.threshold]
    assert bad, prec.failure
    first = min(bad, key=lambda g: precision.compute_order(g.key))
    assert prec.failure.split(":")[0] == precision.group_label(first.key), prec.failure
    return first.key


def test_correct_bf16_backend_passes_both_verdicts(tiny, verdicts):
    rep, prec = verdicts(None)
    assert rep.ok, rep.failure
    assert prec is not None and prec.ok, prec.failure
    assert max(g.t for g in prec.groups) < prec.threshold
    # every K and V group of every depth and layer, and the logits, is judged and reported
    L = tiny.cfg.num_layers
    keys = {g.key for g in prec.groups}
    assert {k for k in keys if k[0] in ("k", "v")} == {
        (kind, j, l) for kind in ("k", "v") for j in range(4) for l in range(L)
    }
    assert {k[0] for k in keys} == {"k", "v", "draft", "verify"}
    assert prec.requests == PROBE_REQUESTS
    assert all(g.energy < g.limit for g in prec.groups), [g.line("bfloat16") for g in prec.groups]


@pytest.mark.parametrize("fault", ["fp8_k", "fp8_v"])
def test_fp8_kv_storage_is_named(verdicts, fault):
    _, prec = verdicts(fault)
    assert not prec.ok
    assert prec.failure.split(":")[0] == NAMES[fault], prec.failure
    assert first_past(prec) == ({"fp8_k": "k", "fp8_v": "v"}[fault], 0, 0)
    assert (
        "computed or stored below bfloat16" in prec.failure and "significant bits where bfloat16 has 8" in prec.failure
    )


def test_fp8_activation_is_named_downstream_of_layer_0s_mlp(verdicts):
    """SiLU(gate) * up through FP8 in every layer: the first values it reaches are layer 1's K and V
    at depth 0 (layer 0's own K and V are made before its MLP), so the group named is one of those or
    a later one."""
    _, prec = verdicts("fp8_act")
    assert not prec.ok
    first = first_past(prec)
    assert precision.compute_order(first) >= precision.compute_order(("k", 0, 1)), prec.failure
    by = {g.key: g for g in prec.groups}
    assert by[("k", 0, 0)].t <= prec.threshold and by[("v", 0, 0)].t <= prec.threshold, prec.failure


def test_fp8_gate_up_of_layer_1_is_named_at_depth_1_or_later(verdicts):
    """Layer 1's gate/up weights through FP8: the first values its MLP reaches are the next loop's,
    depth 1 (every K and V of depth 0 is made before it; the probe's logits are at depths d - 1 = 1
    and D - 1 = 3, none at depth 0)."""
    _, prec = verdicts("fp8_gate_up")
    assert not prec.ok
    first = first_past(prec)
    assert first[1] >= 1, prec.failure
    depth0 = [g for g in prec.groups if g.key[0] in ("k", "v") and g.key[1] == 0]
    assert depth0 and all(g.t <= prec.threshold for g in depth0), [g.line("bfloat16") for g in depth0]


def test_fp8_k_fails_check_backend(capsys):
    spec = "meta_tests.faulty_kernels:make_fp8_k_bf16"
    rc = main(["check", "--backend", spec, "--case", "ragged (5,3,1) d=2 D=4", "--json", "--no-shrink"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and not out["ok"]
    failed = [c for c in out["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["drift probe: precision"], failed
    detail = failed[0]["detail"]
    assert detail.startswith(NAMES["fp8_k"] + ": error energy"), detail
    assert "reproduce:" in detail and spec in detail, detail
    # every value check passed (and the drift verdict): only the error energy sees FP8 storage
    assert any(c["name"] == "drift probe: drift" for c in out["checks"])
    assert not out["precision"]["ok"] and out["precision"]["groups"][0]["group"] == NAMES["fp8_k"]


@pytest.mark.parametrize(
    "factory,name",
    [
        ("make_attn_scale_bf16", "drift verdict: attention logit scale"),
        ("make_fp8_k_bf16", "precision verdict: K writes, depth 0, layer 0"),
    ],
)
def test_property_suite_fails_a_faulty_backend(factory, name):
    """property_tests/test_probe_verdicts.py under ORACLE_BACKEND=the faulty backend (its tiny model
    only): it fails naming the fault, with a reproduce line."""
    spec = f"meta_tests.faulty_kernels:{factory}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ORACLE_"))}
    env["ORACLE_BACKEND"] = spec
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        "tiny",
        "property_tests/test_probe_verdicts.py",
    ]
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-3000:]
    assert "1 failed" in out, out[-3000:]
    assert "tiny model ModelConfig(vocab_size=64" in out and name in out, out[-3000:]
    assert f"ORACLE_BACKEND={spec} python -m pytest -q property_tests/test_probe_verdicts.py" in out, out[-3000:]


def test_bfloat16_rounding_is_round_to_nearest_even_on_the_bits():
    """drift_model.round_to(x, "bfloat16") (the emulation's bf16 too) has the bits of torch's
    bfloat16 cast (round to nearest, ties to even): ties, subnormals, infinities and the largest
    finite values included."""
    import numpy as np
    import torch

    from oracle.judge.probe.drift_model import round_to

    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    bits[:4096] = (bits[:4096] & np.uint32(0xFFFF0000)) | np.uint32(0x8000)  # exact ties
    x = bits.view(np.float32)
    x = np.concatenate([x[np.isfinite(x)], np.float32([np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, -0.0])])
    want = torch.from_numpy(x).to(torch.bfloat16).float().numpy().view(np.uint32)
    assert np.array_equal(round_to(x, "bfloat16").view(np.uint32), want)
