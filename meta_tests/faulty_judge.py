"""A judge (`--reference`) with one realistic decision bug, for the rule that a reference decision
contradicting its own rule is never excused (oracle/judge/comparison/decisions.py contradicted_decision):

    make_loose_argmax_judge   the FP32 reference whose greedy argmax treats every token within
                              10% of the top probability as tied and takes the highest id of
                              them (an approximate tie rule): its choice is then not what its own
                              rule picks from its own logits

A correct inexact backend judged by it diverges exactly where the judge's choice was the
runner-up, i.e. at a reference margin below zero, which the near-tie rule alone would excuse:

    python -m oracle check --backend meta_tests.faulty:make_exact_false \
        --reference meta_tests.faulty_judge:make_loose_argmax_judge --no-drift
"""

from __future__ import annotations

import numpy as np

from oracle import sampling
from oracle.sampling_params import CHAIN

from .faulty import FaultyBackend, sampling_with

LOOSE = 0.9  # tokens with p >= LOOSE * max p count as tied


def _loose_greedy_token(logits, params=None, seen=None, chain=CHAIN) -> int:
    x = np.asarray(sampling.processed_logits(logits, params, seen, chain) if params is not None else logits, np.float64)
    p = np.exp(x - np.max(x))
    return int(np.flatnonzero(p >= LOOSE * p.max())[-1])  # BUG: the highest id of a near tie


class LooseArgmaxJudge(FaultyBackend):
    fault = "loose_argmax_judge"
    sampling = sampling_with(greedy_token=_loose_greedy_token)


def make_loose_argmax_judge():
    return LooseArgmaxJudge()
