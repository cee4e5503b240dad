"""Plug-in backends given as `module:factory` to `python -m oracle check --backend`: the
reference's own traces, declared as a BF16 engine, with or without one fault written into
the trace. tests/test_judge.py runs them through the CLI (exit codes, the place named).

    make_reference_as_bf16    the reference's traces, dtype "bfloat16", exact False: passes
    make_one_kv_write_scaled  ... with the KV write (first request, offset 0, depth 1, layer 0)
                              of every round scaled by 1.5: fails, naming that write
    make_zero_q_draft         ... with a sampled request's first draft replaced by a token its
                              own draft distribution gives q(x) = 0: a failed check, not an abort
    make_token_out_of_vocab   ... with an emitted token id = vocabulary size: a failed check
    make_extra_rng_event      ... with one more accept event than the policy draws
"""

from __future__ import annotations

import numpy as np

from oracle.reference_backend import ReferenceBackend, ReferenceSession
from oracle.rng_trace import RngEvent
from oracle.sampling import SamplingParams, filtered_probs


class _Session(ReferenceSession):
    def __init__(self, backend, *args):
        super().__init__(*args)
        self.backend = backend

    def step(self, counts):
        tr = super().step(counts)
        self.backend.mutate(tr)
        return tr


class ReferenceAsBF16(ReferenceBackend):
    name, dtype, exact, host_rng = "reference-as-bf16", "bfloat16", False, True

    def session(self, model, d, D, mode, policy="sequential"):
        return _Session(self, model, d, D, mode, policy)

    def mutate(self, tr) -> None:
        pass


class OneKVWriteScaled(ReferenceAsBF16):
    name = "one-kv-write-scaled"

    def mutate(self, tr):
        rid = tr.requests[0]
        key = (rid, len(tr.prefix[rid]) - 1, 1, 0)
        call, k, v = tr.kv_writes[key]
        tr.kv_writes[key] = (call, k * np.float32(1.5), v * np.float32(1.5))


class ZeroQDraft(ReferenceAsBF16):
    name = "zero-q-draft"

    def mutate(self, tr):
        for rid, T in zip(tr.requests, tr.token_counts):
            params = SamplingParams(**tr.params[rid])
            if params.greedy or T < 2:
                continue
            q = filtered_probs(tr.draft_logits[(rid, 0)], params)
            if (q == 0).any():
                tr.drafts[rid] = [int(np.flatnonzero(q == 0)[0])] + list(tr.drafts[rid][1:])
                return


class TokenOutOfVocab(ReferenceAsBF16):
    name = "token-out-of-vocab"

    def mutate(self, tr):
        rid = tr.requests[-1]
        V = len(tr.verify_logits[(rid, 0)])
        tr.emitted[rid] = list(tr.emitted[rid][:-1]) + [V]


class ExtraRngEvent(ReferenceAsBF16):
    name = "extra-rng-event"

    def mutate(self, tr):
        if tr.rng_events:
            e = tr.rng_events[-1]
            tr.rng_events.append(RngEvent(e.request, e.round, e.seq + 1, "accept", 0, 0.5))


def make_reference_as_bf16():
    return ReferenceAsBF16()


def make_one_kv_write_scaled():
    return OneKVWriteScaled()


def make_zero_q_draft():
    return ZeroQDraft()


def make_token_out_of_vocab():
    return TokenOutOfVocab()


def make_extra_rng_event():
    return ExtraRngEvent()
