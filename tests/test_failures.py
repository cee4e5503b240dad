"""Failures are records (oracle/judge/comparison/report.py `Failure`), rendered to text by one helper
(`describe`): the record's fields, the two sides' labels (block and loop in a backend's
block-vs-loop comparison, backend and reference against the reference), repeated failures folded
into one line per class (oracle/cli/render.py `folded`), one JSON schema for `check` with and
without --backend, and the two faults the report pictures (meta_tests/faulty.py) located by the
records and error maps that the pictures draw."""

from __future__ import annotations

import json

import numpy as np
import pytest

from meta_tests import faulty
from oracle.cli.render import folded
from oracle.judge.comparison.compare import compare_runs
from oracle.judge.plans.plan import Executor, backend_plan, reference_plan
from oracle.judge.comparison.report import Failure, Report, describe
from oracle.judge.runner import REFERENCE, run_scenario
from oracle.judge.scenario import Case
from oracle.judge.plans.verdict import judge
from oracle.sampling_params import SamplingParams as SP

INLINE = Executor(where="inline")


def small_case(name="small") -> Case:
    """Two greedy requests, one round of 4 tokens each at d=2, D=4."""
    return Case(name, [[3, 5, 7], [11, 2]], [SP(), SP()], [{0: 4, 1: 4}], 2, 4)


def test_a_failure_is_a_record_and_its_text_is_made_from_it():
    text = "KV write of offset 1 (position 4) depth 2 layer 1 differs"
    f = Failure("kv_writes", text, "c", "loop", 0, 3, 1, 4, 2, 1, got=1.5, want=1.25, error=0.2, bound=1e-5)
    f.at, f.reproduce = "k[0, 3]", "python -m oracle check"
    line = describe(f)
    assert line == (
        "c [loop]: round 0 request 3: KV write of offset 1 (position 4) depth 2 layer 1 differs: relative error 0.2 "
        "> tolerance 1e-05; largest difference at k[0, 3]: backend 1.5 vs reference 1.25 (reproduce: python -m "
        "oracle check)"
    )
    js = json.loads(json.dumps(f.to_json()))  # JSON as it is printed
    assert (js["cls"], js["depth"], js["layer"], js["position"], js["offset"]) == ("kv_writes", 2, 1, 4, 1)
    assert Failure.from_json(js) == f and describe(Failure.from_json(js)) == line
    assert "operation" in js and js["operation"] is None  # the localizer's to fill
    f.got = np.float32(np.inf)
    assert Failure.from_json(json.loads(json.dumps(f.to_json()))).got == "inf"  # JSON has no inf


def test_a_report_keeps_the_first_failure_per_check_and_a_record_of_each():
    rep = Report(reproduce="R")
    for o in range(3):
        rep.fail(Failure("tokens", f"draft token of offset {o}", round=0, request=o, got=1, want=2))
    rep.finish()
    bad = rep.first_failure()
    assert bad.failure.request == 0 and bad.detail == describe(bad.failure) and bad.detail.endswith("(reproduce: R)")
    assert rep.failures == 3 and [r.request for r in rep.records] == [0, 1, 2]


def test_block_vs_loop_names_its_sides_block_and_loop(tiny):
    """A loop run whose one logit is off: against the block run, the values are "loop" and "block"
    (the backend's own runs), never "backend" and "reference"."""
    case = small_case()
    block = run_scenario(REFERENCE, tiny, case, "block").traces
    loop = run_scenario(REFERENCE, tiny, case, "loop").traces
    key = sorted(loop[0].verify_logits)[1]
    loop[0].verify_logits[key] = np.array(loop[0].verify_logits[key], copy=True)
    loop[0].verify_logits[key][5] += 0.5
    rep = compare_runs(block, loop, "exact", case="c", mode="block vs loop", sides=("loop", "block"))
    f = next(c for c in rep.checks if c.name == "verify_logits").failure
    assert (f.request, f.offset, f.sides, f.at) == (key[0], key[1], ("loop", "block"), "index 5")
    assert f.got - f.want == pytest.approx(0.5, abs=1e-5)
    assert f"largest difference at index 5: loop {f.got:.6g} vs block {f.want:.6g}" in describe(f)
    assert "backend" not in describe(f) and "reference" not in describe(f)


def test_repeated_failures_of_one_class_fold_into_one_line():
    checks = []
    for case in ("a", "b", "c"):
        for mode in ("loop", "block vs loop"):
            f = Failure("kv_writes", "KV write of offset 1 (position 4) depth 0 layer 0 is missing", case, mode, 0, 0,
                        reproduce=f"python -m oracle check --case {case}")  # fmt: skip
            checks.append({"name": f"{case} [{mode}]: kv_writes", "ok": False, "detail": describe(f),
                           "failure": f.to_json()})  # fmt: skip
    checks.append({"name": "nothing compared", "ok": False, "detail": "nothing compared: x", "failure": None})
    lines = folded(checks)
    assert lines == [
        "  FAIL [kv_writes] a [loop]: round 0 request 0: KV write of offset 1 (position 4) depth 0 layer 0 is missing "
        "[+5 more alike: 3 cases, loop, block vs loop] (reproduce: python -m oracle check --case a)",
        "  FAIL [nothing compared] nothing compared: x",
    ]


def test_check_json_has_one_schema_with_and_without_a_backend(tiny):
    case = small_case()
    ref = judge(reference_plan(tiny, [case]), INLINE).to_json()
    bk = judge(backend_plan(faulty.make_no_fault(), tiny, [case], probe="off"), INLINE).to_json()
    assert ref.keys() == bk.keys(), ref.keys() ^ bk.keys()
    assert (ref["threads"], ref["threads_from"], ref["timeout_s"]) == (None, None, None)
    assert all({"name", "ok", "detail", "failure"} <= c.keys() for c in ref["checks"] + bk["checks"])


def test_a_loop_only_token_bug_fails_in_the_loop_comparisons_only(tiny):
    """meta_tests.faulty:make_loop_only_wrong_token (docs/report_loop_token.png): token records of the
    loop run against the reference and against the block run, none of the block run."""
    v = judge(backend_plan(faulty.make_loop_only_wrong_token(), tiny, [small_case()], probe="off"), INLINE)
    tokens = [r for m in v.error_maps() for r in m["tokens"]]
    assert tokens and {r["mode"] for r in tokens} == {"loop", "block vs loop"}
    vs = next(r for r in tokens if r["mode"] == "block vs loop")
    assert vs["sides"] == ["loop", "block"] and vs["got"] != vs["want"]


def test_a_kv_value_bug_is_largest_at_its_depth_and_layer(tiny):
    """meta_tests.faulty:make_kv_scaled_one_layer (docs/report_kv.png), a float32 plug-in: its first
    failure and the error map's largest error over tolerance name depth 1, layer 1."""
    v = judge(backend_plan(faulty.make_kv_scaled_one_layer(), tiny, [small_case()], probe="off"), INLINE)
    first = next(c for c in v.failed if c["name"].endswith("kv_writes"))["failure"]
    assert (first["depth"], first["layer"], first["sides"]) == (1, 1, ["backend", "reference"])
    assert first["error"] > first["bound"] > 0
    m = next(m for m in v.error_maps() if m["mode"] == "loop")
    worst = max(m["kv"], key=lambda cell: cell[3] / cell[4])
    assert worst[:2] == [1, 1]
