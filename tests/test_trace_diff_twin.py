"""`trace diff` judges recorded traces through the one verdict (oracle.judge.plans.verdict.judge, a traces plan):
a reduced-precision row by the noise twin of the model the traces name, rebuilt from the file,
as `check --backend` judges; by the row's fixed tolerances, said so, where that model cannot be
rebuilt."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from oracle.checkpoint import build_model, save_checkpoint
from oracle.cli import main
from oracle.judge.plans.plan import traces_plan
from oracle.judge.plans.verdict import judge
from oracle.trace_file import load_trace_file

pytest.importorskip("torch")


def record(tmp_path, name: str, *extra) -> str:
    out = str(tmp_path / name)
    assert main(["trace", "record", "--out", out, "--mode", "block", "--counts", "5,3,1", *extra]) == 0
    return out


def diff_json(capsys, a: str, b: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["trace", "diff", a, b, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_a_bf16_trace_is_judged_by_the_twin_of_its_preset(tmp_path, capsys):
    a = record(tmp_path, "a.json")
    b = record(tmp_path, "b.json", "--backend", "torch-cpu-bf16")
    rc, out = diff_json(capsys, a, b)
    assert rc == 0 and out["ok"], out
    assert out["bounds"] == "noise twin"
    rc, out = diff_json(capsys, a, a)
    assert rc == 0 and out["tolerance_row"] == "exact" and out["bounds"] == "exact"


def test_a_missing_checkpoint_falls_back_to_the_fixed_row_and_says_why(tmp_path, capsys):
    tiny = build_model("tiny", 0)
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, tiny.cfg, tiny.weights)
    a = record(tmp_path, "a.json", "--checkpoint", str(ckpt))
    b = record(tmp_path, "b.json", "--checkpoint", str(ckpt), "--backend", "torch-cpu-bf16")
    rc, out = diff_json(capsys, a, b)
    assert rc == 0 and out["bounds"] == "noise twin", out
    shutil.rmtree(ckpt)
    rc, out = diff_json(capsys, a, b)
    assert rc == 0 and out["bounds"].startswith("fixed row (checkpoint ") and "is not a folder" in out["bounds"]


def test_the_twin_fails_a_kv_write_off_by_its_own_scale(tmp_path):
    """One K/V write scaled by 1.5 in a bfloat16 trace: the twin's per-value rule fails it, naming
    the KV writes (the same traces against themselves pass)."""
    tiny = build_model("tiny", 0)
    a = load_trace_file(record(tmp_path, "a.json")).traces
    b = load_trace_file(record(tmp_path, "b.json", "--backend", "torch-cpu-bf16")).traces
    assert judge(traces_plan(a, b, "bfloat16", tiny)).ok
    key = next(iter(b[0].kv_writes))
    call, k, v = b[0].kv_writes[key]
    b[0].kv_writes[key] = (call, np.asarray(k) * 1.5, v)
    got = judge(traces_plan(a, b, "bfloat16", tiny))
    assert not got.ok and got.info["bounds"] == "noise twin"
    assert any(c["name"] == "traces: kv_writes" for c in got.failed), got.failed
