"""Deliberately faulty backends: the reference with one realistic bug each.

Each is importable as ORACLE_BACKEND=meta_tests.faulty:make_<fault>, e.g.

    HYPOTHESIS_PROFILE=ci ORACLE_BACKEND=meta_tests.faulty:make_bonus_after_rejection \
        python -m pytest -q property_tests

fails (meta_tests/test_faults.py asserts which properties catch which fault).

    make_accept_before_last_draft   sampled requests draw their K accept uniforms before the
                                    last draft token (the values land in the wrong events)
    make_draft_head_late            loop round: the draft head of a wave runs after the next
                                    wave, whose depth-0 row embeds a stale token
    make_kv_wrong_plane             mixed-depth waves write every row's K/V to the plane of the
                                    request's first row in the call (one plane per request/call)
    make_rollback_off_by_one        rollback keeps one position too many (start + a + 2)
    make_top_p_no_shift             top-p drops a token once the mass *including* it exceeds p
                                    (no shift: the crossing token is lost; a top token of
                                    mass > p empties the distribution)
    make_residual_no_clamp          the residual is p - q without max(0, .)
    make_bonus_after_rejection      sequential policy: a bonus uniform is drawn after a rejection
    make_top_k_drops_ties           top-k keeps exactly k tokens (the lower ids of a tie at the
                                    threshold), not every token tied with the k-th
    make_residual_unnormalised      the residual is max(0, p - q) without the division by its
                                    sum (draws still look right: they rescale by the cdf's end)
    make_stop_kv_not_rolled_back    after a stop token (or max_tokens) the tokens are cut but
                                    the KV keeps every emitted token's position (start + a + 1)
    make_mask_verify_only           banned/allowed masks applied to the verification logits
                                    only: drafts come from the unmasked draft logits
    make_penalty_ignores_drafts     repetition/presence/frequency penalties computed on the
                                    committed tokens only (seen.output without this round's drafts)
    make_penalty_verify_only        penalties applied to the verification logits only: drafts
                                    come from unpenalised draft logits
    make_min_tokens_counts_round_drafts  min_tokens counts every draft of the round as generated
                                    (len(output) - drafts + round_drafts): stop tokens unmasked early
    make_bad_words_ignore_drafts    bad-word prefixes matched against the committed output only
    make_no_repeat_ngram_ignores_drafts  n-grams matched against the prompt and the committed
                                    output only (this round's drafts not in the sequence)
    make_biased_sampler             the filtered distribution is moved by 2% total variation
                                    (property_tests.test_distribution.biased)
    make_logits_off_at_one_offset   verification logits of offset 1 off by 25% (self-consistent)
    make_divergence_without_near_tie  greedy final token = the least likely one
    make_skips_one_kv_write         one KV write of a batch's last request missing from the trace
    make_exact_false, make_no_fault NOT faults: the reference declaring exact=False, and the
                                    reference through the hooks (correct in BF16 via as_bf16)
    make_noisy_fp32                 NOT a fault: a correct inexact FP32 backend (batch-variant
                                    1e-7 noise on hidden states, device-RNG semantics): the
                                    suite must pass it (no false alarms on the tolerance path)
"""

from __future__ import annotations

import dataclasses
import functools
import types

import numpy as np

from oracle import phases, processors, sampling
from oracle.reference_backend import ReferenceBackend, ReferenceSession
from oracle.kv import KVCache, KVWrite
from oracle.phases import PHASES, Phases
from oracle.session import get_round
from oracle.sampling_params import CHAIN


class DenseKV(KVCache):
    """KV planes as an engine's preallocated buffers: a write lands at any position, reads
    of positions never written return zeros, rollback just moves the frontier. Wrong-plane
    writes are silent here, as on a GPU (only the properties can notice)."""

    def read(self, request, depth, layer, upto):
        p = self._plane(request, depth, layer, create=True)
        k = np.zeros((upto + 1, self.nkv, self.hd), np.float32)
        v = np.zeros_like(k)
        n = min(p.n, upto + 1)
        k[:n], v[:n] = p.k[:n], p.v[:n]
        return k, v

    def write(self, request, position, depth, layer, k, v, call):
        p = self._plane(request, depth, layer, create=True)
        while p.n < position:
            p.append(np.zeros_like(k), np.zeros_like(v))
        if position < p.n:
            p.k[position], p.v[position] = k, v
        else:
            p.append(k, v)
        self.log.append(
            KVWrite(request, position, depth, layer, call, np.array(k, np.float32), np.array(v, np.float32))
        )

    def truncate(self, request, frontier):
        for (r, j, l), p in self.planes.items():
            if r == request:
                while p.n < frontier:
                    p.append(np.zeros((self.nkv, self.hd), np.float32), np.zeros((self.nkv, self.hd), np.float32))
                p.n = frontier


class FaultySession(ReferenceSession):
    """A reference session whose rounds run with the backend's hooks and patches."""

    def __init__(self, model, d, D, mode, policy, backend):
        super().__init__(model, d, D, mode, policy)
        self.backend = backend
        if backend.dense_kv:
            cfg = model.cfg
            self.kv = DenseKV(cfg.num_layers, D, cfg.num_kv_heads, cfg.head_dim)


class FaultyBackend(ReferenceBackend):
    """The reference, with hooks a fault overrides. Defaults are the reference's phases; the
    rounds (oracle.reference_round, oracle.loop_round) run them through their `phases`
    argument, so no round is copied and no module is patched."""

    fault = "none"
    exact = True
    dense_kv = False
    sampling = None  # a namespace like oracle.sampling (sampling_with), or None

    @property
    def name(self):
        return f"faulty:{self.fault}" + ("-bf16" if getattr(self, "precision", None) else "")

    def session(self, model, d, D, mode, policy="sequential"):
        s = FaultySession(model, d, D, mode, policy, self)
        s.round_fn = functools.partial(get_round(mode), phases=self.phases(mode))
        return s

    def phases(self, mode: str) -> Phases:
        """The phases a round of `mode` runs: the hooks below."""
        return dataclasses.replace(
            PHASES,
            run_call=self.run_call,
            draft_head=self.draft_head,
            verify_head=self.verify_head,
            accept=self.accept,
            finish_round=self.finish_round,
            sampling=self.sampling or PHASES.sampling,
        )

    # -- hooks --
    def run_call(self, st, rows):
        phases.run_call(st, rows)

    def draft_head(self, st, heads):
        phases.draft_head(st, heads)

    def verify_head(self, st):
        return phases.verify_head(st)

    def accept(self, st, i, logits):
        return phases.accept(st, i, logits)

    def finish_round(self, st, logits):
        return phases.finish_round(st, logits)


def sampling_with(**overrides):
    """A namespace like oracle.sampling with some functions replaced."""
    ns = types.SimpleNamespace(**{k: getattr(sampling, k) for k in dir(sampling) if not k.startswith("__")})
    for k, v in overrides.items():
        setattr(ns, k, v)
    return ns


def sampling_with_steps(**steps):
    """oracle.sampling with steps of its chain replaced (oracle.step.Chain.replace): the faulty
    samplers take the chain's order and every other step from oracle.sampling."""
    chain = CHAIN.replace(**steps)
    return sampling_with(
        filtered_probs=functools.partial(sampling.filtered_probs, chain=chain),
        greedy_token=functools.partial(sampling.greedy_token, chain=chain),
        processed_logits=functools.partial(sampling.processed_logits, chain=chain),
    )


# ---- the faults ---------------------------------------------------------------------------


class AcceptBeforeLastDraft(FaultyBackend):
    fault = "accept_before_last_draft"

    def draft_head(self, st, heads):
        st.pre_accept = getattr(st, "pre_accept", {})
        for i, o in heads:
            req, K = st.requests[i], st.counts[i] - 1
            if not req.params.greedy and o + 1 == K:  # about to draw the last draft
                st.pre_accept[i] = [req.rng.uniform() for _ in range(K)]
        phases.draft_head(st, heads)

    def accept(self, st, i, logits):
        queue = list(getattr(st, "pre_accept", {}).get(i, []))
        rng = st.requests[i].rng
        if not queue:
            return phases.accept(st, i, logits)
        recorded = []  # phases.accept records the accept events before it draws the final
        rng.uniform = lambda _u=rng.uniform: queue.pop(0) if queue and not recorded else _u()
        rng.record = lambda *a, _r=rng.record, **k: recorded.append(1) or _r(*a, **k)
        try:
            return phases.accept(st, i, logits)  # accept uniforms from the queue, the final from the stream
        finally:
            rng.__dict__.pop("uniform", None)
            rng.__dict__.pop("record", None)


class DraftHeadLate(FaultyBackend):
    fault = "draft_head_late"

    def phases(self, mode):
        ph = super().phases(mode)
        if mode != "loop":
            return ph
        return dataclasses.replace(
            ph,
            run_call=self._run_call_stale,
            draft_head=self._head_one_wave_late,
            verify_head=self._verify_after_last_head,
        )

    def _run_call_stale(self, st, rows):
        stale = []
        for i, o, j in rows:  # token not drawn yet: embed a stale one
            if j == 0 and o >= len(st.tokens[i]):
                st.tokens[i].append(st.tokens[i][-1])
                stale.append(i)
        self.run_call(st, list(rows))
        for i in stale:
            st.tokens[i].pop()

    def _head_one_wave_late(self, st, heads):
        self._late_head(st, *getattr(st, "late", ([], {})))  # BUG: the previous wave's heads, now
        st.late = (list(heads), {h: st.hidden[h] for h in heads})  # the depth d-1 states, kept in a buffer

    def _verify_after_last_head(self, st):
        self._late_head(st, *getattr(st, "late", ([], {})))
        return self.verify_head(st)

    def _late_head(self, st, heads, saved):
        now = {h: st.hidden[h] for h in heads}
        st.hidden.update(saved)
        try:
            self.draft_head(st, heads)
        finally:
            st.hidden.update(now)


class _KVProxy:
    def __init__(self, kv, write_depth=None, truncate_extra=0):
        self._kv, self._write_depth, self._extra = kv, write_depth or {}, truncate_extra

    def __getattr__(self, name):
        return getattr(self._kv, name)

    def write(self, request, position, depth, layer, k, v, call):
        self._kv.write(request, position, self._write_depth.get(request, depth), layer, k, v, call)

    def truncate(self, request, frontier):
        if self._extra and frontier + self._extra <= self._kv.frontier(request):
            frontier += self._extra
        self._kv.truncate(request, frontier)


class KVWrongPlane(FaultyBackend):
    fault = "kv_wrong_plane"
    dense_kv = True

    def run_call(self, st, rows):
        first = {}
        for i, o, j in rows:
            first.setdefault(st.requests[i].rid, j)  # rows are sorted: lowest offset first
        kv, st.kv = st.kv, _KVProxy(st.kv, write_depth=first)
        try:
            phases.run_call(st, rows)
        finally:
            st.kv = kv


class RollbackOffByOne(FaultyBackend):
    fault = "rollback_off_by_one"

    def finish_round(self, st, logits):
        kv, st.kv = st.kv, _KVProxy(st.kv, truncate_extra=1)
        try:
            return phases.finish_round(st, logits)
        finally:
            st.kv = kv


def _top_p_no_shift(x, params):
    if params.top_p is None or params.top_p >= 1:
        return x
    p = sampling.softmax(x)
    order = np.argsort(-p, kind="stable")
    x = x.copy()
    x[order[np.cumsum(p[order]) > np.float32(params.top_p)]] = -np.inf  # BUG: no shift
    return x


def _nan_when_empty(filtered_probs):
    def probs(*args, **kw):
        with np.errstate(invalid="ignore"):  # all dropped: NaN, as the bug would give
            return filtered_probs(*args, **kw)

    return probs


class TopPNoShift(FaultyBackend):
    fault = "top_p_no_shift"
    sampling = sampling_with_steps(top_p=_top_p_no_shift)
    sampling.filtered_probs = _nan_when_empty(sampling.filtered_probs)


def _residual_no_clamp(p, q):
    r = np.asarray(p, np.float32) - np.asarray(q, np.float32)  # BUG: no max(0, .)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (r / np.float32(r[r > 0].sum())).astype(np.float32)


class ResidualNoClamp(FaultyBackend):
    fault = "residual_no_clamp"
    sampling = sampling_with(residual=_residual_no_clamp)


class BonusAfterRejection(FaultyBackend):
    fault = "bonus_after_rejection"

    def accept(self, st, i, logits):
        a, emitted = phases.accept(st, i, logits)
        req, K = st.requests[i], st.counts[i] - 1
        if st.policy == "sequential" and not req.params.greedy and a < K:
            req.rng.draw("bonus", K)  # BUG: drawn after the residual
        return a, emitted


def _top_k_drops_ties(x, params):
    """top-k by position in a stable sort: exactly k survive."""
    if params.top_k is None or params.top_k >= len(x):
        return x
    x = x.copy()
    x[np.argsort(-x, kind="stable")[params.top_k :]] = -np.inf  # BUG: ties split by id
    return x


class TopKDropsTies(FaultyBackend):
    fault = "top_k_drops_ties"
    sampling = sampling_with_steps(top_k=_top_k_drops_ties)


def _residual_unnormalised(p, q):
    return np.maximum(np.asarray(p, np.float32) - np.asarray(q, np.float32), np.float32(0))  # BUG: no 1/sum


class ResidualUnnormalised(FaultyBackend):
    fault = "residual_unnormalised"
    sampling = sampling_with(residual=_residual_unnormalised)


class _KeepEmittedKV:
    """KV whose rollback keeps every emitted token's position, ignoring the stop cut."""

    def __init__(self, st):
        self._st = st

    def __getattr__(self, name):
        return getattr(self.__dict__["_kv"], name)

    def truncate(self, request, frontier):
        st = self._st
        i = [r.rid for r in st.requests].index(request)
        self._kv.truncate(request, st.starts[i] + len(st.trace.emitted[request]))  # BUG: not the cut


class StopKVNotRolledBack(FaultyBackend):
    fault = "stop_kv_not_rolled_back"

    def finish_round(self, st, logits):
        proxy = _KeepEmittedKV(st)
        proxy._kv, st.kv = st.kv, proxy
        try:
            return phases.finish_round(st, logits)
        finally:
            st.kv = proxy._kv


class MaskVerifyOnly(FaultyBackend):
    fault = "mask_verify_only"

    def draft_head(self, st, heads):
        saved = [r.params for r in st.requests]
        for r in st.requests:  # BUG: drafts see unmasked logits
            r.params = dataclasses.replace(r.params, banned_token_ids=(), allowed_token_ids=None)
        try:
            phases.draft_head(st, heads)
        finally:
            for r, p in zip(st.requests, saved):
                r.params = p


def _committed(seen):
    """What the logits would see if this round's drafts were not there."""
    return dataclasses.replace(seen, output=seen.output[: len(seen.output) - seen.drafts], drafts=0)


def _penalties_ignore_drafts(x, params, seen):
    return processors.penalties(x, params, _committed(seen))  # BUG: drafts not counted


class PenaltyIgnoresDrafts(FaultyBackend):
    fault = "penalty_ignores_drafts"
    sampling = sampling_with_steps(penalties=_penalties_ignore_drafts)


class PenaltyVerifyOnly(FaultyBackend):
    fault = "penalty_verify_only"

    def draft_head(self, st, heads):
        saved = [r.params for r in st.requests]
        for r in st.requests:  # BUG: drafts see unpenalised logits
            r.params = dataclasses.replace(
                r.params, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0
            )
        try:
            phases.draft_head(st, heads)
        finally:
            for r, p in zip(st.requests, saved):
                r.params = p


def _min_tokens_counts_round_drafts(x, params, seen):
    generated = len(seen.output) - seen.drafts + seen.round_drafts  # BUG: all K drafts counted
    if generated < params.min_tokens and params.stop_token_ids:
        x[list(params.stop_token_ids)] = -np.inf
    return x


class MinTokensCountsRoundDrafts(FaultyBackend):
    fault = "min_tokens_counts_round_drafts"
    sampling = sampling_with_steps(min_tokens=_min_tokens_counts_round_drafts)


def _bad_words_ignore_drafts(x, params, seen):
    return processors.bad_words(x, params, _committed(seen))  # BUG: drafts not matched


class BadWordsIgnoreDrafts(FaultyBackend):
    fault = "bad_words_ignore_drafts"
    sampling = sampling_with_steps(bad_words=_bad_words_ignore_drafts)


def _no_repeat_ngram_ignores_drafts(x, params, seen):
    return processors.no_repeat_ngram(x, params, _committed(seen))  # BUG: drafts not in the n-grams


class NoRepeatNgramIgnoresDrafts(FaultyBackend):
    fault = "no_repeat_ngram_ignores_drafts"
    sampling = sampling_with_steps(no_repeat_ngram=_no_repeat_ngram_ignores_drafts)


def _biased_filtered_probs(logits, params, seen=None):
    from property_tests.test_distribution import biased

    return biased(sampling.filtered_probs(logits, params, seen)).astype(np.float32)


class BiasedSampler(FaultyBackend):
    fault = "biased_sampler"
    sampling = sampling_with(filtered_probs=_biased_filtered_probs)


class NoisyFP32(FaultyBackend):
    """Correct but inexact: hidden states get relative noise ~1e-7 that depends on the number
    of rows in the call (like a GEMM whose reduction order depends on M)."""

    fault = "none (noisy fp32)"
    exact, dtype = False, "float32"

    @property
    def name(self):
        return "noisy-fp32"

    def run_call(self, st, rows):
        phases.run_call(st, rows)
        rng = np.random.default_rng(len(rows))
        for i, o, j in rows:
            depth, h = st.hidden[(i, o)]
            noise = rng.standard_normal(h.shape).astype(np.float32)
            st.hidden[(i, o)] = (depth, (h * (1 + np.float32(1e-7) * noise)).astype(np.float32))


# ---- faults a reduced-precision judge could miss (meta_tests/precision.py runs all in BF16) ----


class LogitsOffAtOneOffset(FaultyBackend):
    """Verification logits of offset 1 scaled by 1.25 (25% relative error, above the BF16
    row's bound at any depth up to 6); decisions are made from them, so they explain themselves."""

    fault = "logits_off_at_one_offset"

    def verify_head(self, st):
        logits = phases.verify_head(st)
        for (i, o), lg in logits.items():
            if o == 1:
                logits[(i, o)] = st.trace.verify_logits[(st.requests[i].rid, o)] = lg * np.float32(1.25)
        return logits


class DivergenceWithoutNearTie(FaultyBackend):
    """Greedy requests emit their LEAST likely token as the final one: a token divergence
    where the reference had no near-tie."""

    fault = "divergence_without_near_tie"

    def accept(self, st, i, logits):
        a, emitted = phases.accept(st, i, logits)
        if st.requests[i].params.greedy:
            emitted = emitted[:-1] + [int(np.argmin(logits[(i, a)]))]
        return a, emitted


class SkipsOneKVWrite(FaultyBackend):
    """The last request of every batch of two or more loses one KV write (its last offset,
    depth 0, layer 0) from the trace, whatever happens to the other requests."""

    fault = "skips_one_kv_write"

    def finish_round(self, st, logits):
        tr = phases.finish_round(st, logits)
        if len(tr.requests) > 1:
            rid, T = tr.requests[-1], tr.token_counts[-1]
            tr.kv_writes.pop((rid, len(tr.prefix[rid]) - 1 + T - 1, 0, 0), None)
            tr.stats = dict(tr.stats, kv_writes=len(tr.kv_writes))
        return tr


class LoopOnlyWrongToken(DivergenceWithoutNearTie):
    """The loop round alone emits the least likely token as a greedy request's final one: a token bug
    of one mode (the block round is correct), which the report's divergence plot must show as such."""

    fault = "loop_only_wrong_token"

    def phases(self, mode: str) -> Phases:
        p = super().phases(mode)
        return p if mode == "loop" else dataclasses.replace(p, accept=phases.accept)


class _ScaledKV(_KVProxy):
    """KV whose K writes of one (depth, layer) are scaled: a wrong value, written where it belongs."""

    def __init__(self, kv, depth: int, layer: int, scale: float):
        super().__init__(kv)
        self._at, self._scale = (depth, layer), np.float32(scale)

    def write(self, request, position, depth, layer, k, v, call):
        k = k * self._scale if (depth, layer) == self._at else k
        self._kv.write(request, position, depth, layer, k, v, call)


class KVScaledOneLayer(FaultyBackend):
    """A float32 plug-in (exact = False) whose K writes at depth 1, layer 1 are 0.1% too large in both
    modes: a KV value bug inside the float32 row's tolerance nowhere but there (a report's heatmap)."""

    fault = "kv_scaled_one_layer"
    exact, dtype = False, "float32"

    def run_call(self, st, rows):
        kv, st.kv = st.kv, _ScaledKV(st.kv, 1, 1, 1.001)
        try:
            phases.run_call(st, rows)
        finally:
            st.kv = kv


class ExactFalse(FaultyBackend):
    """NOT a fault: the reference itself, declaring exact = False (float32 row)."""

    fault = "none (exact false)"
    exact, dtype = False, "float32"

    @property
    def name(self):
        return "reference-exact-false" + ("-bf16" if getattr(self, "precision", None) else "")


def make_logits_off_at_one_offset():
    return LogitsOffAtOneOffset()


def make_divergence_without_near_tie():
    return DivergenceWithoutNearTie()


def make_skips_one_kv_write():
    return SkipsOneKVWrite()


# the report's two pictured faults (tests/test_html_report.py, docs/report_*.png), not in FAULTS: the
# property suite's matrix catches their kinds already (divergence_without_near_tie, skips_one_kv_write)


def make_loop_only_wrong_token():
    return LoopOnlyWrongToken()


def make_kv_scaled_one_layer():
    return KVScaledOneLayer()


def make_exact_false():
    return ExactFalse()


def make_no_fault():
    """NOT a fault: the reference through the faulty-backend hooks (as_bf16 makes it the
    correct BF16 backend)."""
    return FaultyBackend()


def make_accept_before_last_draft():
    return AcceptBeforeLastDraft()


def make_draft_head_late():
    return DraftHeadLate()


def make_kv_wrong_plane():
    return KVWrongPlane()


def make_rollback_off_by_one():
    return RollbackOffByOne()


def make_top_p_no_shift():
    return TopPNoShift()


def make_residual_no_clamp():
    return ResidualNoClamp()


def make_bonus_after_rejection():
    return BonusAfterRejection()


def make_top_k_drops_ties():
    return TopKDropsTies()


def make_residual_unnormalised():
    return ResidualUnnormalised()


def make_stop_kv_not_rolled_back():
    return StopKVNotRolledBack()


def make_mask_verify_only():
    return MaskVerifyOnly()


def make_penalty_ignores_drafts():
    return PenaltyIgnoresDrafts()


def make_penalty_verify_only():
    return PenaltyVerifyOnly()


def make_min_tokens_counts_round_drafts():
    return MinTokensCountsRoundDrafts()


def make_bad_words_ignore_drafts():
    return BadWordsIgnoreDrafts()


def make_no_repeat_ngram_ignores_drafts():
    return NoRepeatNgramIgnoresDrafts()


def make_biased_sampler():
    return BiasedSampler()


def make_noisy_fp32():
    return NoisyFP32()


FAULTS = {  # factory name -> one-line description
    "make_accept_before_last_draft": "accept uniforms drawn before the last draft",
    "make_draft_head_late": "loop round: draft head one wave late (stale depth-0 token)",
    "make_kv_wrong_plane": "mixed-depth wave writes K/V to the wrong depth plane",
    "make_rollback_off_by_one": "rollback frontier off by one (keeps a rejected position)",
    "make_top_p_no_shift": "top-p without the shift (crossing/top token dropped)",
    "make_residual_no_clamp": "residual p - q without clamping at zero",
    "make_bonus_after_rejection": "bonus uniform drawn after a rejection",
    "make_top_k_drops_ties": "top-k keeps exactly k tokens, splitting ties at the threshold by id",
    "make_residual_unnormalised": "residual max(0, p - q) not divided by its sum",
    "make_stop_kv_not_rolled_back": "stop/max_tokens cut the tokens but not the KV frontier",
    "make_mask_verify_only": "banned/allowed masks applied to verification logits only",
    "make_penalty_ignores_drafts": "penalties computed on committed tokens only (drafts ignored)",
    "make_penalty_verify_only": "penalties applied to verification logits only, not to draft logits",
    "make_min_tokens_counts_round_drafts": "min_tokens counts all of the round's drafts as generated",
    "make_bad_words_ignore_drafts": "bad-word prefixes matched against committed output only",
    "make_no_repeat_ngram_ignores_drafts": "no_repeat_ngram matched against prompt and committed output only",
    "make_biased_sampler": "sampler biased by 2% total variation",
    "make_logits_off_at_one_offset": "verification logits of offset 1 off by 25%",
    "make_divergence_without_near_tie": "greedy final token replaced by the least likely one",
    "make_skips_one_kv_write": "one KV write of the last request missing from every batch's trace",
}
