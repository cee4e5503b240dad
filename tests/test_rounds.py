import dataclasses
import functools
import json
import subprocess
import sys

import pytest

import oracle.loop_round as loop_round_mod
import oracle.session as session_mod
from oracle.cli.catalogue import default_cases
from oracle.judge.scenario import make_case
from oracle.judge.plans.cases import check_case
from oracle.phases import PHASES
from oracle.judge.comparison.compare import compare_runs
from oracle.sampling_params import SamplingParams as SP
from oracle.schedule import Call, Schedule, loop_waves
from oracle.session import Session, generate

MIXED = [SP(), SP(1.0, top_k=8, seed=1), SP(0.8, top_p=0.8, seed=2), SP(1.2, top_k=20, top_p=0.9, seed=3)]


def test_default_check_cases_pass(tiny):
    for case in default_cases(tiny.cfg.vocab_size):
        rep = check_case(tiny, case)
        assert rep.ok, (case.name, rep.first_failure())
        assert rep.kv_writes_compared > 0 and rep.rng_events_compared > 0


@pytest.mark.parametrize("policy", ["sequential", "fixed"])
@pytest.mark.parametrize("d,D", [(1, 2), (2, 4), (3, 5), (1, 6)])
def test_block_equals_loop_bitwise(tiny, d, D, policy):
    case = make_case(
        "x", [{0: 5, 1: 1, 2: 3, 3: 9}, {0: 2, 1: 4, 2: 1, 3: 3}], d, D, MIXED, seed=d * 10 + D, policy=policy
    )
    rep = check_case(tiny, case)
    assert rep.ok, rep.first_failure()


def run_json(*args):
    r = subprocess.run([sys.executable, "-m", "oracle", *args], capture_output=True, text=True)
    return r, (json.loads(r.stdout) if r.stdout.strip().startswith("{") else None)


def test_check_cli_default_and_one_round_counts():
    r, j = run_json("check", "--json")
    assert r.returncode == 0 and j["ok"]
    assert {"ok", "checks", "kv_writes_compared", "logits_compared", "rng_events_compared", "layers"} <= set(j)
    assert len({(c["d"], c["D"]) for c in j["cases"]}) >= 3
    for counts in ("5,3,1", "1", "9,2,2,7"):
        r, j = run_json("check", "--rounds", "1", "--counts", counts, "--json")
        T = sum(map(int, counts.split(",")))
        assert j["ok"] and j["kv_writes_compared"] == T * 4 * j["layers"]


@pytest.mark.parametrize(
    "args",
    [
        ["--top-p", "0"],
        ["--top-p", "1.01"],
        ["--temperature", "-0.5"],
        ["--top-k", "0"],
        ["-d", "4", "-D", "4"],
        ["-d", "0"],
        ["--policy", "random"],
        ["--counts", "3,0"],
        ["--rounds", "0"],
    ],
)
def test_check_bad_input(args):
    r, _ = run_json("check", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:")


def check_commit(tr, sess, before):
    """Emitted = accepted drafts + one token; tokens and KV frontiers after rollback."""
    for rid in tr.requests:
        a, drafts, em = tr.accepted[rid], tr.drafts[rid], tr.emitted[rid]
        assert em[:a] == drafts[:a] and len(em) == a + 1
        tokens = sess.requests[rid].tokens
        assert tokens == before[rid] + em
        assert sess.kv.frontiers(rid) == {len(tokens) - 1}  # start + a + 1


@pytest.mark.parametrize("greedy", [True, False])
def test_every_rejection_position_and_full_acceptance(tiny, greedy):
    K = 4
    seen = set()
    for mode in ("block", "loop"):
        s = Session(tiny, 2, 4, mode)
        for rid in range(8):
            s.add(rid, [rid + 1, 2 * rid + 3], SP() if greedy else SP(1.0, seed=rid))
        for _ in range(12):
            before = {rid: list(r.tokens) for rid, r in s.requests.items()}
            tr = s.step({rid: K + 1 for rid in s.requests})
            check_commit(tr, s, before)
            seen |= set(tr.accepted.values())
    assert seen == set(range(K + 1)), f"rejection positions reached: {sorted(seen)}"


def test_sampled_full_acceptance_by_replay(tiny):
    """Accept uniforms of 0 accept every draft (p > 0 without filters): a then equals K."""
    K = 3
    ref = Session(tiny, 1, 3, "loop")
    ref.add(0, [5, 6], SP(1.0, seed=7))
    tr = ref.step({0: K + 1})
    drafts_u = [e.value for e in tr.rng_events if e.purpose == "draft"]
    s = Session(tiny, 1, 3, "block")
    s.add(0, [5, 6], SP(1.0, seed=7), replay=drafts_u + [0.0] * K + [0.5])
    tr2 = s.step({0: K + 1})
    assert tr2.accepted[0] == K and [e.purpose for e in tr2.rng_events] == ["draft"] * K + ["accept"] * K + ["bonus"]
    assert s.kv.frontiers(0) == {len(s.requests[0].tokens) - 1}


def test_replay_reproduces_a_run(tiny):
    case = make_case("r", [{0: 5, 1: 3}] * 3, 2, 4, MIXED[1:3], seed=9)
    a = Session(tiny, 2, 4, "loop")
    for rid in (0, 1):
        a.add(rid, case.prompts[rid], case.params[rid])
    ta = [a.step(c) for c in case.rounds]
    b = Session(tiny, 2, 4, "block")
    for rid in (0, 1):
        us = [e.value for t in ta for e in t.rng_events if e.request == rid]
        b.add(rid, case.prompts[rid], case.params[rid], replay=us)
    tb = [b.step(c) for c in case.rounds]
    assert compare_runs(ta, tb, "exact").ok


def test_fixed_policy_layout(tiny):
    s = Session(tiny, 2, 4, "loop", policy="fixed")
    s.add(0, [1, 2, 3], SP(1.0, seed=1))
    s.add(1, [4], SP())
    for counts in ({0: 5, 1: 5}, {0: 1, 1: 3}, {0: 3, 1: 2}):
        tr = s.step(counts)
        ev = [e for e in tr.rng_events if e.request == 0]
        K = counts[0] - 1
        assert len(ev) == 2 * K + 1
        assert [e.purpose for e in ev[: 2 * K]] == ["draft"] * K + ["accept"] * K
        a = tr.accepted[0]
        assert ev[-1].purpose == ("bonus" if a == K else "residual") and ev[-1].offset == a
        assert [e.used for e in ev[K : 2 * K]] == [o <= a for o in range(K)]
        assert not [e for e in tr.rng_events if e.request == 1]  # greedy draws nothing


def test_generate_respects_max_tokens(tiny):
    out, traces = generate(tiny, [[1, 2], [3], [4, 5, 6]], 7, "loop", 4, 2, 4, MIXED[:3])
    assert all(len(t) == 7 for t in out.values())
    assert all(max(tr.token_counts) <= 5 for tr in traces)
    out_b, _ = generate(tiny, [[1, 2], [3], [4, 5, 6]], 7, "block", 4, 2, 4, MIXED[:3])
    assert out == out_b


def late_draft_head(counts, d, D):
    s = loop_waves(counts, d, D)
    calls = [Call(c.rows, s.calls[n - 1].draft_head if n else ()) for n, c in enumerate(s.calls)]
    return Schedule(s.mode, s.token_counts, d, D, tuple(calls), s.verify_head)


def test_broken_loop_round_draft_head_late(tiny, monkeypatch):
    monkeypatch.setattr(loop_round_mod, "loop_waves", late_draft_head)
    rep = check_case(tiny, default_cases(64)[0])
    assert not rep.ok
    f = rep.first_failure()
    assert f.name == "loop_round" and "offset 1, depth 0) runs before its draft token is drawn" in f.detail


def with_phases(monkeypatch, **replaced):
    """Sessions made from now on run loop rounds with these phases replaced (the seam)."""
    phases = dataclasses.replace(PHASES, **replaced)
    monkeypatch.setitem(session_mod.ROUNDS, "loop", functools.partial(loop_round_mod.loop_round, phases=phases))


def test_broken_loop_round_kv_wrong_plane(tiny, monkeypatch):
    real = PHASES.run_call

    def wrong_plane(st, rows):
        # the model writes depth j's KV into plane j+1 (mod D) for every row at depth 1
        orig = st.model.recurrent_call

        def call(rows2, h, kv, c):
            return orig([(r, p, (j + 1) % st.D if j == 1 else j) for r, p, j in rows2], h, kv, c)

        st.model.recurrent_call = call
        try:
            real(st, rows)
        finally:
            del st.model.recurrent_call

    with_phases(monkeypatch, run_call=wrong_plane)
    rep = check_case(tiny, default_cases(64)[0])
    assert not rep.ok
    f = rep.first_failure()
    assert "depth 2" in f.detail and ("KV write" in f.detail), f.detail


def test_broken_loop_round_uniforms_before_last_draft(tiny, monkeypatch):
    real = PHASES.draft_head

    def early(st, heads):
        for i, o in heads:
            req = st.requests[i]
            if o == st.counts[i] - 2 and not req.params.greedy:  # before the last draft
                req.rng.draw("accept", 0)
        real(st, heads)

    with_phases(monkeypatch, draft_head=early)
    rep = check_case(tiny, default_cases(64)[0])
    assert not rep.ok
    f = rep.first_failure()
    assert f.name == "rng_events" and "purpose='accept'" in f.detail and "round 0" in f.detail
    assert "reproduce: python -m oracle check" in f.detail


def test_failed_round_leaves_session_unchanged(tiny):
    """A round that fails midway restores KV frontiers, tokens and RNG streams."""
    s = Session(tiny, 2, 4, "loop")
    s.add(0, [1, 2, 3], SP(1.0, seed=3))
    s.add(1, [4, 5], SP())
    s.step({0: 3, 1: 2})
    before = {rid: (list(r.tokens), r.rng.snapshot()) for rid, r in s.requests.items()}
    real, calls = PHASES.draft_head, []

    def boom(st, heads):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("device fault")
        real(st, heads)

    s.round_fn = functools.partial(loop_round_mod.loop_round, phases=dataclasses.replace(PHASES, draft_head=boom))
    with pytest.raises(RuntimeError, match="device fault"):
        s.step({0: 5, 1: 4})
    s.round_fn = loop_round_mod.loop_round
    for rid, r in s.requests.items():
        assert r.tokens == before[rid][0]
        assert s.kv.frontiers(rid) == {len(r.tokens) - 1}
        assert r.rng.snapshot()[1:] == before[rid][1][1:]
    # the same round now runs as if the failure never happened
    ref = Session(tiny, 2, 4, "loop")
    ref.add(0, [1, 2, 3], SP(1.0, seed=3))
    ref.add(1, [4, 5], SP())
    ref.step({0: 3, 1: 2})
    assert compare_runs([ref.step({0: 5, 1: 4})], [s.step({0: 5, 1: 4})], "exact").ok


def test_unknown_request_errors(tiny):
    from oracle.errors import OracleError

    s = Session(tiny, 1, 2, "block")
    with pytest.raises(OracleError, match="not in the session"):
        s.remove(7)
    with pytest.raises(OracleError, match="unknown request"):
        s.step({7: 2})
