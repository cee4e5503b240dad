"""oracle/cli/limits.py with `--reference jax` on a GPU: the judge's side is estimated from the
JAX judge's own cost (oracle.roofline.judge_round_floor times a measured factor, plus a measured
setup), not the NumPy reference's. The device query is mocked: no GPU is needed."""

from __future__ import annotations

import pytest

from oracle.cli import build_parser, limits
from oracle.config import preset
from oracle.errors import OracleError

ISSUE = [
    "check",
    "--backend",
    "torch-cuda",
    "--reference",
    "jax",
    "--preset",
    "ouro-1.4b",
    "--counts",
    "5,1,3",
    "--rounds",
    "3",
]


def preflight(argv):
    args = build_parser().parse_args(argv)
    args.preflight(args)
    return args


def test_jax_reference_on_a_gpu_is_estimated_from_the_judge(monkeypatch):
    monkeypatch.setattr(limits, "busy_factor", lambda: (1.0, ""))  # the idle machine's estimate
    monkeypatch.setattr(limits, "jax_gpu_available", lambda: False)
    with pytest.raises(OracleError, match=r"about 566 s"):  # the NumPy reference's estimate
        preflight(ISSUE)
    monkeypatch.setattr(limits, "jax_gpu_available", lambda: True)
    preflight(ISSUE)  # no longer refused
    cfg = preset("ouro-1.4b")
    est = limits.estimate_judge_seconds(cfg, [dict(enumerate([5, 1, 3]))] * 3, 2, 4, 8)
    assert 60 < est < limits.MAX_SECONDS  # it ran in 102 s on one H200
    with pytest.raises(OracleError, match=r"this run would take about \d+ s"):
        preflight(ISSUE[:-1] + ["300"])  # many rounds are still refused
    monkeypatch.setattr(limits, "jax_gpu_available", lambda: True)
    with pytest.raises(OracleError, match=r"about 566 s"):  # a NumPy judge keeps its estimate
        preflight([a for a in ISSUE if a not in ("--reference", "jax")])


def test_judge_estimate_grows_with_the_work():
    cfg = preset("ouro-1.4b")
    one = limits.estimate_judge_seconds(cfg, [dict(enumerate([5] * 16))], 2, 4, 1024)
    ten = limits.estimate_judge_seconds(cfg, [dict(enumerate([5] * 16))] * 10, 2, 4, 1024)
    from oracle.roofline import judge_round_floor

    per_round = sum(judge_round_floor(cfg, 16, 1024, 2, 4, m, K=4)["floor_s"] for m in ("block", "loop"))
    assert one > limits.JUDGE_SETUP_SECONDS
    assert (ten - one) / 9 == pytest.approx(limits.JUDGE_FLOOR_FACTOR * per_round, rel=0.05)  # both modes' rounds
    small = limits.estimate_judge_seconds(preset("tiny"), [dict(enumerate([5] * 16))], 2, 4, 8)
    assert small == pytest.approx(limits.JUDGE_MIN_SETUP_SECONDS, rel=1e-3)


def test_device_query_honours_jax_platforms(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert limits.jax_gpu_available() is False
    assert limits.judge_on_gpu("reference") is False
