"""`python -m oracle sampler` (oracle/sampler/): exit codes, bad input as one `error:` line,
the contract's checks, --case-json round trips, and the project's samplers against the rules
(the reference's and torch's agree with rules.decide value by value; the exact distribution is
a distribution and the reference's sampling converges to it)."""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

from oracle.cli import main
from oracle.errors import OracleError
from oracle.sampler.cases import draw_case, from_json, smaller, to_json
from oracle.sampler.contract import SamplerRequest, check_request
from oracle.sampler.rules import RULES
from oracle.sampling_params import SamplingParams

F32 = np.float32


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["sampler", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error(err: str, *words) -> None:
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and all(w in lines[0] for w in words), err


PLUGINS = """
    import numpy as np

    class Good:
        name, takes_uniforms = "good", False
        def sample(self, batch):
            return [[int(np.argmax(r.target_logits[0]))] for r in batch]

    class Shaped(Good):
        def __init__(self, fn): self.fn = fn
        def sample(self, batch): return self.fn(batch)

    def make_raises(): raise RuntimeError("no device here")
    def make_no_sample(): return object()
    def make_no_uniforms(): return Good()
    def make_dict(): return Shaped(lambda b: {"tokens": 1})
    def make_short(): return Shaped(lambda b: [[0]] * (len(b) - 1))
    def make_outside(): return Shaped(lambda b: [[r.V] for r in b])
    def make_too_long(): return Shaped(lambda b: [[0] * (r.K + 2) for r in b])
    def make_crashes(): return Shaped(lambda b: 1 / 0)

    from oracle.sampler.reference import ReferenceSampler

    class NoTopK(ReferenceSampler):
        def refuses(self, req): return "top-k: not here" if req.params.top_k else None

    def make_no_top_k(): return NoTopK()

    class RefusesAll(ReferenceSampler):
        def refuses(self, req): return "nothing here"

    def make_refuses_all(): return RefusesAll()
"""


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    (tmp_path / "sampler_plugs.py").write_text(textwrap.dedent(PLUGINS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "sampler_plugs"


@pytest.mark.parametrize(
    "spec, words",
    [
        ("nonsense", ["unknown sampler", "nonsense"]),
        ("sampler_plugs:make_raises", ["raised RuntimeError", "no device here"]),
        ("sampler_plugs:make_no_sample", ["without a str `name`"]),
        ("sampler_plugs:missing", ["cannot load missing"]),
        ("no_such_module_x:make", ["cannot load make"]),
        ("sampler_plugs:make_dict", ["returned dict, not a list"]),
        ("sampler_plugs:make_short", ["token lists for"]),
        ("sampler_plugs:make_outside", ["outside the vocabulary"]),
        ("sampler_plugs:make_too_long", ["tokens emitted, expected 1..K+1"]),
    ],
)
def test_bad_samplers_are_one_line_errors(capsys, plugins, spec, words):
    code, _, err = _run(capsys, "--backend", spec, "--cases", "2", "--quiet")
    assert code == 2
    _one_error(err, *words)


def test_exact_needs_a_sampler_that_takes_uniforms(capsys, plugins):
    code, _, err = _run(capsys, "--backend", "sampler_plugs:make_no_uniforms", "--exact")
    assert code == 2
    _one_error(err, "does not take uniforms", "--exact")


def test_a_sampler_that_raises_fails_its_case(capsys, plugins):
    code, out, _ = _run(capsys, "--backend", "sampler_plugs:make_crashes", "--cases", "1", "--quiet")
    assert code == 1 and "sample() raised ZeroDivisionError" in out and "reproduce: python -m oracle sampler" in out


@pytest.mark.parametrize(
    "text, words",
    [
        ("{", ["not JSON"]),
        ('{"requests": []}', ["at least one request"]),
        ('{"requests": [{"target_logits": [[0, 1]], "draft_tokens": [], "params": {"seed": 3}}]}', ["seed"]),
        ('{"requests": [{"target_logits": [[0, 1]], "draft_tokens": [0], "params": {}}]}', ["target_logits"]),
        ('{"requests": [{"target_logits": [[0, 1], [0, 1]], "draft_tokens": [5], "params": {}}]}', ["draft token 5"]),
        (
            '{"requests": [{"target_logits": [[0, 1], [0, 1]], "draft_tokens": [0], "params": {"temperature": 1},'
            ' "draft_probs": [[0, 1]]}]}',
            ["q = 0"],
        ),
        (
            '{"requests": [{"target_logits": [[0, 1]], "draft_tokens": [], "params": {"temperature": 1, '
            '"stop_token_ids": [1]}}]}',
            ["stop cut or processors"],
        ),
    ],
)
def test_bad_case_json_is_one_line(capsys, text, words):
    code, _, err = _run(capsys, "--backend", "reference", "--case-json", text, "--quiet")
    assert code == 2
    _one_error(err, *words)


def test_zero_residual_that_can_be_needed_is_refused():
    # p(x) < q(x) at the draft, but max(0, p - q) is zero everywhere: refused, never drawn
    req = SamplerRequest(
        np.log(np.array([[0.5, 0.5], [0.5, 0.5]], F32)),
        (0,),
        SamplingParams(1.0),
        draft_probs=np.array([[0.75, 0.25]], F32),
    )
    check_request(req)  # p(1) > q(1): the residual has mass
    req.target_logits = np.array([[0.0, -np.inf], [0.0, 0.0]], F32)
    req.draft_probs = np.array([[1.0, 0.0]], F32)
    check_request(req)  # p == q: never rejected, legal
    req.draft_probs = np.array([[0.9, 0.1]], F32)
    req.draft_tokens = (1,)
    check_request(req)  # p(1) = 0 < q(1): always rejected, residual max(0, p - q) = [0.1, 0]: legal
    req.target_logits = np.array([[0.0, 0.0], [0.0, 0.0]], F32)
    req.draft_probs = np.array([[0.5, 0.5005]], F32)  # sums to 1 within 1e-3; p <= q everywhere
    with pytest.raises(OracleError, match="can reject its draft but max"):
        check_request(req)


def test_cases_round_trip_and_shrink_stay_legal():
    rng = np.random.default_rng(3)
    for n in range(12):
        case = draw_case(rng, f"case {n}")
        back = from_json(to_json(case))
        for a, b in zip(case.requests, back.requests):
            assert a.target_logits.view(np.uint32).tobytes() == b.target_logits.view(np.uint32).tobytes()
            assert a.draft_tokens == b.draft_tokens and a.params == b.params and a.kind == b.kind
        for cand in smaller(case, 0):
            for i, r in enumerate(cand.requests):
                check_request(r, f"request {i}")  # raises on an illegal candidate


def test_outcome_distribution_is_a_distribution_and_sampling_converges():
    rng = np.random.default_rng(5)
    for n in range(30):
        for r in draw_case(rng, f"case {n}").requests:
            d = RULES.outcome_distribution(r)
            assert np.all(d >= 0) and abs(d.sum() - 1) < 1e-9
            if r.params.greedy or r.K == 0:
                continue
            # enumerate the accept uniforms on a grid: P(a >= 1) = min(1, p/q) of offset 0
            ps, qs = RULES.dists(r)
            x = r.draft_tokens[0]
            grid = (np.arange(4096) + 0.5) / 4096
            acc = np.mean([RULES.accept(u, ps[0], qs[0], x) for u in grid])
            assert abs(acc - d[1:].sum()) <= 1 / 4096 + 1e-6


def test_reference_and_torch_agree_value_by_value():
    from kernels.sampler_plugin import make_torch_sampler
    from oracle.sampler.reference import make_reference_sampler

    rng = np.random.default_rng(11)
    batch = []
    for n in range(20):
        for r in draw_case(rng, f"case {n}").requests:
            if r.V == 256:
                continue
            r.uniforms = None if r.params.greedy else rng.random(r.K + 1)
            batch.append(r)
    by_vocab = {}
    for r in batch:
        by_vocab.setdefault(r.V, []).append(r)
    for reqs in by_vocab.values():
        want = [RULES.decide(r, r.uniforms) for r in reqs]
        assert make_reference_sampler().sample(reqs) == want
        assert make_torch_sampler().sample(reqs) == want


def test_exact_mode_passes_our_samplers(capsys):
    for spec in ("reference", "torch"):
        code, out, _ = _run(capsys, "--backend", spec, "--exact", "--cases", "6", "--quiet")
        assert code == 0 and out.splitlines()[-1].startswith("OK: 6 case(s)"), out


def test_json_schema_and_a_failing_case_reproduces(capsys):
    case = (
        '{"requests": [{"target_logits": [[0, 0.5, 1], [0, 0, 0]], "draft_tokens": [2], '
        '"params": {"temperature": 1}, "draft_probs": [[0.2, 0.2, 0.6]]}]}'
    )
    code, out, _ = _run(capsys, "--backend", "reference", "--case-json", case, "--json", "--quiet")
    assert code == 0
    j = json.loads(out)
    assert j["schema"] == "oracle.sampler/1" and j["ok"] and j["tests_in_family"] == 1
    t = j["cases"][0]["tests"][0]
    assert t["mode"] == "distribution" and t["detects_tv"] <= 0.05 + 1e-9 and t["p_value"] > 1e-3
    spec = "meta_tests.faulty_samplers:make_recover_from_p"
    code, out, _ = _run(capsys, "--backend", spec, "--case-json", case, "--shrink-budget", "0", "--quiet")
    assert code == 1 and f"reproduce: python -m oracle sampler --backend {spec} --case-json" in out


def test_refused_requests_leave_their_case(capsys, plugins):
    code, out, _ = _run(capsys, "--backend", "sampler_plugs:make_no_top_k", "--exact", "--cases", "12", "--json")
    j = json.loads(out)
    assert code == 0 and j["ok"]
    refused = [x for c in j["cases"] for x in c["refused"]]
    assert refused and all(x.endswith("top-k: not here") for x in refused)
    judged = [from_json(c["case_json"]) for c in j["cases"] if not c["skipped"]]
    assert judged and not any(r.params.top_k for c in judged for r in c.requests)


def test_a_run_that_judges_nothing_fails(capsys, plugins):
    """Every request refused: no test ran, and a run that compares nothing fails."""
    code, out, _ = _run(capsys, "--backend", "sampler_plugs:make_refuses_all", "--exact", "--cases", "3", "--quiet")
    assert code == 1 and "FAILED: nothing judged" in out, out


def test_budget_stops_drawing_cases(capsys):
    code, out, _ = _run(capsys, "--backend", "reference", "--cases", "50", "--budget", "0.001", "--quiet", "--exact")
    assert code == 0 and "stopped: budget of 0.001 s spent" in out


SMALL = (
    '{"requests": [{"target_logits": [[0, 0.5, 1], [0, 0, 0]], "draft_tokens": [2], '
    '"params": {"temperature": 1}, "draft_probs": [[0.2, 0.2, 0.6]]}]}'
)


def test_report_page_has_a_plot_per_distribution_test(capsys, tmp_path):
    report = str(tmp_path / "r")
    code, out, _ = _run(capsys, "--backend", "reference", "--case-json", SMALL, "--report", report, "--quiet")
    page = (tmp_path / "r" / "index.html").read_text()
    assert code == 0 and "report: " in out and page.count("data:image/png;base64,") == 1 and "OK" in page


def test_report_without_matplotlib_is_refused_before_the_run(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = _run(capsys, "--backend", "reference", "--case-json", SMALL, "--report", str(tmp_path / "r"))
    assert code == 2 and out == "" and "sampler:" not in err
    _one_error(err, "matplotlib", "plots extra")
