"""The property suite catches deliberately faulty backends (meta_tests/faulty.py).

Each (fault, property) pair below runs the property of property_tests/ in-process with the
faulty backend as the implementation under test (meta_tests/catch.py: the profile's example
budget, derandomized, no shrinking) and asserts that it fails, and for the reason given. The
same faults fail the suite from the command line:

    HYPOTHESIS_PROFILE=ci ORACLE_BACKEND=meta_tests.faulty:make_<fault> python -m pytest property_tests

Which property catches which fault (ci profile; X = asserted below, x = also fails in the
survey `HYPOTHESIS_PROFILE=ci python -m meta_tests.matrix`, . = passes):

    property                            accept  head   kv     roll-  top-p  resid  bonus  biased
                                        early   late   plane  back   shift  clamp  after  2% TV
    rounds agree (block/loop/ref)       X       X      X      .      X      X      X      x
    rounds follow their schedule        .       X      .      x*     x      x      .      .
    logits == cache-free recompute      .       X      X      x*     x      x      .      .
    rollback leaves committed KV        .       .      x**    X      x      x      .      .
    generation agrees (multi-round)     x       x      x      X*     x      x      x      x
    forced acceptance (sampled, a=3)    x       x      x**    X      .      .      x      x
    alone == in a batch                 .       x      X      x*     x      x      .      .
    RNG events follow the policy        X       x      x      x*     x      x      X      .
    output distribution == target       .       .      .      .      x      .      .      x
    enumeration through the sampler     .       .      .      .      x      X      .      x
    filters follow the spec             .       .      .      .      X      .      .      x
    chi-square (top-p config)           .       .+     .+     .      X      X      .      X (test_power.py,
                                                                                             all 5 configs)
    golden RNG order                    X       X      x      x*     x      x      X      x
    stateful lifecycle                  X       X      X      X      x      x      X      x

    *  (also) through the reference's own guard at the next round: "KV frontiers != committed - 1"
    ** the dense KV of that backend returns zeros for an unwritten position instead of raising
    +  caught by the chi-square configurations that run loop rounds (e.g. t0.7-topk6-K2)
    The sampling faults mostly surface in rounds as "categorical draw from a distribution with
    zero total mass" (an emptied top-p set, a residual that sums to ~0) before any comparison.

Faults of masks, ties, stops; asserted below, ci profile):

    top-k drops ties            filters follow the spec (quantised logits tie at the k-th value)
    residual unnormalised       residual is a distribution (the draws alone cannot see it: the
                                inverse CDF rescales by the cdf's last entry, so enumeration and
                                chi-square pass)
    stop KV not rolled back     stops cut emission, not decisions (KV frontier after the cut)
    mask on verification only   rounds agree (drafts of banned tokens; sampled requests carry
                                masks in a quarter of the examples)

Faults of the processors (sequence-dependent processors inside rounds; asserted below, ci profile,
FP32 and emulated BF16; the forced-draft property runs on exact backends only, so BF16 relies
on the others):

    penalty ignores drafts      rounds agree, plain-decoding equivalence, forced drafts, stateful
    penalty on verify only      rounds agree, generation agrees, stateful (greedy output stays
                                lossless: only the drafts, and so the RNG events, change)
    min_tokens counts drafts    plain-decoding equivalence, forced drafts (min_tokens needs stop
                                tokens: the round properties' requests carry none)
    bad words ignore drafts     plain-decoding equivalence, forced drafts
    n-grams ignore drafts       plain-decoding equivalence with no_repeat_ngram alone
and each fails `check --backend` on the processor case (PROCESSOR_CASES: the issue's
processor flags with stop tokens) in both precisions, where the correct backends pass.

The correct-but-inexact backend (make_noisy_fp32: batch-variant 1e-7 noise, device-RNG
replay path) must pass: test_correct_inexact_backend_passes (no false alarms), on half of each
property's example budget (FALSE_ALARM_SCALE).
"""

from __future__ import annotations

import pytest

from meta_tests import faulty
from meta_tests.catch import check
from meta_tests.precision import as_bf16
from meta_tests.conftest import RESULTS

ROUNDS = "test_round_props::test_block_and_loop_rounds_agree"
SCHEDULE = "test_round_props::test_rounds_follow_their_schedule"
CACHE_FREE = "test_round_props::test_logits_match_cache_free_recompute"
ROLLBACK = "test_round_props::test_rollback_leaves_exactly_the_committed_kv"
GENERATION = "test_generation_props::test_block_and_loop_generation_agree"
FORCED = "test_generation_props::test_rollback_after_every_acceptance_count[kind=sampled,a=3,policy=sequential]"
ALONE = "test_generation_props::test_seeded_request_same_alone_and_in_batch"
RNG = "test_rng_props::test_rng_events_follow_policy"
ENUMERATION = "test_distribution::test_enumeration_through_the_sampler_converges"
FILTERS = "test_distribution::test_filters_follow_the_spec"
CHI2_TOP_P = "test_distribution::test_emitted_tokens_follow_the_target[config_id=t1.3-topp0.85-K1]"
GOLDEN_SEQ = "test_golden::test_rng_order_matches_golden[name=sequential_mixed_d2_D4,mode=block]"
GOLDEN_FIXED_LOOP = "test_golden::test_rng_order_matches_golden[name=fixed_mixed_d2_D4,mode=loop]"
STATEFUL = "test_stateful::RoundLifecycle"
RESIDUAL_SUM = "test_distribution::test_residual_is_a_distribution"
STOPS = "test_stop_props::test_stops_cut_emission_not_decisions"
PLAIN = "test_processor_props::test_greedy_speculative_decoding_is_plain_decoding"
PLAIN_NGRAM = "test_processor_props::test_each_processor_alone_is_plain_decoding[step=no_repeat_ngram]"
FORCED_DRAFTS = "test_processor_props::test_forced_drafts_follow_the_plain_decode"
NO_UNIFORMS = "test_processor_props::test_processors_draw_no_uniforms"

# fault factory -> [(property, a substring the failure must contain, or "")]
EXPECTED = {
    "make_accept_before_last_draft": [
        (RNG, "PCG64"),
        (ROUNDS, "rng_events"),
        (GOLDEN_SEQ, "RNG order changed"),
        (STATEFUL, "rng_events"),
    ],
    "make_draft_head_late": [
        (ROUNDS, "loop vs reference"),
        (SCHEDULE, "the plan has"),
        (CACHE_FREE, "cache-free"),
        (GOLDEN_FIXED_LOOP, "RNG order changed"),
        (STATEFUL, ""),
    ],
    "make_kv_wrong_plane": [
        (ROUNDS, "kv_writes"),
        (CACHE_FREE, "cache-free"),
        # alone vs in a batch, bit for bit: the wrong plane's attention changes a decision, and the
        # RNG events (compared before the KV writes) can differ first
        (ALONE, "kv_writes|rng_events"),
        (STATEFUL, "kv_writes|rng_events"),
    ],
    "make_rollback_off_by_one": [
        (ROLLBACK, "KV frontiers"),
        (FORCED, "KV frontier"),
        (GENERATION, "KV frontiers"),
        (STATEFUL, "KV frontiers|a failed round (zero tokens) changed the backend's state"),
    ],
    "make_top_p_no_shift": [(FILTERS, "filtered probabilit"), (CHI2_TOP_P, "chi-square"), (ROUNDS, "")],
    "make_residual_no_clamp": [(ENUMERATION, ""), (CHI2_TOP_P, "chi-square|zero total mass"), (ROUNDS, "")],
    "make_bonus_after_rejection": [
        (RNG, "the policy requires nothing more"),
        (ROUNDS, "rng_events"),
        (GOLDEN_SEQ, "RNG order changed"),
        (STATEFUL, "rng_events"),
    ],
    # faults a reduced-precision judge could excuse if it compared less than it must
    "make_logits_off_at_one_offset": [(ROUNDS, "verify_logits"), (STATEFUL, "verify_logits")],
    "make_divergence_without_near_tie": [(ROUNDS, ""), (GENERATION, "")],
    "make_skips_one_kv_write": [(ROUNDS, "kv_writes"), (STATEFUL, "kv_writes")],
    "make_top_k_drops_ties": [(FILTERS, "filtered probability 0, the spec gives")],
    "make_residual_unnormalised": [(RESIDUAL_SUM, "not 1")],
    "make_stop_kv_not_rolled_back": [(STOPS, "KV frontiers")],
    "make_mask_verify_only": [(ROUNDS, "vs reference")],
    "make_penalty_ignores_drafts": [  # ROUNDS: the wrong draft token, or the RNG draws it reorders
        (ROUNDS, "draft token|vs reference block"),
        (PLAIN, "plain decoding"),
        (FORCED_DRAFTS, "drafts forced to the plain decode"),
        # STATEFUL: the wrongly penalised draft shows as a draft token, or through the acceptance
        # decided from its probabilities (in BF16), or the RNG purposes that decision changes; which
        # comes first depends on the example drawn
        (STATEFUL, "draft token|acceptance of the draft|rng_events"),
    ],
    "make_penalty_verify_only": [(ROUNDS, "vs reference block"), (GENERATION, "vs reference block"), (STATEFUL, "")],
    "make_min_tokens_counts_round_drafts": [
        (PLAIN, "plain decoding"),
        (FORCED_DRAFTS, "drafts forced to the plain decode"),
    ],
    "make_bad_words_ignore_drafts": [(PLAIN, "plain decoding"), (FORCED_DRAFTS, "drafts forced to the plain decode")],
    "make_no_repeat_ngram_ignores_drafts": [(PLAIN_NGRAM, "plain decoding")],
}
PROCESSOR_FAULTS = (
    "make_penalty_ignores_drafts",
    "make_penalty_verify_only",
    "make_min_tokens_counts_round_drafts",
    "make_bad_words_ignore_drafts",
)
PRECISIONS = ("fp32", "bf16")  # bf16: the same backend in emulated BF16, declared inexact
# In reduced precision the golden RNG-order test judges each request's draws only up to its
# first divergence (a near-tie flip changes the later ones), so a fault that shows in the
# logits rather than in the draws is left to the properties that compare logits (ROUNDS,
# SCHEDULE, CACHE_FREE, STATEFUL catch draft_head_late in BF16 too).
BF16_SKIP = {("make_draft_head_late", GOLDEN_FIXED_LOOP)} | {(f, FORCED_DRAFTS) for f in PROCESSOR_FAULTS}

CASES = [(f, prop, why) for f, props in EXPECTED.items() for prop, why in props]


def _id(prop: str) -> str:
    mod, _, rest = prop.partition("::")
    return rest.replace("test_", "", 1)


def backend(factory: str, precision: str):
    bk = getattr(faulty, factory)()
    return as_bf16(bk) if precision == "bf16" else bk


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("factory,prop,why", CASES, ids=[f"{f.removeprefix('make_')}-{_id(p)}" for f, p, _ in CASES])
def test_fault_is_caught(factory, prop, why, precision):
    if precision == "bf16" and (factory, prop) in BF16_SKIP:
        pytest.skip("golden RNG order, or drafts forced on an inexact backend, in reduced precision: see BF16_SKIP")
    o = check(backend(factory, precision), f"meta_tests.faulty:{factory}", prop)
    RESULTS.append((f"{factory} [{precision}]", prop, o))
    assert o.caught, f"fault {factory} was NOT caught by {prop} ({o.message})"
    assert any(w in o.message for w in why.split("|")), (
        f"fault {factory} made {prop} fail, but not for the expected reason ({why!r}): {o.message}"
    )


def test_every_fault_has_catchers():
    assert set(EXPECTED) == set(faulty.FAULTS) - {"make_biased_sampler"}  # biased: test_power.py


CORRECT = [ROUNDS, CACHE_FREE, GENERATION, ALONE, RNG, FORCED, GOLDEN_SEQ, STATEFUL, PLAIN, NO_UNIFORMS]
# correct backends the excuses must not fail: FP32 with 1e-7 batch-variant noise, the reference
# declaring exact=False, and the reference in emulated BF16 (as_bf16 declares it inexact, so
# make_exact_false in BF16 would be the same backend under another name)
CORRECT_BACKENDS = [
    ("make_noisy_fp32", "fp32"),
    ("make_exact_false", "fp32"),
    ("make_no_fault", "bf16"),
]


# The false-alarm runs take half of each property's example budget (a profile setting: 160 s of the
# reference suite's test time at the full budget on 2 cores, 2026-12-04). The rates these runs sample
# are measured at scale elsewhere: the FP32 row over 2000 drawn models and the BF16 row's false alarms
# (`scripts/bf16_false_alarm_rate.py`, oracle/tolerances.py, docs/results.md); correct inexact backends
# run through every property in `make test`'s torch-cpu and torch-cpu-bf16 runs (a quarter of the budget;
# all of it in `make test-backends-full`).
FALSE_ALARM_SCALE = 0.5


@pytest.mark.parametrize("factory,precision", CORRECT_BACKENDS, ids=[f"{f[5:]}-{p}" for f, p in CORRECT_BACKENDS])
@pytest.mark.parametrize("prop", CORRECT, ids=[_id(p) for p in CORRECT])
def test_correct_inexact_backend_passes(prop, factory, precision):
    o = check(backend(factory, precision), f"meta_tests.faulty:{factory}", prop, FALSE_ALARM_SCALE)
    assert not o.caught, f"false alarm: correct backend {factory} [{precision}] fails {prop}: {o.message}"


# ---- the processor faults fail the `check --backend` verdict (oracle.judge.plans.cases.judge_cases) ----


def processor_cases(vocab: int = 64) -> list:
    """The issue's processor flags (--repetition-penalty 1.3 --presence-penalty 0.5
    --frequency-penalty 0.2 --logit-bias 5:2.0,9:-1.5 --bad-words 3,4/7 --min-tokens 4) with stop
    tokens 24,49,13 (min_tokens masks only stop tokens), greedy and sampled requests, d=2 D=4,
    four rounds of K up to 8, under both RNG policies: what `check --backend` runs once the
    flags exist."""
    from oracle.judge.scenario import make_case
    from oracle.sampling_params import SamplingParams as SP

    proc = dict(
        repetition_penalty=1.3,
        presence_penalty=0.5,
        frequency_penalty=0.2,
        logit_bias={5: 2.0, 9: -1.5},
        bad_words=[(3, 4), (7,)],
        min_tokens=4,
        stop_token_ids=(24, 49, 13),
    )
    params = [SP(seed=1, **proc), SP(1.0, seed=2, **proc), SP(0.7, top_k=20, seed=3, **proc), SP(seed=4, **proc)]
    rounds = [{0: 5, 1: 6, 2: 3, 3: 9}, {0: 7, 1: 4, 2: 8, 3: 2}, {0: 3, 1: 9, 2: 5, 3: 6}, {0: 9, 1: 2, 2: 6, 3: 5}]
    return [
        make_case(f"processors, policy {policy}", rounds, 2, 4, params, seed=7, policy=policy, vocab=vocab)
        for policy in ("sequential", "fixed")
    ]


def _verdict(factory: str, precision: str) -> dict:
    from oracle.judge.plans.plan import backend_plan
    from oracle.judge.plans.verdict import judge
    from oracle.checkpoint import build_model

    return judge(
        backend_plan(
            backend(factory, precision),
            build_model("tiny", 0),
            processor_cases(),
            suffix=f" --backend meta_tests.faulty:{factory}",
            probe="off",
        )
    ).to_json()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("factory", PROCESSOR_FAULTS, ids=[f.removeprefix("make_") for f in PROCESSOR_FAULTS])
def test_processor_fault_fails_the_check_verdict(factory, precision):
    v = _verdict(factory, precision)
    bad = [c for c in v["checks"] if not c["ok"]]
    assert not v["ok"] and bad, f"fault {factory} [{precision}] passed the processor cases"
    assert any(w in bad[0]["name"] for w in ("tokens", "decisions", "rng_events")), bad[0]


@pytest.mark.parametrize("factory,precision", CORRECT_BACKENDS, ids=[f"{f[5:]}-{p}" for f, p in CORRECT_BACKENDS])
def test_correct_backends_pass_the_processor_cases(factory, precision):
    v = _verdict(factory, precision)
    bad = [c for c in v["checks"] if not c["ok"]]
    assert v["ok"], f"false alarm: correct backend {factory} [{precision}]: {bad[0] if bad else v}"
