"""CUDA-only tests of kernels/ (BF16 on the device judged against the FP32 reference by the one
judge, through the property suite's harness; ORACLE_BACKEND defaults to torch-cuda here).

Tests marked `gpu` are skipped unless a capability probe passes: a CUDA device exists and
runs a BF16 matmul. Tolerances: the one table, oracle.tolerances.TOLERANCES, keyed by dtype.
Run:  make gpu-parity  (GPU_TESTS_ON_CPU=1 for a slow dry run of the logic on the CPU)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cuda_probe() -> str | None:
    """None when CUDA can run the tests, else the reason it cannot."""
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    try:
        x = torch.ones(16, 16, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        if float((x @ x)[0, 0]) != 16.0:
            return "CUDA BF16 matmul probe gave a wrong result"
    except Exception as e:  # noqa: BLE001 -- any failure means: skip
        return f"CUDA probe failed: {type(e).__name__}: {e}"
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")
    # the backend under test, as in the property suite; a CPU dry run judges torch-cpu-bf16
    os.environ.setdefault(
        "ORACLE_BACKEND", "torch-cpu-bf16" if os.environ.get("GPU_TESTS_ON_CPU") == "1" else "torch-cuda"
    )


def pytest_collection_modifyitems(config, items):
    why = cuda_probe()
    if why is None or os.environ.get("GPU_TESTS_ON_CPU") == "1":  # dry run of the logic on CPU
        return
    skip = pytest.mark.skip(reason=f"gpu test skipped: {why}")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    """The parity summary: cases, max relative errors per preset, excused divergences,
    fallbacks (also written to $OUT/gpu_parity_summary.json when OUT is set)."""
    from gpu_tests.test_gpu_parity import SUMMARY

    if not SUMMARY:
        return
    import json

    terminalreporter.write_sep("-", "parity summary (the one judge)")
    for name, verdict in SUMMARY.get("drift", {}).items():
        terminalreporter.write_line(f"drift verdict, tiny, kernel fault {name}: {verdict}")
    for name, verdict in SUMMARY.get("precision", {}).items():
        terminalreporter.write_line(f"precision verdict, tiny, kernel fault {name}: {verdict}")
    for preset, s in SUMMARY.items():
        if preset in ("drift", "precision"):
            continue
        terminalreporter.write_line(
            f"{preset}: {s['cases']} cases, {s['request_rounds']} request-rounds compared, max relative error "
            f"KV {s['max_rel_err']['kv']:.3g}, logits {s['max_rel_err']['logits']:.3g}; tokens identical up to the "
            f"first divergence in every request-round, {s['excused_divergences']} excused near-tie divergences, "
            f"every decision explained by the backend's own logits; {s['graph_fallbacks']} graph fallbacks; "
            f"cases with ragged depths {s['ragged_depths']}, stops {s['stops']}, masks {s['masks']}"
        )
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_parity_summary.json"), "w") as f:
            json.dump(SUMMARY, f, indent=1)
