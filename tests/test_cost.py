"""Cost model (DESIGN.md section 10): c-table, predictions, deciding inequality, `python -m oracle cost`."""

import json

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from oracle.cost import compare_rounds, deciding_inequality, deciding_row_counts, head_row_counts, planes, predict
from oracle.ctable import DEFAULT_CTABLE, DEFAULT_HEAD_CTABLE, ctable_from_dict, load_ctable
from oracle.errors import OracleError
from oracle.schedule import block_calls, loop_waves

REPO = Path(__file__).resolve().parents[1]


def table(points: dict):
    return ctable_from_dict({"c_ms": {str(M): v for M, v in points.items()}}, "test table")


# The published analysis: c(1)=1.90, c(2..16)=2.66, c(20..32)=2.0, c(64)=2.14, c(80..192)=3.15 ms.
PUBLISHED = {
    1: 1.90,
    **{M: 2.66 for M in (2, 3, 4, 5, 8, 10, 16)},
    **{M: 2.0 for M in (20, 24, 32)},
    64: 2.14,
    **{M: 3.15 for M in (80, 96, 128, 160, 192)},
}


@pytest.mark.parametrize("C,ratio", [(1, 0.842), (4, 0.959), (16, 1.235), (32, 1.047)])
def test_published_analysis_ratios(C, ratio):
    r = compare_rounds([5] * C, 2, 4, table(PUBLISHED))
    assert r["ratio"] == pytest.approx(ratio, abs=0.002)
    assert r["faster"] == ("loop" if ratio > 1 else "block")
    assert r["block"]["calls"] == r["loop"]["calls"] == 12


def test_published_c1_by_hand():
    r = compare_rounds([5], 2, 4, table(PUBLISHED))
    assert r["block_ms"] == pytest.approx(10 * 1.90 + 2 * 2.66)  # 10 calls of C + 2 of 5C
    assert r["loop_ms"] == pytest.approx(4 * 1.90 + 8 * 2.66)  # 4 of C + 8 of 2C


# ---- c-table -----------------------------------------------------------------------------


def test_interpolation_is_piecewise_linear():
    t = table({1: 1.0, 3: 2.0, 7: 4.0, 8: 1.0})
    assert t.c(1) == 1.0 and t.c(3) == 2.0 and t.c(8) == 1.0  # exact hits, ends included
    assert t.c(2) == pytest.approx(1.5)
    assert t.c(4) == pytest.approx(2.5) and t.c(5) == pytest.approx(3.0)
    assert t(6) == pytest.approx(3.5)
    assert table({5: 2.0}).c(5) == 2.0  # a single point works at that M


@pytest.mark.parametrize("M", [0, 1, 9, 100])
def test_outside_range_names_the_row_count(M):
    t = table({2: 1.0, 8: 2.0})
    with pytest.raises(OracleError, match=rf"no measurement for M={M} rows \(it covers M=2\.\.8"):
        t.c(M)


@pytest.mark.parametrize(
    "data,msg",
    [
        ({}, "c_ms"),
        ({"c_ms": []}, "c_ms"),
        ({"c_ms": {}}, "empty"),
        ({"c_ms": {"1": 1.0, "2": 0}}, r"c\(2\) = 0 must be a positive"),
        ({"c_ms": {"1": -1.0}}, r"c\(1\) = -1.0 must be a positive"),
        ({"c_ms": {"1": "fast"}}, r"c\(1\) = 'fast' is not a number"),
        ({"c_ms": {"1": True}}, "not a number"),
        ({"c_ms": {"1": None}}, "not a number"),
        ({"c_ms": {"1": float("nan")}}, "positive finite"),
        ({"c_ms": {"1": float("inf")}}, "positive finite"),
        ({"c_ms": {"one": 1.0}}, "row count 'one' is not an integer"),
        ({"c_ms": {"1.5": 1.0}}, "not an integer"),
        ({"c_ms": {"0": 1.0}}, "must be >= 1"),
        ({"c_ms": {"1": 1.0, " 1": 2.0}}, "appears twice"),
        ([1, 2], "c_ms"),
    ],
)
def test_bad_tables_are_refused(data, msg):
    with pytest.raises(OracleError, match=msg):
        ctable_from_dict(data, "t.json")


# ---- rows sharing KV planes (c_ms_shared) -------------------------------------------------


def shared_table(points: dict, shared: dict):
    return ctable_from_dict(
        {
            "c_ms": {str(M): v for M, v in points.items()},
            "c_ms_shared": {str(r): {str(M): v for M, v in t.items()} for r, t in shared.items()},
        },
        "test table",
    )


def test_shared_planes_interpolate_in_rows_per_plane():
    t = shared_table({1: 1.0, 5: 2.0, 20: 4.0}, {5: {5: 1.5, 20: 3.0}})
    assert t.call(5, 5) == 2.0 and t.call(5, 1) == 1.5 and t.call(20, 4) == 3.0  # measured points
    assert t.call(20, 10) == pytest.approx(4.0 + (3.0 - 4.0) * (2 - 1) / (5 - 1))  # r = 2: between r = 1 and 5
    assert t.call(10, 2) == pytest.approx(1.5 + 1.5 * 5 / 15)  # r = 5, M between 5 and 20
    assert table({1: 1.0, 5: 2.0}).call(5, 1) == 2.0  # no shared data: c(M)
    with pytest.raises(OracleError, match=r"6 rows per KV plane \(12 rows on 2 planes; it covers 1\.\.5"):
        t.call(12, 2)


@pytest.mark.parametrize(
    "shared,msg",
    [
        ({"1": {"1": 1.0}}, "must be >= 2"),
        ({"x": {"2": 1.0}}, "'x' in \"c_ms_shared\" is not an integer"),
        ({"5": {"7": 1.0}}, r"c_ms_shared\[5\] has M=7, not a multiple"),
        ({"5": {"5": -1.0}}, r"c_ms_shared\[5\].*must be a positive"),
        ({"5": {}}, "empty"),
        ({"2": {"2": 1.0}, " 2": {"4": 1.0}}, "appears twice"),
        ([1], "must map rows per plane"),
    ],
)
def test_bad_shared_tables_are_refused(shared, msg):
    with pytest.raises(OracleError, match=msg):
        ctable_from_dict({"c_ms": {"1": 1.0}, "c_ms_shared": shared}, "t.json")


def test_block_verification_calls_are_priced_with_shared_planes():
    t = shared_table({1: 1.0, 2: 1.5, 4: 2.0, 8: 2.5, 5: 3.0, 20: 5.0}, {5: {5: 1.2, 20: 2.2}})
    for C in (1, 4):
        r = compare_rounds([5] * C, 2, 4, t)
        assert r["by_planes"]
        assert r["block_ms"] == pytest.approx(10 * t.c(C) + 2 * t.call(5 * C, C))  # 2 verification calls: 5 rows/plane
        assert r["loop_ms"] == pytest.approx(4 * t.c(C) + 8 * t.c(2 * C))  # waves: one row per plane
        plain = compare_rounds([5] * C, 2, 4, table(dict(zip(t.rows, t.ms))))
        assert r["loop_ms"] == plain["loop_ms"] and r["block_ms"] < plain["block_ms"]
    assert deciding_inequality([5], 2, 4, by_planes=True).text("C") == "c(5C@C)-c(C) > 4*[c(2C)-c(C)]"
    assert [planes(c) for c in block_calls([5] * 3, 2, 4).calls][-2:] == [3, 3]


@st.composite
def round_and_shared_table(draw):
    counts, d, D, t = draw(round_and_table())
    top = sum(counts)
    shared = {}
    for r in range(2, 7):  # rows per plane reach max(T) <= 6
        hi = r * -(-top // r)
        inner = draw(st.lists(st.integers(1, hi // r), max_size=3, unique=True))
        Ms = sorted({r, hi, *[r * k for k in inner]})
        shared[r] = dict(zip(Ms, draw(st.lists(st.floats(0.01, 10.0), min_size=len(Ms), max_size=len(Ms)))))
    return counts, d, D, shared_table(dict(zip(t.rows, t.ms)), shared)


@settings(max_examples=100, deadline=None)
@given(round_and_shared_table())
def test_deciding_inequality_by_planes_agrees_with_prediction(case):
    counts, d, D, t = case
    _, block, loop = check_deciding_against_prediction(counts, d, D, t, by_planes=True)
    assert sum(M * m for (M, _), m in block.items()) == sum(M * m for (M, _), m in loop.items())


@pytest.mark.parametrize("counts,d,D", [([5] * 4, 2, 4), ([3, 2, 1], 1, 3), ([4, 4, 2], 2, 5)])
def test_shared_tables_equal_to_c_ms_change_nothing(counts, d, D):
    c = {M: 1.0 + 0.1 * M for M in range(1, 41)}  # linear: interpolating c_r between multiples of r is exact
    same = shared_table(c, {r: {M: c[M] for M in range(r, 41, r)} for r in range(2, 6)})
    plain, r = compare_rounds(counts, d, D, table(c)), compare_rounds(counts, d, D, same)
    assert r["block_ms"] == pytest.approx(plain["block_ms"]) and r["loop_ms"] == pytest.approx(plain["loop_ms"])


def test_cli_with_shared_planes(tmp_path):
    path = tmp_path / "shared.json"
    path.write_text(
        json.dumps(
            {
                "c_ms": {"1": 1.0, "2": 1.2, "4": 1.3, "5": 1.4, "8": 1.6, "20": 2.5},
                "c_ms_shared": {"5": {"5": 1.1, "20": 1.5}},
            }
        )
    )
    r = cli("--ctable", str(path), "--k", "4", "--batch", "1,4")
    assert r.returncode == 0, r.stderr
    assert "loop beats block iff c(5C@C)-c(C) > 4*[c(2C)-c(C)]" in r.stdout
    assert "with rows sharing KV planes: r = 5 (M = 5..20)" in r.stdout and "no c_ms_shared" not in r.stdout
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"c_ms": {"1": 1.0, "2": 1.2, "4": 1.3, "5": 1.4, "8": 1.6, "20": 2.5}}))
    assert "note: this c-table has no c_ms_shared" in cli("--ctable", str(plain), "--k", "4", "--batch", "1").stdout
    assert "no c_ms_shared" not in cli("--ctable", str(plain), "--k", "0", "--batch", "1").stdout  # one row per plane
    j = cli("--ctable", str(path), "--k", "4", "--batch", "4", "--json")
    row = json.loads(j.stdout)["rows"][0]
    assert row["by_planes"] and row["block_extra_rows"] == {"4": 6, "20@4": 2} and row["loop_extra_rows"] == {"8": 8}
    assert row["block_ms"] == pytest.approx(10 * 1.3 + 2 * 1.5)


def test_shipped_whole_call_tables_reproduce_the_recorded_sweep():
    """oracle/data's whole-call H200 tables (c_ms_shared included) give the predicted ratios the
    sweep that measured them recorded (docs/results/sweep_planes_inflight2.json)."""
    sweep = json.loads((REPO / "docs/results/sweep_planes_inflight2.json").read_text())
    c = load_ctable(REPO / "oracle/data/h200_ouro1.4b_ctx256_c_ms.json")
    h = ctable_from_dict(json.loads((REPO / "oracle/data/h200_ouro1.4b_head_ms.json").read_text()), warn_drops=False)
    assert c.shared and c.shared[0][0] == 5 and c.meta["context_len"] == 256
    for row in sweep["rows"]:
        r = compare_rounds([sweep["K"] + 1] * row["batch"], sweep["d"], sweep["D"], c, h)
        assert r["ratio"] == pytest.approx(row["predicted_ratio"], rel=1e-12)
        assert r["block_ms"] == pytest.approx(row["predicted_block_ms"], rel=1e-12)


def test_load_ctable_files(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"description": "x", "device": "toy", "c_ms": {"1": 1.07, "4": 1.13}}))
    t = load_ctable(good)
    assert t.rows == (1, 4) and t.meta["device"] == "toy"
    assert t.c(2) == pytest.approx(1.09)
    bad = tmp_path / "bad.json"
    bad.write_text('{"c_ms": {"1": 1.0,}')
    with pytest.raises(OracleError, match="bad.json is not valid JSON"):
        load_ctable(bad)
    with pytest.raises(OracleError, match="missing.json does not exist"):
        load_ctable(tmp_path / "missing.json")
    with pytest.raises(OracleError, match="is a folder, not a regular file"):
        load_ctable(tmp_path)


def test_shipped_table_is_default_and_package_data():
    t = load_ctable()
    assert DEFAULT_CTABLE.parent.name == "data" and DEFAULT_CTABLE.parent.parent.name == "oracle"
    assert t.rows[0] == 1 and t.rows[-1] == 640 and t.meta["device"] == "NVIDIA H200"
    assert t.c(5 * 128) > 0  # K=4, C=128 fits
    assert 'oracle = ["data/*.json"]' in (REPO / "pyproject.toml").read_text()


# ---- predictions ---------------------------------------------------------------------------


def test_predict_sums_calls_and_heads():
    c = table({1: 1.0, 10: 10.0})  # c(M) = M ms
    h = table({1: 0.5, 10: 5.0})  # h(M) = M/2 ms
    s = block_calls((3, 2), 1, 3)  # rows: 2, 2, 1, 5, 5
    p = predict(s, c)
    assert p["recurrent_ms"] == pytest.approx(15.0) and p["head_ms"] == 0 and p["total_ms"] == p["recurrent_ms"]
    assert p["calls"] == 3 - 1 + 3 and p["rows"] == [2, 2, 1, 5, 5]
    p = predict(s, c, h)
    assert p["head_rows"] == [2, 1, 5]  # draft heads after offsets 0, 1; verify
    assert p["head_ms"] == pytest.approx(4.0) and p["total_ms"] == pytest.approx(19.0)
    assert p["head_calls"] == 3


def test_head_calls_are_the_same_in_both_rounds():
    for counts, d, D in [((5, 3, 1), 2, 4), ((2, 6, 1, 4), 1, 3), ((4, 4), 3, 5)]:
        assert sorted(head_row_counts(block_calls(counts, d, D))) == sorted(head_row_counts(loop_waves(counts, d, D)))


def test_deciding_k4_d2_D4():
    for C in (1, 3, 16):
        block, loop = deciding_row_counts([5] * C, 2, 4)
        assert block == {C: 6, 5 * C: 2} and loop == {2 * C: 8}
        ineq = deciding_inequality([5] * C, 2, 4)
        assert (ineq.base, ineq.block, ineq.loop, ineq.scale) == (C, {5 * C: 1}, {2 * C: 4}, 2)
    assert deciding_inequality([5], 2, 4).text("C") == "c(5C)-c(C) > 4*[c(2C)-c(C)]"
    assert deciding_inequality([5] * 4, 2, 4).text() == "c(20)-c(4) > 4*[c(8)-c(4)]"
    assert deciding_inequality([4], 1, 4).text("C") == "c(4C)-c(C) > [c(2C)-c(C)] + [c(3C)-c(C)]"


def test_k0_rounds_are_identical():
    r = compare_rounds([1] * 7, 2, 4, table(PUBLISHED))
    assert r["block_ms"] == r["loop_ms"] and r["ratio"] == 1.0 and r["faster"] == "tie"
    assert r["inequality"] is None and deciding_row_counts([1] * 7, 2, 4) == ({}, {})


def test_k1_rounds_differ_but_cost_the_same():
    assert block_calls([2] * 3, 2, 4).calls != loop_waves([2] * 3, 2, 4).calls
    assert deciding_row_counts([2] * 3, 2, 4) == ({}, {})
    assert compare_rounds([2] * 3, 2, 4, table(PUBLISHED))["ratio"] == 1.0


def uniform_condition(K, C, d, D, c):
    """DESIGN form: (D-d)*[c((K+1)C)-c(C)] - sum over loop waves of [c(n_w*C)-c(C)]."""
    waves = loop_waves([K + 1] * C, d, D).row_counts()
    return (D - d) * (c((K + 1) * C) - c(C)) - sum(c(n) - c(C) for n in waves)


def check_deciding_against_prediction(counts, d, D, t, by_planes=False):
    """The deciding inequality's sides (times its scale) equal block_ms - loop_ms and give the
    verdict; both sides count as many calls. Returns (block_ms - loop_ms, block, loop)."""
    r = compare_rounds(counts, d, D, t)
    diff = r["block_ms"] - r["loop_ms"]
    ineq = r["inequality"]
    side_diff = 0.0 if ineq is None else ineq.scale * (r["block_side_ms"] - r["loop_side_ms"])
    assert diff == pytest.approx(side_diff, abs=1e-9)
    if abs(diff) > 1e-9:
        assert (diff > 0) == (r["block_side_ms"] > r["loop_side_ms"]) == (r["faster"] == "loop")
    block, loop = deciding_row_counts(counts, d, D, by_planes)
    assert sum(block.values()) == sum(loop.values())  # same number of calls
    return diff, block, loop


@st.composite
def round_and_table(draw):
    D = draw(st.integers(2, 6))
    d = draw(st.integers(1, D - 1))
    counts = draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    top = sum(counts)
    inner = draw(st.lists(st.integers(2, max(2, top - 1)), max_size=6, unique=True))
    Ms = sorted({1, top, *[m for m in inner if m < top]})
    values = draw(st.lists(st.floats(0.01, 10.0), min_size=len(Ms), max_size=len(Ms)))
    return counts, d, D, table(dict(zip(Ms, values)))


@settings(max_examples=150, deadline=None)
@given(round_and_table())
def test_deciding_inequality_agrees_with_prediction(case):
    counts, d, D, t = case
    diff, block, loop = check_deciding_against_prediction(counts, d, D, t)
    assert sum(M * m for M, m in block.items()) == sum(M * m for M, m in loop.items())  # same rows
    if len(set(counts)) == 1:  # uniform: the DESIGN form
        assert diff == pytest.approx(uniform_condition(counts[0] - 1, len(counts), d, D, t.c), abs=1e-9)


def test_head_table_adds_the_same_cost_to_both():
    c, h = table(PUBLISHED), table({1: 0.3, 200: 0.9})
    plain, with_heads = compare_rounds([5] * 4, 2, 4, c), compare_rounds([5] * 4, 2, 4, c, h)
    extra = with_heads["block_ms"] - plain["block_ms"]
    assert extra == pytest.approx(with_heads["loop_ms"] - plain["loop_ms"])
    assert extra == pytest.approx(4 * h.c(4) + h.c(20))  # 4 draft head calls + verify
    assert abs(with_heads["ratio"] - 1) < abs(plain["ratio"] - 1)  # same add-on pulls the ratio to 1


def test_missing_row_count_in_compare():
    t = table({1: 1.0, 16: 1.2})
    with pytest.raises(OracleError, match="M=20 rows"):
        compare_rounds([5] * 4, 2, 4, t)


# ---- CLI -----------------------------------------------------------------------------------


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "oracle", "cost", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def published_file(tmp_path):
    path = tmp_path / "published.json"
    path.write_text(
        json.dumps({"description": "published analysis", "c_ms": {str(M): v for M, v in PUBLISHED.items()}})
    )
    return path


def test_cli_json_batch(published_file):
    r = cli("--ctable", str(published_file), "--k", "4", "--batch", "1,4,16,32", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"rows", "ctable", "head_ctable", "shipped", "gpu"}
    assert data["ctable"] == str(published_file) and not data["shipped"] and data["head_ctable"] is None
    assert [row["batch"] for row in data["rows"]] == [1, 4, 16, 32]
    for row, want in zip(data["rows"], (0.842, 0.959, 1.235, 1.047)):
        assert {"batch", "block_ms", "loop_ms", "ratio"} <= set(row)
        assert row["ratio"] == pytest.approx(row["block_ms"] / row["loop_ms"])
        assert row["ratio"] == pytest.approx(want, abs=0.002)
        assert (
            row["deciding"]["inequality"]
            == f"c({5 * row['batch']})-c({row['batch']}) > 4*[c({2 * row['batch']})-c({row['batch']})]"
        )


def test_cli_json_counts_default_table():
    r = cli("--counts", "5,3,1", "-d", "2", "-D", "4", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert len(rows) == 1 and rows[0]["batch"] is None and rows[0]["counts"] == [5, 3, 1]
    want = compare_rounds([5, 3, 1], 2, 4, load_ctable(), load_ctable(DEFAULT_HEAD_CTABLE))
    assert rows[0]["block_ms"] == pytest.approx(want["block_ms"]) and rows[0]["loop_ms"] == pytest.approx(
        want["loop_ms"]
    )


def test_cli_text_default(tmp_path):
    head = tmp_path / "head.json"
    head.write_text(json.dumps({"c_ms": {"1": 0.2, "1000": 0.8}}))
    r = cli("--k", "4", "--batch", "1,4", "--head-ctable", str(head))
    assert r.returncode == 0, r.stderr
    assert "loop beats block iff c(5C@C)-c(C) > 4*[c(2C)-c(C)]" in r.stdout
    assert "c(20@4)-c(4)" in r.stdout and f"head table: {head}," in r.stdout
    r = cli("--k", "0", "--batch", "3")
    assert r.returncode == 0 and "same row counts" in r.stdout


@pytest.mark.parametrize(
    "make_args",
    [
        lambda p: ["--ctable", str(p("small.json", {"c_ms": {"1": 1.0, "8": 1.1}})), "--batch", "4"],  # needs c(20)
        lambda p: ["--k", "-1"],
        lambda p: ["-d", "4", "-D", "4"],
        lambda p: ["-d", "5", "-D", "4"],
        lambda p: ["--ctable", str(p("bad.json", "{not json"))],
        lambda p: ["--ctable", str(p("neg.json", {"c_ms": {"1": -1.0, "8": 1.1}}))],
        lambda p: ["--ctable", str(p("zero.json", {"c_ms": {"1": 0, "8": 1.1}}))],
        lambda p: ["--ctable", str(p("str.json", {"c_ms": {"1": "x", "8": 1.1}}))],
        lambda p: ["--head-ctable", str(p("hsmall.json", {"c_ms": {"2": 1.0, "8": 1.1}}))],  # needs h(1)
        lambda p: ["--ctable", "/nonexistent/c.json"],
        lambda p: ["--batch", "0"],
        lambda p: ["--batch", "4,-2"],
        lambda p: ["--batch", "x"],
        lambda p: ["--batch", ","],
        lambda p: ["--k", "two"],
        lambda p: ["--counts", "3,0"],
        lambda p: ["--counts", "3", "--k", "2"],
        lambda p: ["--bogus"],
    ],
)
def test_cli_bad_input_is_one_line(make_args, tmp_path):
    def p(name, content):
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        return path

    r = cli(*make_args(p))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: ") and r.stdout == ""


def test_cli_default_is_the_shipped_whole_call_tables_and_names_block_at_64():
    """No --ctable: the H200 whole-call c-table and head table (the linear-layer table
    said loop at C = 64, where block measured 0.960)."""
    r = cli("--k", "4", "--batch", "1,4,16,64")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("c-table: oracle/data/h200_ouro1.4b_ctx256_c_ms.json (shipped default for --gpu h200")
    assert "head table: oracle/data/h200_ouro1.4b_head_ms.json (shipped default)" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.split()[:1] == ["64"])
    assert line.split()[3:5] == ["0.954", "block"]
    data = json.loads(cli("--k", "4", "--batch", "64", "--json").stdout)
    assert data["shipped"] and data["gpu"] == "h200" and data["ctable"].endswith("h200_ouro1.4b_ctx256_c_ms.json")
    assert data["head_ctable"].endswith("h200_ouro1.4b_head_ms.json") and data["rows"][0]["faster"] == "block"
    assert cli("--gpu", "h200", "--ctable", str(DEFAULT_CTABLE)).returncode == 2


def test_noisy_or_badly_non_monotone_ctable_is_refused_unless_forced(tmp_path):
    noisy = tmp_path / "noisy.json"
    noisy.write_text(json.dumps({"c_ms": {"1": 1.0, "2": 1.1, "5": 1.2}, "noisy": "(q3-q1)/median 0.4 at M=2"}))
    dip = tmp_path / "dip.json"
    dip.write_text(json.dumps({"c_ms": {"1": 1.0, "2": 144.0, "5": 1.2}}))
    for path in (noisy, dip):
        r = cli("--ctable", str(path), "--batch", "1")
        assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr
        assert "--force" in r.stderr
        assert cli("--ctable", str(path), "--batch", "1", "--force").returncode == 0


def test_cli_missing_row_count_is_named(tmp_path):
    small = tmp_path / "small.json"
    small.write_text(json.dumps({"c_ms": {"1": 1.0, "8": 1.1}}))
    r = cli("--ctable", str(small), "--batch", "1,4")
    assert r.returncode == 2 and "C=4" in r.stderr and "M=20" in r.stderr


def test_ragged_depth_rounds_are_predicted_from_their_own_plans():
    """Per-request depths: each round's prediction is the sum of c over its own calls (block 15,
    loop 12 calls here), and the inequality's sides give the exact difference."""
    table = ctable_from_dict({"c_ms": {"1": 1.0, "4": 1.3, "16": 2.5}})
    counts, d, D = (5, 3, 1, 4), [2, 1, 3, 1], [4, 3, 5, 4]
    r = compare_rounds(counts, d, D, table)
    assert r["block"]["calls"] == 15 and r["loop"]["calls"] == 12
    assert r["block_ms"] == pytest.approx(sum(table.c(n) for n in block_calls(counts, d, D).row_counts()))
    assert r["loop_ms"] == pytest.approx(sum(table.c(n) for n in loop_waves(counts, d, D).row_counts()))
    ineq = r["inequality"]
    assert ineq.base is None  # unequal call counts: plain sums
    assert r["block_ms"] - r["loop_ms"] == pytest.approx(ineq.scale * (r["block_side_ms"] - r["loop_side_ms"]))
    same = compare_rounds((5, 5), [2, 2], [4, 4], table)  # equal depths: today's answer
    assert same["block_ms"] == compare_rounds((5, 5), 2, 4, table)["block_ms"]
    assert deciding_inequality((5, 5), [2, 2], [4, 4]).text("") == deciding_inequality((5, 5), 2, 4).text("")


@settings(max_examples=100, deadline=None)
@given(round_and_table())
def test_only_block_verification_calls_share_planes(case):
    """A loop wave holds one row per (request, depth); a block call shares planes only past the
    draft depths, with P = the requests it covers."""
    counts, d, D, _ = case
    assert all(planes(c) == len(c.rows) for c in loop_waves(counts, d, D).calls)
    for c in block_calls(counts, d, D).calls:
        if planes(c) < len(c.rows):
            assert {j for _, _, j in c.rows} == {c.rows[0][2]} and c.rows[0][2] >= min([d] if isinstance(d, int) else d)
            assert planes(c) == len({i for i, _, _ in c.rows})


# ---- the FP32 judge's floor ----------------------------------------------------------------


def test_judge_round_floor_by_hand():
    from oracle.config import preset
    from oracle.roofline import GPU_PEAKS, judge_layer_params, judge_round_floor

    cfg = preset("ouro-1.4b")
    bw, rate = GPU_PEAKS["h200"]["hbm_bytes_per_s"], GPU_PEAKS["h200"]["fp32_flops_per_s"]
    P = judge_layer_params(cfg)
    assert P * 4 == pytest.approx(4.93e9, rel=1e-3)  # 4.9 GB of FP32 weights per call
    # one request, T=1 (K=0), d=1, D=2: two calls of one row at offset 0 (context + 1 keys), one head
    r = judge_round_floor(cfg, [1], 1000, 1, 2)
    kv_row = 24 * 2 * 16 * 128 * 4
    call = max((P * 4 + 1001 * kv_row + kv_row + 2 * 2048 * 4) / bw, (2 * P + 1001 * 4 * 16 * 128 * 24) / rate)
    head = max((2048 * 49152 * 4 + (2048 + 49152) * 4) / bw, 2 * 2048 * 49152 / rate)
    assert r["calls"] == 2 and r["head_calls"] == 1
    assert r["floor_s"] == pytest.approx(2 * call + head, rel=1e-12)
    # the shape: 12 calls, 320 rows; weights alone 12 * 4.9 GB at 4.8 TB/s
    for mode, lo, hi in (("block", 0.028, 0.033), ("loop", 0.037, 0.042)):
        f = judge_round_floor(cfg, 16, 1024, 2, 4, mode, K=4)
        assert f["calls"] == 12 and f["rows"] == 320
        assert f["weights_s"] == pytest.approx(12 * P * 4 / bw)
        assert lo < f["floor_s"] < hi  # block 30.7 ms, loop 39.9 ms
        assert (
            max(f["weights_s"], f["kv_s"], f["flops_s"])
            < f["floor_s"]
            <= f["weights_s"] + f["kv_s"] + f["flops_s"] + f["head_s"] + 1e-12
        )
    assert (
        judge_round_floor(cfg, [5] * 16, 1024, 2, 4, K=None)["floor_s"]
        == judge_round_floor(cfg, 16, 1024, 2, 4, K=4)["floor_s"]
    )
    with pytest.raises(OracleError, match="needs K"):
        judge_round_floor(cfg, 16, 1024, 2, 4)
    with pytest.raises(OracleError, match="no peak rates for GPU 'a100'"):
        judge_round_floor(cfg, [1], 10, 1, 2, gpu="a100")
