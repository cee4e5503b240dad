"""A drift or precision failure shrinks to fewer probe requests (issue 44, oracle/judge/shrinker/shrink.py): the
kernel faults of meta_tests/faulty_kernels.py on the CPU (BF16). The shrunk line `check --backend X
--probe-requests N` fails in the same class naming the same group or parameter; the correct
torch-cpu-bf16 passes the same line."""

from __future__ import annotations

import json
import shlex

import pytest

from meta_tests import faulty_kernels
from oracle.cli import main

pytest.importorskip("torch")

RAGGED = "ragged (5,3,1) d=2 D=4"


def run(capsys, *argv):
    rc = main(list(argv))
    return rc, json.loads(capsys.readouterr().out)


def failed(v: dict) -> list:
    return [c for c in v["checks"] if not c["ok"]]


def test_a_precision_fault_shrinks_to_fewer_probe_requests(capsys):
    spec = "meta_tests.faulty_kernels:make_fp8_k_bf16"
    argv = ["check", "--backend", spec, "--case", RAGGED, "--json", "--quiet", "--shrink-budget", "60"]
    rc, v = run(capsys, *argv)
    s = v["shrunk"]
    assert rc == 1 and s["class"] == "precision" and s["key"] == "K writes, depth 0, layer 0", s
    assert s["original"]["probe_requests"] == 24 and s["shrunk"]["probe_requests"] <= 12, s
    words = shlex.split(s["shrunk"]["reproduce"])
    words = words[words.index("oracle") + 1 :]
    assert words[-4:] == ["--probe-requests", str(s["shrunk"]["probe_requests"]), "--backend", spec], words
    rc, again = run(capsys, *words, "--json", "--quiet")
    assert rc == 1 and [c["name"] for c in failed(again)] == ["drift probe: precision"]
    assert again["precision"]["failure"].startswith("K writes, depth 0, layer 0: ")
    rc, fine = run(capsys, *words[:-1], "torch-cpu-bf16", "--json", "--quiet")
    assert rc == 0 and fine["precision"]["ok"] and fine["drift"]["ok"], failed(fine)


def test_a_drift_fault_fails_its_shrunk_line_naming_the_parameter(capsys):
    """The table's (docs/results.md) shrunk line of the input-norm fault: 8 probe requests."""
    spec = "meta_tests.faulty_kernels:make_input_norm_bf16"
    rc, v = run(capsys, "check", "--backend", spec, "--probe-requests", "8", "--json", "--quiet")
    assert rc == 1 and failed(v)[0]["name"] == "drift probe: drift", failed(v)
    assert v["drift"]["failure"].startswith(faulty_kernels.NAMES["input_norm"]), v["drift"]["failure"]
    assert v["drift"]["requests"] == 8
