"""Print the full fault x property matrix (which property catches which fault, and how).

    HYPOTHESIS_PROFILE=ci python -m meta_tests.matrix [fault ...]

meta_tests/test_faults.py asserts the catches that matter; this is the wider survey.
"""

from __future__ import annotations

import sys

from hypothesis import settings

from meta_tests import faulty
from meta_tests.catch import check

PROPERTIES = [
    "test_round_props::test_block_and_loop_rounds_agree",
    "test_round_props::test_rounds_follow_their_schedule",
    "test_round_props::test_logits_match_cache_free_recompute",
    "test_round_props::test_rollback_leaves_exactly_the_committed_kv",
    "test_generation_props::test_block_and_loop_generation_agree",
    "test_generation_props::test_rollback_after_every_acceptance_count[kind=sampled,a=3,policy=sequential]",
    "test_generation_props::test_seeded_request_same_alone_and_in_batch",
    "test_rng_props::test_rng_events_follow_policy",
    "test_distribution::test_output_distribution_is_the_target",
    "test_distribution::test_enumeration_through_the_sampler_converges",
    "test_distribution::test_filters_follow_the_spec",
    "test_distribution::test_emitted_tokens_follow_the_target[config_id=t1.3-topp0.85-K1]",
    "test_distribution::test_emitted_tokens_follow_the_target[config_id=t0.7-topk6-K2]",
    "test_golden::test_rng_order_matches_golden[name=sequential_mixed_d2_D4,mode=block]",
    "test_golden::test_rng_order_matches_golden[name=fixed_mixed_d2_D4,mode=loop]",
    "test_stateful::RoundLifecycle",
    "test_processor_props::test_greedy_speculative_decoding_is_plain_decoding",
    "test_processor_props::test_forced_drafts_follow_the_plain_decode",
    "test_processor_props::test_processors_draw_no_uniforms",
]


def main(argv):
    import property_tests.conftest  # noqa: F401  (profiles)

    settings.load_profile(settings.get_current_profile_name())
    faults = argv or list(faulty.FAULTS) + ["make_noisy_fp32"]
    for f in faults:
        bk = getattr(faulty, f)()
        print(f"== {f}", flush=True)
        for prop in PROPERTIES:
            o = check(bk, f"meta_tests.faulty:{f}", prop)
            print(
                f"  {'CAUGHT' if o.caught else 'missed'} {o.seconds:6.1f}s {prop}\n      {o.message[:220]}", flush=True
            )


if __name__ == "__main__":
    main(sys.argv[1:])
