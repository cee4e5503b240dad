"""The graph-capturable bookkeeping steps of a round: `begin_step` (offset-0 tokens and uniform
windows in) and `accept_step` (acceptance and commit on the device, `accept_commit`), whose
results are packed into one [R, F] int64 tensor so the host copies them back in one transfer
(RESULT_SCALARS, unpack_results). A mixin of kernels/engine.py's Engine, on its buffers."""

from __future__ import annotations

import torch

from oracle.rng_trace import accept_index, draws_used, final_index

from . import sampler


# accept_step's packed result: one int64 row per request. Scalars first, then the K drafts
# (T-1 columns), then the draft / verification logits flags (T columns each).
RESULT_SCALARS = ("a", "final", "used", "start", "n", "why", "residual_err")


def unpack_results(packed, T: int) -> dict:
    """packed: [R, len(RESULT_SCALARS) + 3T - 1] (torch or numpy) -> named column views."""
    s = len(RESULT_SCALARS)
    assert packed.shape[1] == s + 3 * T - 1, (packed.shape, T)
    out = {k: packed[:, i] for i, k in enumerate(RESULT_SCALARS)}
    out["residual_err"] = out["residual_err"] != 0
    out["drafts"] = packed[:, s : s + T - 1]
    out["dbad"], out["vbad"] = packed[:, s + T - 1 : s + 2 * T - 1] != 0, packed[:, s + 2 * T - 1 :] != 0
    return out


class AcceptSteps:
    """Engine's begin and accept steps (kernels/engine.py), capturable as CUDA graphs."""

    def begin_step(self, meta: torch.Tensor, R: int, W: int) -> None:
        """meta: [slot(R) K(R) ubase(R)] then the [R, W] uniform windows (FP64 bits)."""
        slots, _, ubase = meta[: 3 * R].view(3, R)
        win = meta[3 * R :].view(torch.float64).view(R, W)
        self.tok.view(-1).index_copy_(0, slots * self.Tcap, self.last.index_select(0, slots))
        self.ubuf.index_copy_(0, slots, torch.nn.functional.pad(win, (0, self.Wcap - W), value=float("nan")))
        self.ubase.index_copy_(0, slots, ubase)

    def accept_step(self, meta: torch.Tensor, R: int, policy: str, steps: tuple = ()) -> torch.Tensor:
        """meta: [slot(R) K(R) ubase(R)] -> the packed results [R, F] (RESULT_SCALARS, drafts, flags)."""
        slots, K, _ = meta.view(3, R)
        out = self.accept_commit(slots, K, policy, steps)
        return torch.cat(
            [
                torch.stack([out[k].long() for k in RESULT_SCALARS], 1),
                out["drafts"],
                out["dbad"].long(),
                out["vbad"].long(),
            ],
            1,
        )

    def accept_commit(self, slots: torch.Tensor, K: torch.Tensor, policy: str, steps: tuple = ()) -> dict:
        """Acceptance for every request of the round, then the cut (after the first stop token,
        or at max_tokens) and the commit on the device: frontier start + n for n kept tokens,
        next offset-0 token, RNG cursor; with processor steps also their output counts,
        generated count and tail (and with no_repeat_ngram the history). slots, K: [R].
        Stream indices: oracle.rng_trace."""
        T, V = self.Tcap, self.p.shape[1]
        o = torch.arange(T - 1, device=slots.device)
        greedy = self.greedy.index_select(0, slots)  # [R]
        base = slots * T
        rows = base[:, None] + o[None, :]  # [R, T-1] flat of offset o
        drafts = self.tok.index_select(0, slots)[:, 1:]  # draft of offset o+1
        pick = lambda t: t.view(-1).index_select(0, (rows * V + drafts).reshape(-1)).view(rows.shape)
        u_acc = self._uniform_grid(slots, accept_index(K[:, None], o[None, :]))
        ok = torch.where(greedy[:, None], drafts == self.gtok[rows], sampler.accepts(u_acc, pick(self.p), pick(self.q)))
        ok = ok | (o[None, :] >= K[:, None])
        a = torch.minimum(ok.long().cumprod(-1).sum(-1), K)  # accepted drafts
        rej = a < K
        fa = base + a  # flat of offset a
        p_a = self.p.index_select(0, fa)
        res, res_ok = sampler.residual(p_a, self.q.index_select(0, fa))
        final_at = final_index(policy, K, a, torch.minimum)  # stream index of the last uniform
        drawn = sampler.categorical(
            torch.where(rej[:, None], res, p_a), self._uniform_grid(slots, final_at[:, None])[:, 0]
        )
        final = torch.where(greedy, self.gtok.index_select(0, fa), drawn)
        used = torch.where(greedy, 0, draws_used(policy, K, a, torch.minimum))
        start = self.start.index_select(0, slots)
        # emitted e[o] = draft o for o < a, the final token at o = a; cut after the first stop
        # token s (kept) or when max_tokens is reached: n = min(s + 1, a + 1, left)
        t = torch.arange(T, device=slots.device)
        e = torch.where(t[None, :] < a[:, None], torch.cat([drafts, final[:, None]], 1), final[:, None])  # [R, T]
        hit = self.stop.view(-1).index_select(0, (slots[:, None] * V + e).reshape(-1)).view(e.shape) & (
            t[None, :] <= a[:, None]
        )
        s = torch.where(hit.any(-1), hit.long().argmax(-1), T)  # T: no stop token
        left = self.left.index_select(0, slots)
        n = torch.minimum(torch.minimum(s + 1, a + 1), left)
        why = torch.where((s < T) & (s < left), 1, torch.where(n == left, 2, 0))  # 1 stop, 2 length
        out = {
            "a": a,
            "final": final,
            "drafts": drafts,
            "used": used,
            "start": start,
            "n": n,
            "why": why,
            "residual_err": ~greedy & rej & ~res_ok,
            "dbad": self.dbad.view(-1, T).index_select(0, slots),
            "vbad": self.vbad.view(-1, T).index_select(0, slots),
        }
        # the commit; the scratch slot (graph warm-ups) keeps its frontier, budget and cursor
        real = slots != self.kv.scratch
        n, used = n * real, used * real
        self.start.index_copy_(0, slots, start + n)
        # n = 0 only in a round submitted after one that finished the request (the host fails it)
        self.last.index_copy_(0, slots, e.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0])
        self.left.index_copy_(0, slots, left - n)
        self.cursor.index_copy_(0, slots, self.cursor.index_select(0, slots) + used)
        if steps:  # the kept tokens e[:n] join the output
            kept = (t[None, :] < n[:, None]).float()  # [R, T]
            self.counts.view(-1).index_add_(0, (slots[:, None] * V + e).reshape(-1), kept.reshape(-1))
            gen = self.gen.index_select(0, slots)
            if "no_repeat_ngram" in steps:  # history ++ e[:n]
                H, hl = self.hist.shape[1], self.plen.index_select(0, slots) + gen
                j = torch.arange(H, device=n.device)[None, :]
                idx = torch.where(j < hl[:, None], j, H + (j - hl[:, None]).clamp(0, T - 1))
                seq = torch.cat([self.hist.index_select(0, slots), e], 1).gather(1, idx)
                self.hist.index_copy_(0, slots, torch.where(j < (hl + n)[:, None], seq, 0))
            self.gen.index_copy_(0, slots, gen + n)
            L = self.tail.shape[1]
            seq = torch.cat([self.tail.index_select(0, slots), e], 1)  # tail ++ e
            self.tail.index_copy_(0, slots, seq.gather(1, n[:, None] + torch.arange(L, device=n.device)[None, :]))
        return out

    def _uniform_grid(self, slots, index):
        # index: [R, n] stream offsets from each slot's cursor -> uniforms [R, n]
        idx = (self.cursor.index_select(0, slots) - self.ubase.index_select(0, slots))[:, None] + index
        return self.ubuf.index_select(0, slots).gather(1, idx.clamp(0, self.Wcap - 1))
