"""oracle.rng_trace.round_layout: the one statement of the RNG layout (docs/DESIGN.md
section 6), spelled out here by hand, and its index helpers on ints and tensors."""

import pytest

from oracle.errors import OracleError
from oracle.rng_trace import Draw, draws_used, final_index, max_draws, round_layout


def test_sequential_rejection():
    assert round_layout("sequential", 3, 1) == [
        Draw("draft", 0, 0),
        Draw("draft", 1, 1),
        Draw("draft", 2, 2),
        Draw("accept", 0, 3),
        Draw("accept", 1, 4),
        Draw("residual", 1, 5),
    ]


def test_sequential_full_acceptance():
    assert round_layout("sequential", 2, 2) == [
        Draw("draft", 0, 0),
        Draw("draft", 1, 1),
        Draw("accept", 0, 2),
        Draw("accept", 1, 3),
        Draw("bonus", 2, 4),
    ]


def test_fixed_rejection_marks_later_accepts_unused():
    assert round_layout("fixed", 3, 0) == [
        Draw("draft", 0, 0),
        Draw("draft", 1, 1),
        Draw("draft", 2, 2),
        Draw("accept", 0, 3),
        Draw("accept", 1, 4, False),
        Draw("accept", 2, 5, False),
        Draw("residual", 0, 6),
    ]


def test_no_drafts():
    for policy in ("sequential", "fixed"):
        assert round_layout(policy, 0, 0) == [Draw("bonus", 0, 0)]


@pytest.mark.parametrize("policy", ["sequential", "fixed"])
def test_helpers_agree_with_the_layout(policy):
    torch = pytest.importorskip("torch")
    for K in range(6):
        for a in range(K + 1):
            lay = round_layout(policy, K, a)
            assert lay[-1].index == final_index(policy, K, a) and len(lay) == draws_used(policy, K, a) <= max_draws(K)
            assert [d.index for d in lay] == list(range(len(lay)))
            t = lambda x: torch.tensor([x])
            assert int(final_index(policy, t(K), t(a), torch.minimum)) == final_index(policy, K, a)
        assert max(draws_used(policy, K, a) for a in range(K + 1)) == max_draws(K)


def test_unknown_policy():
    with pytest.raises(OracleError, match="unknown RNG policy"):
        round_layout("lazy", 2, 0)
