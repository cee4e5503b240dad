"""The property suite's drawn scenarios run the drift probe on their model for a bfloat16 backend
(property_tests/harness.py `probe_for`: one drawn model in PROBE_ONE_IN): a precision fault that
every per-value bound misses, the MLP activation rounded through FP8 before down_proj
(meta_tests/faulty_kernels.py make_fp8_act_bf16), fails a drawn scenario of
test_block_and_loop_rounds_agree through the probe's precision verdict; the same scenario judged
without the probe passes (the per-value bounds alone miss it)."""

from __future__ import annotations

import pytest

from meta_tests.catch import check
from property_tests import harness

PROP = "test_round_props::test_block_and_loop_rounds_agree"
SPEC = "meta_tests.faulty_kernels:make_fp8_act_bf16"


def test_a_drawn_scenario_catches_fp8_activation_through_the_probe(monkeypatch):
    pytest.importorskip("torch")
    from meta_tests import faulty_kernels

    bk = faulty_kernels.make_fp8_act_bf16()
    probed = []
    real = harness.probe_verdict
    monkeypatch.setattr(harness, "probe_verdict", lambda b, sc: probed.append(sc) or real(b, sc))
    o = check(bk, SPEC, PROP)
    assert o.caught, f"the probe on drawn models missed fp8_act ({o.message})"
    assert "on the drawn model" in o.message and "precision" in o.message, o.message
    # the scenario whose probe failed, judged by the per-value bounds alone: it passes
    runs = harness.check_equivalence(probed[-1], bk, probe=False)
    assert set(runs) == {"block", "loop"}
