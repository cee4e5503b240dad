"""The precision verdict's parts (oracle/judge/probe/precision.py, the drift allowance of oracle/judge/probe/drift.py,
oracle/judge/probe/drift_stats.py): the one-sided t on log error energy per group, its threshold and the
effective bits it reports, the order that names the first group; the twin's drift interval; the
NumPy twin and the JAX twin (judge_jax/twin.py) measure the same energies; the kernel precision
faults parse (kernels/options.py)."""

from __future__ import annotations

from types import SimpleNamespace

import math

import numpy as np
import pytest

from oracle.errors import OracleError
from oracle.judge.probe import drift, drift_stats, forwards, knobs, noise, precision, precision_fit, probe_runs
from oracle.judge.probe.observations import observations, observed
from oracle.judge.probe.calibration import DRIFT_FLOOR, FAMILY_ALPHA, RHO, SAMPLES, SIGMA, TWIN_SPREAD

N = 24  # requests, as the drift probe's PROBE_REQUESTS


def energies(groups: dict, n: int = N, seed: int = 0) -> dict:
    """rid -> {group: (m, values)}: each group's per-request energies m_r = level * exp(eps_r), the
    eps_r symmetric about 0 (so mean_r log m_r = log level exactly) with spread 0.3."""
    rng = np.random.default_rng(seed)
    out: dict = {rid: {} for rid in range(n)}
    for g, level in groups.items():
        half = rng.normal(0.0, 0.3, n // 2)
        eps = np.concatenate([half, -half])
        for rid in range(n):
            out[rid][g] = (level * math.exp(eps[rid]), 100)
    return out


# ---- the verdict on synthetic energies ----


def test_group_at_rho_passes_and_one_far_above_fails_named():
    rep = precision.verdict(
        energies(
            {
                ("k", 0, 0): RHO,
                ("v", 0, 0): 1.0,
                ("draft", 1): 0.5,
                ("v", 1, 1): 10 * RHO,
                ("verify", 3): 1.0,
            }
        ),
        "bfloat16",
    )
    by = {g.key: g for g in rep.groups}
    assert abs(by[("k", 0, 0)].t) < 1e-9 and by[("k", 0, 0)].energy == pytest.approx(RHO)
    assert by[("v", 0, 0)].t < 0 and by[("draft", 1)].t < by[("v", 0, 0)].t  # below RHO: one-sided, passes
    assert by[("v", 1, 1)].t > rep.threshold
    assert not rep.ok
    assert rep.failure.startswith("V writes, depth 1, layer 1: error energy 20.00x the bfloat16 twin's"), rep.failure
    assert "1 of 5 groups past it" in rep.failure and "computed or stored below bfloat16" in rep.failure
    assert rep.requests == N and rep.to_json()["groups"][0]["group"] == "K writes, depth 0, layer 0"


def test_each_kind_is_judged_against_its_own_limit_and_the_headroom_is_reported():
    """limits: kind -> limit. A group at 2x fails against a K limit of 1.5 and passes against a V
    limit of 2.5; per kind the report gives the largest energy, the limit and the smallest energy the
    run could have detected (limit * exp(threshold * se) of the kind's best-measured group)."""
    rep = precision.verdict(
        energies({("k", 0, 0): 2.0, ("v", 0, 0): 2.0, ("draft", 1): 1.0, ("verify", 3): 1.0}),
        "bfloat16",
        limits={"k": 1.5, "v": 2.5, "draft": 1.4, "verify": 1.3},
        hidden=128,
    )
    by = {g.key: g for g in rep.groups}
    assert by[("k", 0, 0)].limit == 1.5 and by[("k", 0, 0)].t > rep.threshold
    assert by[("v", 0, 0)].limit == 2.5 and by[("v", 0, 0)].t < 0
    assert not rep.ok and rep.failure.startswith("K writes, depth 0, layer 0: error energy 2.00x the bfloat16 twin's")
    assert "within 1.50x the twin's energy in K writes at hidden size 128" in rep.failure
    kinds = {k["kind"]: k for k in rep.to_json()["kinds"]}
    g = by[("v", 0, 0)]
    assert kinds["V writes"]["limit"] == 2.5 and kinds["V writes"]["largest"] == pytest.approx(2.0)
    assert kinds["V writes"]["detectable"] == pytest.approx(2.5 * math.exp(g.threshold * g.se))
    assert kinds["V writes"]["critical_limit"] == pytest.approx(2.0 * math.exp(-g.threshold * g.se))
    lines = precision.report_lines(rep.to_json())
    assert any(
        line.strip().startswith("V writes: largest 2.00x") and "limit 2.50x at hidden 128" in line for line in lines
    )
    assert rep.to_json()["limits"] == {
        "K writes": 1.5,
        "V writes": 2.5,
        "draft logits": 1.4,
        "verification logits": 1.3,
    }


def test_every_group_at_rho_passes():
    rep = precision.verdict(energies({("k", j, l): RHO for j in range(3) for l in range(2)}), "float16")
    assert rep.ok and rep.failure == ""
    assert all(abs(g.t) < 1e-9 for g in rep.groups)


def test_failure_names_the_first_group_in_compute_order_and_the_largest():
    rep = precision.verdict(
        energies({("k", 0, 0): 1.0, ("v", 0, 1): 6.0, ("k", 1, 0): 30.0, ("verify", 3): 8.0}),
        "bfloat16",
        reproduce="python -m oracle check --backend X",
    )
    assert not rep.ok
    head, _, rest = rep.failure.partition(":")
    assert head == "V writes, depth 0, layer 1", rep.failure
    assert "the largest: K writes, depth 1, layer 0, 30.00x" in rest and "3 of 4 groups past it" in rest
    assert rep.failure.endswith("(reproduce: python -m oracle check --backend X)")


def test_threshold_is_one_sided_bonferroni_over_the_groups():
    groups = {("k", 0, l): 1.0 for l in range(2)} | {("v", 0, l): 1.0 for l in range(2)} | {("draft", 0): 1.0}
    rep = precision.verdict(energies(groups), "bfloat16")
    m = len(groups)
    want = drift_stats.t_critical(2 * FAMILY_ALPHA / m, N - 1)
    assert rep.threshold == pytest.approx(want, rel=1e-12)
    assert precision.one_sided_threshold(m, N) == pytest.approx(want, rel=1e-12)
    # one-sided: P(T > thr) = FAMILY_ALPHA / m, i.e. half the two-sided tail at thr
    assert drift_stats.t_two_sided(rep.threshold, N - 1) / 2 == pytest.approx(FAMILY_ALPHA / m, rel=1e-6)
    stats = pytest.importorskip("scipy.stats")
    assert rep.threshold == pytest.approx(stats.t.isf(FAMILY_ALPHA / m, N - 1), rel=1e-9)


def test_a_group_with_one_sample_is_not_tested():
    e = energies({("k", 0, 0): 1.0})
    e[0][("v", 5, 0)] = (1e6, 10)  # one request only: no standard error
    rep = precision.verdict(e, "bfloat16")
    assert rep.ok and [g.key for g in rep.groups] == [("k", 0, 0)]


def test_t_is_mean_log_energy_over_its_standard_error():
    rng = np.random.default_rng(3)
    m = np.exp(rng.normal(math.log(3.0), 0.5, N))
    rep = precision.verdict({rid: {("verify", 2): (float(m[rid]), 7)} for rid in range(N)}, "bfloat16")
    g = rep.groups[0]
    x = np.log(m)
    se = x.std(ddof=1) / math.sqrt(N)
    assert g.energy == pytest.approx(math.exp(x.mean()), rel=1e-12)
    assert g.se == pytest.approx(se, rel=1e-12)
    assert g.t == pytest.approx((x.mean() - math.log(RHO)) / se, rel=1e-12)
    assert g.values == 7 * N


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_effective_bits(dtype):
    levels = {("k", 0, 0): 1.0, ("v", 0, 0): 4.0, ("draft", 1): 16.0, ("verify", 1): 0.25}
    rep = precision.verdict(energies(levels), dtype)
    for g in rep.groups:
        assert g.bits == pytest.approx(precision.BITS[dtype] - math.log2(g.energy) / 2, rel=1e-12)
        assert g.energy == pytest.approx(levels[g.key], rel=1e-12)
    bits = {g.key: g.bits for g in rep.groups}
    assert bits[("k", 0, 0)] == pytest.approx(precision.BITS[dtype])  # the twin's energy: the dtype's bits
    assert bits[("v", 0, 0)] == pytest.approx(precision.BITS[dtype] - 1)  # 4x the energy: one bit fewer
    assert bits[("draft", 1)] == pytest.approx(precision.BITS[dtype] - 2)
    assert bits[("verify", 1)] == pytest.approx(precision.BITS[dtype] + 1)  # more precision than the twin


def test_compute_order():
    groups = [
        ("verify", 1),
        ("k", 1, 0),
        ("draft", 0),
        ("v", 0, 1),
        ("k", 0, 1),
        ("verify", 0),
        ("v", 0, 0),
        ("k", 0, 0),
        ("draft", 1),
        ("v", 1, 0),
    ]
    assert sorted(groups, key=precision.compute_order) == [
        ("k", 0, 0),
        ("v", 0, 0),
        ("k", 0, 1),
        ("v", 0, 1),
        ("draft", 0),
        ("verify", 0),
        ("k", 1, 0),
        ("v", 1, 0),
        ("draft", 1),
        ("verify", 1),
    ]


def test_group_labels():
    assert precision.group_label(("k", 0, 0)) == "K writes, depth 0, layer 0"
    assert precision.group_label(("v", 2, 1)) == "V writes, depth 2, layer 1"
    assert precision.group_label(("draft", 1)) == "draft logits, depth 1"
    assert precision.group_label(("verify", 3)) == "verification logits, depth 3"


def test_fit_has_no_verdict_without_a_twin():
    assert precision_fit.fit(None, {}, "float32", None) is None


# ---- the drift allowance and the interval test ----


def _allowance(xt):
    per = xt.mean(axis=1)
    mean, se = per.mean(), per.std(ddof=1) / math.sqrt(len(per))
    return mean, se


@pytest.mark.parametrize("center", [3e-4, -5e-4, 0.0])
def test_twin_allowance(center):
    rng = np.random.default_rng(1)
    xt = rng.normal(center, 2e-4, (N, SAMPLES))
    lo, hi = drift.twin_allowance(xt)
    mean, se = _allowance(xt)
    widen = TWIN_SPREAD * se + DRIFT_FLOOR
    assert lo < 0 < hi and lo < RHO * mean < hi  # contains 0 and RHO * mean
    assert lo == pytest.approx(min(0.0, RHO * mean) - widen, rel=1e-12, abs=1e-15)
    assert hi == pytest.approx(max(0.0, RHO * mean) + widen, rel=1e-12, abs=1e-15)


def test_twin_allowance_without_spread_is_the_floor_around_the_ends():
    xt = np.full((N, SAMPLES), 0.002)
    lo, hi = drift.twin_allowance(xt)
    assert lo == pytest.approx(-DRIFT_FLOOR, abs=1e-12)
    assert hi == pytest.approx(RHO * 0.002 + DRIFT_FLOOR, abs=1e-12)


def test_beyond_interval():
    x = np.array([0.001, 0.002, 0.003, 0.002])
    mean, se, t = drift_stats.beyond_interval(x, -0.001, 0.003)
    assert (mean, t) == (pytest.approx(0.002), 0.0)  # inside: 0
    assert se == pytest.approx(np.std(x, ddof=1) / 2)
    _, _, t = drift_stats.beyond_interval(x, -0.001, 0.0015)
    assert t == pytest.approx((0.002 - 0.0015) / se) and t > 0  # past the upper end: positive
    _, _, t = drift_stats.beyond_interval(x, 0.0025, 0.01)
    assert t == pytest.approx((0.002 - 0.0025) / se) and t < 0  # below the lower end: negative
    same = np.full(5, 0.004)  # no spread: infinitely sure
    assert drift_stats.beyond_interval(same, 0.0, 0.001)[2] == math.inf
    assert drift_stats.beyond_interval(-same, -0.001, 0.0)[2] == -math.inf
    assert drift_stats.beyond_interval(same, 0.0, 0.005)[2] == 0.0


# ---- the NumPy twin and the JAX twin agree ----


@pytest.fixture(scope="module")
def perturbed(tiny):
    """A reference run of a short probe (6 requests) and its observations with each value multiplied
    by (1 + 3 sigma u), u uniform with variance 1: three times bfloat16's rounding noise."""
    from oracle.reference_backend import ReferenceBackend

    runs = probe_runs.probe_runs(ReferenceBackend(), tiny, n=6)
    obs = {key: v for key, v in observations(runs.values()).items() if v[2]}
    rng = np.random.default_rng(7)
    s = 3 * SIGMA["bfloat16"]
    out = []
    for tokens, loops, o in obs.values():
        o = {
            k: (np.asarray(v, np.float64) * (1 + s * rng.uniform(-(3**0.5), 3**0.5, np.shape(v)))).astype(np.float32)
            for k, v in o.items()
        }
        out.append((tokens, loops, o))
    return out


def test_the_probe_verdicts_share_one_forwards(tiny):
    """On one Forwards the twin's forwards made at every request's span (the precision fit's) serve
    the drift fit too (it adds its finite-difference forwards only); the verdicts are those of the one
    verdict's fits."""
    from oracle.reference_backend import ReferenceBackend
    from oracle.judge.probe.forwards import Forwards
    from oracle.judge.plans.plan import INLINE, probe_plan
    from oracle.judge.plans.verdict import judge

    runs = probe_runs.probe_runs(ReferenceBackend(), tiny, n=4)
    fwd = Forwards(tiny)
    seen, merged = observed(runs.values())
    made, _ = fwd.probe_forwards([forwards.span(*s) for s in seen.values()], [], "bfloat16")
    prec = precision_fit.fit(tiny, seen, "bfloat16", noise.numpy_energy_fn(made))
    twins = dict(fwd.twin)
    assert twins and not fwd.fd
    rep = drift.fit_drift(
        tiny,
        merged,
        knobs.directions(tiny.cfg.num_layers),
        made=fwd.probe_forwards([], forwards.drift_contexts(merged), "bfloat16")[1],
    )
    assert fwd.fd and fwd.twin.keys() == twins.keys()
    assert all(fwd.twin[k] is v for k, v in twins.items())
    as_bf16 = SimpleNamespace(
        name="reference runs judged as bfloat16", dtype="bfloat16", exact=False, policies=("sequential",)
    )
    v = judge(probe_plan(as_bf16, tiny, runs), INLINE)  # the one verdict: fits of its own
    rep0, prec0 = v.drift, v.precision
    for a, b in ((rep, rep0), (prec, prec0)):
        a, b = a.to_json(), b.to_json()
        a.pop("seconds"), b.pop("seconds")
        assert a == b


def group_means(energy_fn, sets) -> dict:
    """group -> mean r^2 over every observed value of the sets."""
    acc: dict = {}
    for tokens, loops, o in sets:
        for g, (s, n) in energy_fn(tokens, loops, o).items():
            a = acc.setdefault(g, [0.0, 0])
            a[0] += s
            a[1] += n
    return {g: s / n for g, (s, n) in acc.items()}


def test_numpy_and_jax_twins_agree(tiny, perturbed):
    pytest.importorskip("jax")
    from judge_jax.twin import make_energy_fn

    made, _ = forwards.Forwards(tiny).probe_forwards([forwards.span(*s) for s in perturbed], [], "bfloat16")
    ours = group_means(noise.numpy_energy_fn(made), perturbed)
    theirs = group_means(make_energy_fn(tiny, "bfloat16"), perturbed)
    assert set(ours) == set(theirs) and len(ours) >= 4 * tiny.cfg.num_layers
    ratios = {g: theirs[g] / ours[g] for g in ours}
    bad = {g: round(r, 3) for g, r in ratios.items() if not 1 / 1.35 < r < 1.35}
    assert not bad, f"JAX / NumPy twin mean r^2 per group beyond 35%: {bad}; all {ratios}"
    # not vacuous: the perturbation's energy over the twin's varies by group (largest at depth 0, where
    # the twin's own noise has passed through the fewest roundings), and both twins follow it
    assert max(ours.values()) > 4 * min(ours.values()), ours


# ---- the kernel precision faults ----


@pytest.mark.parametrize(
    "fault,want",
    [
        ("fp8_k", ("fp8_k", None, None)),
        ("fp8_v", ("fp8_v", None, None)),
        ("fp8_act", ("fp8_act", None, None)),
        ("fp8_gate_up.1", ("fp8_gate_up", 1, None)),
        ("", None),
        ("attn_scale=1.01", ("attn_scale", None, 1.01)),
        ("v_bits=7.35", ("v_bits", None, 7.35)),
        ("k_bits.1=6", ("k_bits", 1, 6.0)),
        ("attn_out_bits.1=4.4", ("attn_out_bits", 1, 4.4)),
        ("o_weight_bits.0=5", ("o_weight_bits", 0, 5.0)),
    ],
)
def test_parse_fault(fault, want):
    from kernels.options import KernelOptions, parse_fault

    assert parse_fault(fault) == want
    assert KernelOptions(fault=fault).fault == fault


@pytest.mark.parametrize(
    "fault",
    [
        "fp8_gate_up",
        "fp8_gate_up.",
        "fp8_gate_up.x",
        "fp8_k.1",
        "fp8_v.0",
        "fp8_act.1",
        "fp8_k=1.01",
        "fp8_q",
        "v_bits",
        "v_bits=9",
        "v_bits=1.5",
        "v_bits=nan",
        "k_bits.x=6",
        "k_bits.-1=6",
        "attn_out_bits=4",
        "o_weight_bits=5",
    ],
)
def test_parse_fault_refuses(fault):
    from kernels.options import KernelOptions, parse_fault

    with pytest.raises(OracleError, match="kernel fault"):
        parse_fault(fault)
    with pytest.raises(OracleError, match="kernel fault"):
        KernelOptions(fault=fault)


def test_round_bits_keeps_bfloat16_at_8_bits_and_the_kernel_v_fault_stores_what_the_patch_does():
    """round_bits(x, 8) leaves bfloat16 values as they are (8 significant bits); the kernel fault
    v_bits=B stores, after the write, the V the eager patch rd:v_bits=B rounds before it (one
    rounding, two places): the same K/V planes after a round on the CPU."""
    torch = pytest.importorskip("torch")
    from kernels.backend import TorchBackend
    from kernels.rounding import round_bits
    from kernels.options import KernelOptions
    from meta_tests.band_faults import rounding_backend
    from oracle.checkpoint import build_model
    from oracle.sampling_params import SamplingParams

    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    assert torch.equal(round_bits(x, 8), x)
    assert not torch.equal(round_bits(x, 7.35), x)
    model = build_model("tiny", 0)
    planes = []
    for bk in (
        TorchBackend("cpu", dtype="bfloat16", kernel_options=KernelOptions(fault="v_bits=7.35")),
        rounding_backend("v_bits=7.35"),
    ):
        s = bk.session(model, 2, 4, "block")
        s.add(0, [1, 2, 3], SamplingParams())
        s.step({0: 3})
        kv = getattr(s, "_inner", s).engine.kv
        planes.append((kv.k.clone(), kv.v.clone()))
    assert torch.equal(planes[0][0], planes[1][0]) and torch.equal(planes[0][1], planes[1][1])


def test_each_group_is_tested_over_its_own_requests():
    """A group seen in 3 of 24 requests gets the threshold of 2 degrees of freedom, not 23: a high
    but noisy energy there is not called (it would be against 23)."""
    rng = np.random.default_rng(1)
    energies = {r: {("k", 0, 0): (1.0 * float(np.exp(rng.normal(0, 0.05))), 10)} for r in range(24)}
    for r, m in zip(range(3), (40.0, 60.0, 50.0)):
        energies[r][("v", 0, 0)] = (m, 10)
    rep = precision.verdict(energies, "bfloat16")
    g = {x.key: x for x in rep.groups}
    assert g[("v", 0, 0)].requests == 3 and g[("k", 0, 0)].requests == 24
    assert g[("v", 0, 0)].threshold == pytest.approx(precision.one_sided_threshold(2, 3))
    assert g[("v", 0, 0)].threshold > 5 * g[("k", 0, 0)].threshold
    assert g[("v", 0, 0)].t > g[("k", 0, 0)].threshold and rep.ok  # past 23 dof's threshold, within its own


def test_nothing_observed_or_a_non_finite_value_fails():
    assert not precision.verdict({}, "bfloat16").ok
    assert "nothing to judge" in precision.verdict({}, "bfloat16").failure
    energies = {r: {("k", 0, 0): (1.0, 10)} for r in range(24)}
    energies[5][("k", 0, 0)] = (math.inf, 10)
    rep = precision.verdict(energies, "bfloat16")
    assert not rep.ok and "K writes, depth 0, layer 0" in rep.failure


def test_the_drift_floor_is_the_validated_one_up_to_hidden_32_and_shrinks_as_one_over_hidden_above():
    """floor(H): DRIFT_FLOOR where the 2000-model false-alarm run measured it (H = 8..32), then
    DRIFT_FLOOR * 32 / H (calibration.FLOOR_POWER 1), and the twin's allowance widened by exactly that."""
    assert [drift.drift_floor(h) for h in (8, 16, 32)] == [DRIFT_FLOOR] * 3
    assert drift.drift_floor(128) == pytest.approx(DRIFT_FLOOR / 4)
    assert drift.drift_floor(2048) == pytest.approx(DRIFT_FLOOR / 64)
    xt = np.zeros((24, 8))
    assert drift.twin_allowance(xt, drift.drift_floor(128)) == pytest.approx((-0.00025, 0.00025))


def test_precision_limits_follow_the_hidden_size_and_the_drift_allowance_takes_the_largest():
    """calibration.PRECISION_LIMITS: a model takes the last row at or below its hidden size (a size
    between two measured ones the smaller one's), limits never grow with the hidden size, and the
    drift allowance's factor is the largest limit of any kind there."""
    from oracle.judge.probe import calibration

    rows = calibration.PRECISION_LIMITS
    assert calibration.precision_limits(8) == rows[0][1] and calibration.precision_limits(4) == rows[0][1]
    assert calibration.precision_limits(64) == calibration.precision_limits(32)
    assert calibration.precision_limits(2048) == rows[-1][1]
    for (_, a), (_, b) in zip(rows, rows[1:]):
        assert all(b[k] <= a[k] for k in precision.KIND)
    assert drift.allowance_rho(128) == max(calibration.precision_limits(128).values())
