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

and plug-ins whose process dies, or that raise, which tests/test_plugin_isolation.py runs through the
CLI (oracle/runtime/isolated.py: each is a failed `backend` check, exit 1, never the oracle's end). The
factories that kill their process are named dies_*, not make_*: what loads every make_* in its own
process (tests/test_contract.py) would die with them.

    dies_segfault_in_step     step() reads address 0 (SIGSEGV)
    dies_abort_in_step        step() calls os.abort() (SIGABRT)
    dies_exit_in_step         step() calls os._exit(3)
    dies_segfault_in_session  session() reads address 0 (SIGSEGV)
    make_raises_in_step       step() raises PluginFault, a class of this module
"""

from __future__ import annotations

import numpy as np

from oracle.reference_backend import ReferenceBackend, ReferenceSession
from oracle.rng_trace import RngEvent
from oracle.sampling import filtered_probs
from oracle.sampling_params import SamplingParams


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


# ---- plug-ins that kill their process (oracle/runtime/isolated.py: a failed check, not the oracle's end) ----


def _segfault() -> None:
    import ctypes

    ctypes.string_at(0)  # reads address 0: SIGSEGV


def _abort() -> None:
    import os

    os.abort()  # SIGABRT


def _exit3() -> None:
    import os

    os._exit(3)  # no cleanup, no exception: the process ends with exit code 3


class _DiesInStep(ReferenceAsBF16):
    """The reference's traces until step(), which kills the process."""

    name = "dies-in-step"

    def __init__(self, death):
        self.death = death

    def mutate(self, tr):
        self.death()


class _DiesInSession(ReferenceAsBF16):
    name = "dies-in-session"

    def __init__(self, death):
        self.death = death

    def session(self, model, d, D, mode, policy="sequential"):
        self.death()


class _RaisesInStep(ReferenceAsBF16):
    name = "raises-in-step"

    def mutate(self, tr):
        raise PluginFault(f"round {tr.round}: the engine's step failed")


class PluginFault(RuntimeError):
    """An exception class of the plug-in's own (the oracle does not import it)."""


def dies_segfault_in_step():
    """step() reads address 0: SIGSEGV."""
    return _DiesInStep(_segfault)


def dies_abort_in_step():
    """step() calls os.abort(): SIGABRT."""
    return _DiesInStep(_abort)


def dies_exit_in_step():
    """step() calls os._exit(3)."""
    return _DiesInStep(_exit3)


def dies_segfault_in_session():
    """session() reads address 0: SIGSEGV before any round."""
    return _DiesInSession(_segfault)


def make_raises_in_step():
    """step() raises PluginFault (a class of this module): reported with its name and text."""
    return _RaisesInStep()
