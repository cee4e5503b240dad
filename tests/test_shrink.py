"""A failing check shrinks itself (issue 44; oracle/judge/shrinker/shrink.py, oracle/cli/shrinking.py,
oracle/cli/case_json.py, oracle/cli/trace_cut.py).

Per failure class: `check --backend FAULTY --case NAME` shrinks its failure to a smaller case that fails
in the same class, printed as one `--case-json` line; that line fails the same way on the faulty backend
and passes on a correct one. The search's bookkeeping on made-up verdicts (no backend), the --case-json
codec and its refusals, the options' rules, and `trace cut`. The drift probe's shrinking (fewer probe
requests) with a real kernel fault is meta_tests/test_shrink_probe.py."""

from __future__ import annotations

import json
import shlex

import pytest

from oracle.checkpoint import build_model
from oracle.cli import main
from oracle.cli import case_json
from oracle.cli.catalogue import default_cases
from oracle.judge.shrinker import moves, shrink, target
from oracle.judge.comparison.report import Failure, describe
from oracle.judge.scenario import Case
from oracle.sampling_params import SamplingParams

TINY = ["--preset", "tiny", "--seed", "0"]


@pytest.fixture(scope="module")
def model():
    return build_model("tiny", 0)


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def words_of(line: str) -> list[str]:
    """A reproduce line's arguments after `python -m oracle` (an environment prefix dropped)."""
    w = shlex.split(line)
    return w[w.index("oracle") + 1 :]


def with_backend(words: list[str], spec: str) -> list[str]:
    i = words.index("--backend")
    return words[: i + 1] + [spec] + words[i + 2 :]


def first_class(v: dict) -> str:
    return next(c["name"] for c in v["checks"] if not c["ok"]).rsplit(": ", 1)[-1]


# ---- per failure class: the shrunk line fails alike on the faulty backend, passes on a correct one ----

RAGGED = "ragged (5,3,1) d=2 D=4"
CLASSES = [
    # (faulty backend, built-in case, failure class, shrinks to one request and one round)
    ("meta_tests.faulty:make_kv_wrong_plane", RAGGED, "kv_writes", True),
    ("meta_tests.faulty:make_logits_off_at_one_offset", RAGGED, "verify_logits", True),
    ("meta_tests.faulty:make_draft_head_late", RAGGED, "schedule", True),
    ("meta_tests.faulty:make_mask_verify_only", "banned and allowed token ids, 2 rounds", "tokens", True),
    ("meta_tests.faulty:make_accept_before_last_draft", RAGGED, "rng_events", True),
    ("meta_tests.plugins:make_zero_q_draft", RAGGED, "malformed", True),
    # the frontier is one too long after a rollback: the second round finds it
    ("meta_tests.faulty:make_rollback_off_by_one", "uniform (5,5,5,5) d=2 D=4, 6 rounds", "backend", False),
]


@pytest.mark.parametrize("spec,case,cls,one", CLASSES, ids=[c[2] for c in CLASSES])
def test_a_failure_shrinks_to_a_line_that_fails_alike_and_passes_on_a_correct_backend(capsys, spec, case, cls, one):
    quick = ["--no-drift"] if "plugins" in spec else []  # a bfloat16 plug-in: the values, not the probe
    rc, out, _ = run(capsys, "check", *TINY, "--case", case, "--backend", spec, "--json", "--quiet", *quick)
    assert rc == 1
    v = json.loads(out)
    s = v["shrunk"]
    assert s["class"] == cls == first_class(v), s
    assert s["shrunk"] is not None and not s["partial"], s
    assert s["candidates"] >= 1 and s["seconds"] >= 0
    got = s["shrunk"]["case"]
    assert len(got["prompts"]) <= 3 and len(got["rounds"]) <= 2
    if one:
        assert (len(got["prompts"]), len(got["rounds"])) == (1, 1), s["shrunk"]["description"]
    line = words_of(s["shrunk"]["reproduce"])
    assert line[:5] == ["check", *TINY] and "--case-json" in line and line[-2:] == ["--backend", spec]
    assert json.loads(line[line.index("--case-json") + 1]) == got
    rc, out, _ = run(capsys, *line, "--json", "--quiet", "--no-shrink", *quick)  # the line alone: the same class
    assert rc == 1 and first_class(json.loads(out)) == cls
    fine = "meta_tests.plugins:make_reference_as_bf16" if "plugins" in spec else "meta_tests.faulty:make_no_fault"
    rc, out, _ = run(capsys, *with_backend(line, fine), "--json", "--quiet", *quick)
    assert rc == 0, out


def test_a_batch_fault_keeps_the_requests_it_needs(capsys):
    """make_skips_one_kv_write drops a write of a batch's last request only in batches of two or more:
    two requests remain, each of one token and a one-token prompt."""
    spec = "meta_tests.faulty:make_skips_one_kv_write"
    rc, out, _ = run(capsys, "check", *TINY, "--case", RAGGED, "--backend", spec, "--json", "--quiet")
    s = json.loads(out)["shrunk"]
    assert rc == 1 and s["class"] == "kv_writes"
    got = s["shrunk"]["case"]
    assert len(got["prompts"]) == 2 and got["rounds"] == [{"0": 1, "1": 1}] and got["prompts"][0][1:] == []


def test_text_output_names_both_cases_the_runs_and_seconds(capsys):
    spec = "meta_tests.faulty:make_kv_wrong_plane"
    rc, out, _ = run(capsys, "check", *TINY, "--case", RAGGED, "--backend", spec, "--quiet")
    assert rc == 1
    lines = out.splitlines()
    head = next(i for i, s in enumerate(lines) if s.startswith("  shrunk [kv_writes]: "))
    assert "candidate run" in lines[head] and lines[head].endswith(" s")
    assert lines[head + 1].startswith("    original: 3 requests, 1 round")
    assert lines[head + 3].startswith("      reproduce: ") and "--case 'ragged (5,3,1) d=2 D=4'" in lines[head + 3]
    assert lines[head + 4].startswith("    shrunk:   1 request, 1 round")
    assert lines[head + 5].startswith("      [kv_writes] ")
    assert "--case-json '{" in lines[head + 6]
    assert lines[-1].startswith("  FAILED in ")


def test_no_shrink_and_a_passing_check_have_no_shrunk_case(capsys):
    spec = "meta_tests.faulty:make_kv_wrong_plane"
    rc, out, _ = run(capsys, "check", *TINY, "--case", RAGGED, "--backend", spec, "--json", "--quiet", "--no-shrink")
    assert rc == 1 and "shrunk" not in json.loads(out)
    rc, out, _ = run(capsys, "check", *TINY, "--case", RAGGED, "--backend", "meta_tests.faulty:make_no_fault", "--json")
    assert rc == 0 and "shrunk" not in json.loads(out)


def test_a_spent_budget_gives_the_original_marked_partial(capsys):
    spec = "meta_tests.faulty:make_kv_wrong_plane"
    argv = ["check", *TINY, "--case", RAGGED, "--backend", spec, "--json", "--quiet", "--shrink-budget", "1e-9"]
    rc, out, _ = run(capsys, *argv)
    s = json.loads(out)["shrunk"]
    assert rc == 1 and s["partial"] and s["shrunk"] is None and s["candidates"] == 0
    assert s["original"]["reproduce"].endswith(f"--backend {spec}")


# ---- the search's bookkeeping, on a made-up test (no backend, no verdict) ----


def big_case() -> Case:
    params = [SamplingParams(), SamplingParams(1.0, top_k=5, seed=1), SamplingParams(repetition_penalty=2.0, seed=2)]
    prompts = [[1, 2, 3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13]]
    rounds = [{0: 5, 1: 3, 2: 4}, {0: 4, 1: 2, 2: 5}, {1: 2, 2: 3}]
    return Case("big", prompts, params, rounds, 2, 4, "fixed", "", [(2, 4), (1, 3), (2, 5)])


def target_for(case) -> target.Target:
    return target.Target("big [loop]: tokens", "tokens", "round 1 request 2: ...", case, "", (1, 2))


def test_the_search_makes_each_part_as_small_as_the_failure_allows():
    """Fails iff a request with a repetition penalty has a prompt holding token 12 and a round of
    T >= 3: one request, one round, T = 3, prompt [10, 11, 12], the smallest depths, greedy, sequential."""

    def test(case):
        ok = any(
            p.repetition_penalty != 1.0 and 12 in case.prompts[i] and any(r.get(i, 0) >= 3 for r in case.rounds)
            for i, p in enumerate(case.params)
        )
        return {"name": "x [loop]: tokens", "ok": False, "detail": "round 0 request 0: tokens"} if ok else None

    res = shrink.shrink_case(target_for(big_case()), test, budget=60)
    c = res.case
    assert not res.partial and res.smaller
    assert (c.prompts, c.rounds, c.depths, (c.d, c.D), c.policy) == (
        [[10, 11, 12]],
        [{0: 3}],
        None,
        (1, 2),
        "sequential",
    )
    assert c.params == [SamplingParams(repetition_penalty=2.0)]
    assert res.moves[:2] == ["requests", "rounds"] and res.candidates > 5
    assert moves.size(c) < moves.size(big_case())


def test_the_search_keeps_what_the_failure_needs_and_stops_at_its_budget():
    sampled = lambda case: any(not p.greedy for p in case.params)  # noqa: E731
    fail = {"name": "x [block]: rng_events", "ok": False, "detail": ""}
    res = shrink.shrink_case(target_for(big_case()), lambda c: fail if sampled(c) else None, budget=60)
    assert [p.temperature for p in res.case.params] == [1.0] and res.case.params[0].top_k is None
    assert res.case.policy == "sequential"  # the policy is one the failure does not need
    res = shrink.shrink_case(target_for(big_case()), lambda c: fail, budget=0)
    assert res.partial and res.case is None and res.candidates == 0


def test_refused_candidates_are_never_judged():
    judged = []

    def test(case):
        judged.append(case)
        return {"name": "x: tokens", "ok": False, "detail": ""}

    res = shrink.shrink_case(target_for(big_case()), test, prepare=lambda c: None, budget=60)
    assert judged == [] and res.refused > 0 and res.case is None


def test_the_probe_search_halves_to_the_fewest_requests_that_still_fail():
    fail = {"name": "drift probe: drift", "ok": False, "detail": ""}
    t = target.Target("drift probe: drift", "drift", "", None, "attention logit scale (all layers)")
    tried = []

    def test(k):
        tried.append(k)
        return fail if k >= 7 else None

    res = shrink.shrink_probe(t, test, 24, budget=60)
    assert res.requests == 7 and tried == [12, 6, 9, 7] and not res.partial
    res = shrink.shrink_probe(t, test, 24, budget=60, cost=lambda k: 100.0)
    assert res.partial and res.requests is None and res.candidates == 0


def test_a_failure_class_and_what_must_match():
    assert target.failure_class("ragged (5,3,1) d=2 D=4 [block vs loop]: kv_writes") == "kv_writes"
    assert target.failure_class("drift probe: precision") == "precision"
    t = target.Target("c [block]: backend", "backend", "the backend raised OracleError: x", big_case(), "OracleError")
    v = type("V", (), {})()

    def raised(name, text):  # a failed backend check as the verdict holds it: its text and its record
        f = Failure("backend", f"the backend raised {name}: {text}", "c", "loop", got=name)
        return {"name": "shrunk [loop]: backend", "ok": False, "detail": describe(f), "failure": f.to_json()}

    v.failed = [raised("KeyError", "3")]
    assert target.holds(v, t) is None  # another exception is another failure
    v.failed = [raised("OracleError", "y")]
    assert target.holds(v, t) is v.failed[0]
    v.failed[0]["detail"] = "the backend raised KeyError: the text is not read"  # the record is
    assert target.holds(v, t) is v.failed[0]


# ---- --case-json: the codec and its refusals ----


def test_case_json_round_trips_every_built_in_case(model):
    for case in default_cases(model.cfg.vocab_size, TINY):
        params = case.params_for(model)
        text = case_json.encode(case, params)
        got = case_json.decode(text, model.cfg)
        assert got.prompts == case.prompts and got.params == params and got.rounds == case.rounds, case.name
        assert (got.d, got.D, got.policy, got.depths) == (case.d, case.D, case.policy, case.depths), case.name
        assert list(got.rounds[0]) == list(case.rounds[0])  # the round's row order


BAD = [
    ("{", "not JSON"),
    ("[1]", "must be a JSON object"),
    ('{"prompts":[[1]],"params":[{}],"rounds":[{"0":2}],"d":1,"D":2,"x":1}', "unknown key 'x'"),
    ('{"prompts":[[1]],"params":[{}],"d":1,"D":2}', "missing key 'rounds'"),
    ('{"prompts":[[64]],"params":[{}],"rounds":[{"0":2}],"d":1,"D":2}', "outside the vocabulary"),
    ('{"prompts":[[]],"params":[{}],"rounds":[{"0":2}],"d":1,"D":2}', "prompts[0] is empty"),
    ('{"prompts":[[1]],"params":[{},{}],"rounds":[{"0":2}],"d":1,"D":2}', "2 entries for 1 requests"),
    ('{"prompts":[[1]],"params":[{"tempo":1}],"rounds":[{"0":2}],"d":1,"D":2}', "params[0]"),
    ('{"prompts":[[1]],"params":[{"top_k":3}],"rounds":[{"0":2}],"d":1,"D":2}', "no effect"),
    ('{"prompts":[[1]],"params":[{}],"rounds":[{"0":2}],"d":1,"D":2,"policy":"fixed"}', "every request is greedy"),
    ('{"prompts":[[1]],"params":[{}],"rounds":[{"0":2}],"d":2,"D":2}', "rounds[0]"),
    ('{"prompts":[[1]],"params":[{}],"rounds":[{"0":0}],"d":1,"D":2}', "must be >= 1"),
    ('{"prompts":[[1]],"params":[{}],"rounds":[{"1":2}],"d":1,"D":2}', "not one of 0..0"),
    ('{"prompts":[[1],[2]],"params":[{},{}],"rounds":[{"0":2}],"d":1,"D":2}', "request 1 is in no round"),
    ('{"prompts":[[1]],"params":[{}],"rounds":[{"0":2}],"depths":[[1,2]],"d":1}', "do not combine it with d"),
    ('{"prompts":[[1]],"params":[{"repetition_penalty":1e40}],"rounds":[{"0":2}],"d":1,"D":2}', "repetition"),
    ('{"prompts":[[1]],"params":[{}],"rounds":[{"0":2}],"d":1,"D":2,"policy":"lifo"}', "unknown RNG policy"),
    ('{"prompts":[[1]],"params":[{"temperature":NaN}],"rounds":[{"0":2}],"d":1,"D":2}', "NaN"),
]


@pytest.mark.parametrize("text,why", BAD, ids=[w for _, w in BAD])
def test_a_bad_case_json_is_one_error_line(capsys, text, why):
    rc, out, err = run(capsys, "check", "--case-json", text)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("error: --case-json: ") and why in err, err


@pytest.mark.parametrize(
    "argv,why",
    [
        (["--case-json", "{}", "--counts", "3"], "do not combine it with --counts"),
        (["--case-json", "{}", "--case", RAGGED], "do not combine it with --case-json"),
        (["--no-shrink"], "--no-shrink acts on a backend's verdict"),
        (["--shrink-budget", "5"], "--shrink-budget acts on a backend's verdict"),
        (["--backend", "torch-cpu", "--no-shrink", "--shrink-budget", "5"], "drop one or the other"),
        (["--backend", "torch-cpu", "--shrink-budget", "0"], "--shrink-budget"),
        (["--backend", "torch-cpu-bf16", "--probe-requests", "4", "--case", RAGGED], "--case would be ignored"),
        (["--backend", "torch-cpu-bf16", "--probe-requests", "4", "--no-drift"], "--no-drift skips"),
        (["--backend", "torch-cpu-bf16", "--probe-requests", "1"], "--probe-requests"),
        (["--backend", "meta_tests.faulty:make_no_fault", "--probe-requests", "4"], "judges bfloat16 and float16"),
    ],
)
def test_the_options_rules(capsys, argv, why):
    rc, out, err = run(capsys, "check", *argv)
    assert rc == 2 and len(err.splitlines()) == 1 and why in err, err


def test_case_json_runs_on_the_reference_and_names_itself(capsys):
    text = (
        '{"prompts":[[5,9],[3]],"params":[{},{"temperature":1.0,"seed":4}],'
        '"rounds":[{"1":3,"0":2},{"0":1}],"depths":[[1,3],[2,4]]}'
    )
    rc, out, _ = run(capsys, "check", "--case-json", text, "--json")
    v = json.loads(out)
    assert rc == 0 and v["cases"][0]["name"] == "case-json (2 requests, 2 rounds)" and v["tokens_compared"] > 0


# ---- trace cut ----


def test_trace_cut_pairs_one_round_and_request_and_diff_names_it(capsys, tmp_path):
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    rec = ["trace", "record", *TINY, "--counts", "5,3,1", "--rounds", "2", "--mode", "block"]
    assert run(capsys, *rec, "--out", a)[0] == 0
    assert run(capsys, *rec, "--backend", "meta_tests.faulty:make_logits_off_at_one_offset", "--out", b)[0] == 0
    rc, out, _ = run(capsys, "trace", "diff", a, b)
    assert rc == 1
    hint = out.splitlines()[-1]
    assert hint.startswith("smallest pair for a bug report (round 0 request 0): ")
    steps = hint.split(": ", 1)[1].split(" && ")
    assert [words_of(s)[:2] for s in steps] == [["trace", "cut"], ["trace", "cut"], ["trace", "diff"]]
    for s in steps[:2]:
        rc, out, _ = run(capsys, *words_of(s))
        assert rc == 0 and out.startswith("cut ")
    rc, out, _ = run(capsys, *words_of(steps[2]), "--json")
    v = json.loads(out)
    assert rc == 1 and [c["name"] for c in v["checks"] if not c["ok"]] == ["verify_logits"] and v["cut"] == []
    cut = json.loads(open(words_of(steps[0])[-1]).read())
    assert len(cut["rounds"]) == 1 and cut["rounds"][0]["requests"] == [0] and cut["params"][0][0] == 0
    assert cut["meta"]["cut"] == {"from": a, "round": 0, "request": 0}
    assert " && python -m oracle trace cut " in cut["meta"]["reproduce"]
    rc, out, err = run(capsys, "trace", "cut", a, "--round", "0", "--request", "7", "--out", str(tmp_path / "c.json"))
    assert rc == 2 and "not request 7" in err


def test_the_html_page_shows_the_shrunk_case_first(tmp_path):
    pytest.importorskip("matplotlib")
    from oracle.cli.html_report import write_report

    shrunk = {
        "class": "kv_writes",
        "key": "",
        "candidates": 3,
        "seconds": 0.4,
        "partial": False,
        "budget_s": 20.0,
        "original": {"description": "3 requests", "failure": "[kv_writes] x", "reproduce": "python -m oracle a"},
        "shrunk": {"description": "1 request", "failure": "[kv_writes] y", "reproduce": "python -m oracle b"},
    }
    page = open(write_report({"ok": False, "backend": "b", "checks": [], "shrunk": shrunk}, str(tmp_path))).read()
    assert page.index("Shrunk: the smallest case") < page.index("Failed checks")
    assert page.index("python -m oracle b") < page.index("python -m oracle a")
