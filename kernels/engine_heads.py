"""The graph-capturable steps of a round that run the layer stack and the heads: `call_step`
(one recurrent call) and the draft and verification heads (`draft_step`, `verify_step`) with
the processors their logits go through (`_processed`). A mixin of kernels/engine.py's Engine,
on its buffers (that module's docstring)."""

from __future__ import annotations

import torch

from oracle.rng_trace import draft_index

from . import sampler
from .options import PENALTY_ROWS
from .rows import FILTER_ROWS, STEP_ROWS


class HeadSteps:
    """Engine's call and head steps (kernels/engine.py): they read one metadata vector and
    write only the engine's buffers, so each can be a CUDA graph."""

    def call_step(self, meta: torch.Tensor, M: int, G: int, Qm: int, span: int | None = None) -> None:
        """span: every row's position < span (PackedModel.recurrent_call); None: the capacity."""
        flat, slot, off, plane, qidx = meta[: 5 * M].view(5, M)
        gplane = meta[5 * M :]
        pos = self.start.index_select(0, slot) + off  # [M]
        emb = self.model.embed(self.tok.view(-1).index_select(0, flat))  # depth-0 rows
        h = torch.where((plane < self.kv.n_slots)[:, None], emb, self.hid.index_select(0, flat))
        self.hid.index_copy_(0, flat, self.model.recurrent_call(h, pos, plane, qidx, gplane, Qm, span))
        if self.tap is not None:
            self.tap.follow(flat, plane, pos, self.kv.n_slots)

    def _probs(self, logits, slot, sampling: str):
        if sampling == "plain":
            return sampler.plain_probs(logits, self.temp.index_select(0, slot))
        return sampler.filtered_probs(logits, {k: getattr(self, k).index_select(0, slot) for k in FILTER_ROWS})

    def _uniform(self, slot, index):
        # uniform at stream index cursor + index of each slot, from its window
        idx = (self.cursor.index_select(0, slot) - self.ubase.index_select(0, slot) + index).clamp(0, self.Wcap - 1)
        return self.ubuf.view(-1).index_select(0, slot * self.Wcap + idx)

    def _proc_rows(self, slot, off, steps) -> dict:
        """The processors' inputs of rows (slot, offset o): the slot's state plus the round's
        drafts 1..o (tok[slot, 1..o]; the module docstring)."""
        r, T = {}, self.Tcap
        if "bad_words" in steps or "min_tokens" in steps:
            r["nvalid"] = self.gen.index_select(0, slot) + off  # tokens generated before o
        drafts = self.tok.index_select(0, slot)[:, 1:]  # [N, T-1]; 1..o drawn
        for name in steps:  # the steps' own rows
            for k in STEP_ROWS[name]:
                r[k] = getattr(self, k).index_select(0, slot)
        if "bad_words" in steps:
            L = self.tail.shape[1]
            seq = torch.cat([self.tail.index_select(0, slot), drafts], 1)  # tail ++ drafts
            r["ctx"] = seq.gather(1, off[:, None] + torch.arange(L, device=off.device)[None, :])
        if "no_repeat_ngram" in steps:  # history ++ drafts 1..o
            H, hl = self.hist.shape[1], self.plen.index_select(0, slot) + self.gen.index_select(0, slot)
            j = torch.arange(H + T - 1, device=off.device)[None, :]
            idx = torch.where(j < hl[:, None], j, H + (j - hl[:, None]).clamp(0, T - 2))
            r["seq"] = torch.cat([self.hist.index_select(0, slot), drafts], 1).gather(1, idx)
            r["seqlen"] = hl + off
        if "penalties" in steps:
            before = (torch.arange(T - 1, device=off.device)[None, :] < off[:, None]).float()  # drafts 1..o
            r["counts"] = self.counts.index_select(0, slot).scatter_add_(1, drafts, before)
            r["prompt"] = self.prompt.index_select(0, slot)
        return r

    def _processed(self, raw, slot, off, steps, rows: str = "verify"):
        """(processed logits, bad rows) of raw logits [N, V] at rows (slot, off); rows: "draft" | "verify"."""
        ban = self.ban.index_select(0, slot)
        skip = self.skip[1] if self.skip is not None and self.skip[0] == rows else None
        if skip is not None:  # a deliberate fault (KernelOptions.fault "skip_ROWS.STEP")
            ban = torch.zeros_like(ban) if skip == "mask" else ban
            steps = tuple(n for n in steps if n != skip)
        if not steps:
            logits = sampler.mask(raw, ban)  # banned: -inf
            return logits, sampler.nonfinite(raw, logits)
        r = self._proc_rows(slot, off, steps)
        if skip in PENALTY_ROWS and "penalties" in steps:
            name, identity = PENALTY_ROWS[skip]
            r[name] = torch.full_like(r[name], identity)
        logits = sampler.processed(raw, ban, r, steps)
        return logits, sampler.nonfinite(raw, logits, processed=True)

    def draft_step(self, meta: torch.Tensor, Mh: int, sampling: str, steps: tuple = ()) -> None:
        """sampling: round_buffer.SAMPLING; "greedy" leaves q unwritten (no request of the round reads it).
        steps: the processor steps of the round (RoundPlan.processors)."""
        flat, slot, off = meta.view(3, Mh)
        raw = self.model.head(self.hid.index_select(0, flat))  # [Mh, V]
        if self.tap is not None:
            self.tap.head(flat, raw)
        self.dlog.index_copy_(0, flat, raw)  # traced unmasked
        logits, bad = self._processed(raw, slot, off, steps, "draft")
        self.dbad.index_copy_(0, flat, bad)
        if sampling == "greedy":
            self.tok.view(-1).index_copy_(0, flat + 1, sampler.greedy(logits))
            return
        q = self._probs(logits, slot, sampling)
        drawn = sampler.categorical(q, self._uniform(slot, draft_index(off)))  # draft uniform of offset o
        tok = torch.where(self.greedy.index_select(0, slot), sampler.greedy(logits), drawn)
        self.q.index_copy_(0, flat, q)
        self.tok.view(-1).index_copy_(0, flat + 1, tok)  # offset o+1's token

    def verify_step(self, meta: torch.Tensor, N: int, sampling: str, steps: tuple = ()) -> None:
        flat, slot = meta.view(2, N)
        raw = self.model.head(self.hid.index_select(0, flat))  # [N, V]
        if self.tap is not None:
            self.tap.head(flat, raw)
        self.vlog.index_copy_(0, flat, raw)  # traced unmasked
        logits, bad = self._processed(raw, slot, flat - slot * self.Tcap, steps)  # offset o = flat - slot*T
        self.vbad.index_copy_(0, flat, bad)
        self.gtok.index_copy_(0, flat, sampler.greedy(logits))
        if sampling != "greedy":  # p: sampled rows only
            self.p.index_copy_(0, flat, self._probs(logits, slot, sampling))
