"""Schedule planner (DESIGN.md section 4), its invariant checker and `python -m oracle schedule`."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.errors import OracleError
from oracle.schedule import Call, Schedule, block_calls, check_schedule, loop_waves, plan

REPO = Path(__file__).resolve().parents[1]


# ---- hand-checked cases -------------------------------------------------------------------


def test_uniform_k4_d2_D4_both_have_12_calls():
    block, loop = block_calls((5, 5), 2, 4), loop_waves((5, 5), 2, 4)
    assert block.row_counts() == [2] * 10 + [10, 10]
    assert loop.row_counts() == [2, 2] + [4] * 8 + [2, 2]
    assert sorted(loop.row_counts()) == [2] * 4 + [4] * 8
    assert sum(block.row_counts()) == sum(loop.row_counts()) == 2 * 5 * 4
    # draft head after depth d-1 of offsets 0..3, over both requests, in the same calls
    assert block.draft_head_counts() == loop.draft_head_counts() == [0, 2] * 4 + [0] * 4
    for s in (block, loop):
        check_schedule(s)
        assert s.verify_head == tuple((i, o) for i in range(2) for o in range(5))


def test_block_rows_by_hand_counts_2_d1_D2():
    s = block_calls((2,), 1, 2)
    assert [c.rows for c in s.calls] == [((0, 0, 0),), ((0, 1, 0),), ((0, 0, 1), (0, 1, 1))]
    assert [c.draft_head for c in s.calls] == [((0, 0),), (), ()]
    assert s.verify_head == ((0, 0), (0, 1))


def test_loop_waves_by_hand_counts_2_d1_D2():
    # wave w holds (o, j) with j = w - o*d: w0 (0,0); w1 (0,1) (1,0); w2 (1,1)
    s = loop_waves((2,), 1, 2)
    assert [c.rows for c in s.calls] == [((0, 0, 0),), ((0, 0, 1), (0, 1, 0)), ((0, 1, 1),)]
    assert [c.draft_head for c in s.calls] == [((0, 0),), (), ()]


def test_loop_waves_by_hand_ragged_counts_3_1_d2_D3():
    s = loop_waves((3, 1), 2, 3)
    # 7 waves = (3-1)*2 + 3; request 1 (T=1) only in waves 0..2, never drafts
    assert [c.rows for c in s.calls] == [
        ((0, 0, 0), (1, 0, 0)),
        ((0, 0, 1), (1, 0, 1)),
        ((0, 0, 2), (0, 1, 0), (1, 0, 2)),
        ((0, 1, 1),),
        ((0, 1, 2), (0, 2, 0)),
        ((0, 2, 1),),
        ((0, 2, 2),),
    ]
    assert [c.draft_head for c in s.calls] == [(), ((0, 0),), (), ((0, 1),), (), (), ()]
    check_schedule(s)


# ---- ragged cases: check_schedule passes and the shared totals hold -----------------------


def ragged_cases():
    for D in range(2, 7):
        for d in range(1, D):
            for counts in [(1,), (2,), (1, 1, 1), (5, 3, 1), (1, 4), (3, 3), (2, 6, 1, 4)]:
                yield counts, d, D


@pytest.mark.parametrize("counts,d,D", list(ragged_cases()))
def test_ragged_schedules_pass_check_and_agree_on_totals(counts, d, D):
    block, loop = block_calls(counts, d, D), loop_waves(counts, d, D)
    check_schedule(block)
    check_schedule(loop)
    assert len(block.calls) == len(loop.calls) == (max(counts) - 1) * d + D
    assert sum(block.row_counts()) == sum(loop.row_counts()) == sum(counts) * D
    assert sum(block.draft_head_counts()) == sum(loop.draft_head_counts()) == sum(t - 1 for t in counts)
    assert plan("block", counts, d, D) == block and plan("loop", counts, d, D) == loop


def test_k0_block_and_loop_are_the_same_calls():
    for d, D in [(1, 2), (2, 4), (3, 6)]:
        assert block_calls((1, 1, 1), d, D).calls == loop_waves((1, 1, 1), d, D).calls


# ---- check_schedule fires on broken schedules --------------------------------------------


def replace_call(s: Schedule, k: int, **changes) -> Schedule:
    calls = list(s.calls)
    calls[k] = dataclasses.replace(calls[k], **changes)
    return dataclasses.replace(s, calls=tuple(calls))


def test_check_catches_duplicated_row():
    s = loop_waves((3, 2), 2, 4)
    broken = replace_call(s, 3, rows=s.calls[3].rows + ((0, 0, 0),))
    with pytest.raises(OracleError, match=r"row \(0, 0, 0\) appears in call 0 and call 3"):
        check_schedule(broken)


def test_check_catches_missing_row():
    s = block_calls((3, 2), 2, 4)
    last = s.calls[-1]
    broken = replace_call(s, len(s.calls) - 1, rows=tuple(r for r in last.rows if r != (1, 1, 3)))
    with pytest.raises(OracleError, match=r"row \(1, 1, 3\) is missing"):
        check_schedule(broken)


def test_check_catches_draft_head_a_wave_late():
    s = loop_waves((3,), 2, 4)  # head of offset 0 runs in wave 1 (after depth 1)
    assert s.calls[1].draft_head == ((0, 0),)
    broken = replace_call(replace_call(s, 1, draft_head=()), 2, draft_head=((0, 0),))
    with pytest.raises(OracleError, match=r"call 2: draft head on \(0, 0\) is not a draft-ready row"):
        check_schedule(broken)


def test_check_catches_draft_head_missing():
    s = block_calls((3,), 2, 4)
    broken = replace_call(s, 1, draft_head=())
    with pytest.raises(OracleError, match=r"draft head never runs on \(request 0, offset 0\)"):
        check_schedule(broken)


def test_check_catches_next_offset_before_its_draft_token():
    # loop waves with d=2 but the next offset started one wave early (offset 1 depth 0 in wave 1)
    s = loop_waves((2,), 2, 3)
    calls = [
        Call(((0, 0, 0),)),
        Call(((0, 0, 1), (0, 1, 0)), ((0, 0),)),
        Call(((0, 0, 2), (0, 1, 1))),
        Call(((0, 1, 2),)),
    ]
    broken = dataclasses.replace(s, calls=tuple(calls))
    with pytest.raises(OracleError, match=r"row \(0, 1, 0\) runs in call 1, before its draft token"):
        check_schedule(broken)


def test_check_catches_depth_order_violation():
    s = block_calls((2,), 1, 3)  # calls: (0,0,0) | (0,1,0) | depth 1 | depth 2
    calls = list(s.calls)
    calls[2], calls[3] = calls[3], calls[2]
    broken = dataclasses.replace(s, calls=tuple(calls))
    with pytest.raises(OracleError, match=r"row \(0, 0, 2\) runs in call 2, not after depth 1"):
        check_schedule(broken)


def test_check_catches_offset_order_violation():
    s = block_calls((2,), 1, 3)
    calls = list(s.calls)
    # depth 1 of offset 1 before depth 1 of offset 0 (split the verify call, wrong order)
    calls[2] = Call(((0, 1, 1),))
    calls.insert(3, Call(((0, 0, 1),)))
    calls[-1] = Call(((0, 0, 2), (0, 1, 2)))
    broken = dataclasses.replace(s, calls=tuple(calls))
    with pytest.raises(OracleError, match=r"row \(0, 1, 1\) runs in call 2, before offset 0"):
        check_schedule(broken)


def test_check_catches_row_outside_round_and_empty_call_and_call_count():
    s = block_calls((2,), 1, 2)
    with pytest.raises(OracleError, match=r"row \(0, 2, 0\) is outside the round"):
        check_schedule(replace_call(s, 1, rows=((0, 1, 0), (0, 2, 0))))
    with pytest.raises(OracleError, match="has no rows"):
        check_schedule(dataclasses.replace(s, calls=s.calls + (Call(()),)))
    split = s.calls[:2] + (Call(((0, 0, 1),)), Call(((0, 1, 1),)))
    with pytest.raises(OracleError, match=r"4 recurrent calls, expected \(max\(T\)-1\)\*d\+D = 3"):
        check_schedule(dataclasses.replace(s, calls=split))


def test_check_catches_wrong_verify_head():
    s = loop_waves((2, 1), 1, 2)
    with pytest.raises(OracleError, match="verification head rows"):
        check_schedule(dataclasses.replace(s, verify_head=s.verify_head[:-1]))


@pytest.mark.parametrize(
    "counts,d,D,msg",
    [
        ((), 2, 4, "empty"),
        ((3, 0), 2, 4, "request 1 is 0"),
        ((3, -1), 2, 4, "request 1 is -1"),
        ((3, 2.5), 2, 4, "not an integer"),
        ((3,), 4, 4, "must be < target loops"),
        ((3,), 0, 4, "d=0"),
        ((3,), 5, 4, "must be < target loops"),
    ],
)
def test_bad_inputs_raise_oracle_error(counts, d, D, msg):
    for mode in ("block", "loop"):
        with pytest.raises(OracleError, match=msg):
            plan(mode, counts, d, D)


# ---- CLI -----------------------------------------------------------------------------------


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "oracle", "schedule", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_text_has_grid_and_totals():
    r = cli("--counts", "5,3,1", "--draft-loops", "2", "--target-loops", "4")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "block round" in out and "loop round" in out
    assert (
        out.count("totals: 12 recurrent calls, 36 rows, 6 draft head rows in 4 head calls, 9 verification head rows")
        == 2
    )
    assert "request 2 (T=1)" in out and "1*" in out
    lines = out.splitlines()
    rows_lines = [ln.split()[1:] for ln in lines if ln.startswith("rows ")]
    assert rows_lines == [
        [str(n) for n in block_calls((5, 3, 1), 2, 4).row_counts()],
        [str(n) for n in loop_waves((5, 3, 1), 2, 4).row_counts()],
    ]


def test_cli_json_structure():
    r = cli("--counts", "5,3,1", "-d", "2", "-D", "4", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"block", "loop"}
    for mode, fn in (("block", block_calls), ("loop", loop_waves)):
        assert set(data[mode]) == {"calls", "verify_head"}
        assert data[mode] == fn((5, 3, 1), 2, 4).to_json()
        for call in data[mode]["calls"]:
            assert set(call) == {"rows", "draft_head"}
            assert all(len(r) == 3 and all(isinstance(x, int) for x in r) for r in call["rows"])
            assert all(len(h) == 2 for h in call["draft_head"])
        assert len(data[mode]["calls"]) == 12 and len(data[mode]["verify_head"]) == 9


@pytest.mark.parametrize(
    "args",
    [
        ["--counts", "5,3", "-d", "4", "-D", "4"],  # d >= D
        ["--counts", "5,3", "-d", "0"],  # d < 1
        ["--counts", ""],  # empty
        ["--counts", ","],  # empty
        ["--counts=-1,2"],  # negative
        ["--counts", "-1,2"],  # argparse sees an option
        ["--counts", "5,x"],  # not integers
        ["--counts", "5,2.5"],
        ["--counts", "3", "-d", "x"],
        [],  # --counts missing
        ["--counts", "3", "--bogus"],  # unknown option
    ],
)
def test_cli_bad_input_is_one_line(args):
    r = cli(*args)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: ")
    assert r.stdout == ""


# ---- ragged depths ------------------------------------------------------

RAGGED = ((5, 3, 1, 4), [2, 1, 3, 1], [4, 3, 5, 4])


def test_ragged_depths_hand_checked():
    """counts 5,3,1,4 with depths 2:4,1:3,3:5,1:4: block = per offset max(d_i) calls over the
    rows with j < d_i (11), then depths 1..4 over the rows d_i <= j < D_i (4); loop = waves
    o*d_i + j, max_i((T_i-1)*d_i + D_i) = 12."""
    block, loop = block_calls(*RAGGED), loop_waves(*RAGGED)
    assert block.row_counts() == [4, 2, 1, 3, 1, 3, 1, 2, 1, 1, 1, 7, 12, 10, 1]
    assert block.draft_head_counts() == [2, 1, 0, 2, 1, 1, 1, 0, 1] + [0] * 6
    assert block.calls[0].draft_head == ((1, 0), (3, 0))  # d_i = 1: head after depth 0
    assert block.calls[1].rows == ((0, 0, 1), (2, 0, 1)) and block.calls[1].draft_head == ((0, 0),)
    assert block.calls[14].rows == ((2, 0, 4),)  # only request 2 reaches depth 4
    assert loop.row_counts() == [4, 6, 9, 9, 7, 4, 3, 2, 2, 2, 1, 1]
    assert loop.calls[1].draft_head == ((0, 0), (1, 1), (3, 1))  # wave o*d_i + d_i - 1
    for s in (block, loop):
        check_schedule(s)
        assert s.d is None and s.D is None and s.depths == ((2, 4), (1, 3), (3, 5), (1, 4))
        assert sum(s.row_counts()) == 5 * 4 + 3 * 3 + 1 * 5 + 4 * 4


def test_ragged_depths_skip_empty_block_calls():
    # depths 1:2 and 3:4 leave no request at depth 2 of the verify phase: that call is skipped
    s = block_calls((2, 1), [1, 3], [2, 4])
    assert [sorted({j for _, _, j in c.rows}) for c in s.calls] == [[0], [1], [2], [0], [1], [3]]
    check_schedule(s)


def test_equal_per_request_depths_are_todays_schedules():
    for fn in (block_calls, loop_waves):
        assert fn((5, 3, 1), [2, 2, 2], [4, 4, 4]) == fn((5, 3, 1), 2, 4)


@pytest.mark.parametrize(
    "d,D,msg",
    [
        ([1, 2], [3], "2 values for 1"),
        ([2, 1], [2, 3], "d=2 of request 0 must be < "),
        ([0, 1], [2, 2], "request 0"),
        (2, [4, 5, 2], "3 values for 2"),
    ],
)
def test_ragged_depths_bad_input(d, D, msg):
    counts = (3, 2) if msg != "2 values for 1" else (3,)
    with pytest.raises(OracleError, match=msg):
        block_calls(counts, d, D)


def test_cli_json_ragged_depths():
    r = cli("--counts", "5,3,1,4", "--depths", "2:4,1:3,3:5,1:4", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["block"] == block_calls(*RAGGED).to_json() and data["loop"] == loop_waves(*RAGGED).to_json()
    assert data["loop"]["depths"] == [[2, 4], [1, 3], [3, 5], [1, 4]]
    assert cli("--counts", "5,3", "--depths", "2:4").returncode == 2
    assert cli("--counts", "5,3", "--depths", "2:4,1").returncode == 2
