"""The reference's rules for one request of the sampler contract (contract.py's docstring), from
oracle.sampling: the decisions given the uniforms (`Rules.decide`), and the exact distribution
of the outcome (a, final token) given the drafts (`outcome_distribution`).

`Rules` is a class of small steps (target, draft, accept, recover, bonus) so that
meta_tests/faulty_samplers.py can replace one step; the judge uses `RULES`, unchanged.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import sampling
from ..rng_trace import round_layout
from .contract import SamplerRequest, draft_dist


@functools.lru_cache(maxsize=None)
def final_uniform(K: int, accepted: int) -> int:
    """Index into a request's uniforms [K + 1] of the final draw (recovered or bonus): the
    sequential layout's stream index less the K draft uniforms."""
    return round_layout("sequential", K, accepted)[-1].index - K


class Rules:
    """One request's decisions, step by step (oracle.sampling's functions)."""

    def target(self, req: SamplerRequest) -> list[np.ndarray]:
        """p_o [V] float32 for o = 0..K (sampled requests)."""
        return [sampling.filtered_probs(req.target_logits[o], req.params) for o in range(req.K + 1)]

    def draft(self, req: SamplerRequest) -> list[np.ndarray]:
        """q_o [V] float32 for o = 0..K-1."""
        return [draft_dist(req, o) for o in range(req.K)]

    def accept(self, u: float, p: np.ndarray, q: np.ndarray, x: int) -> bool:
        return sampling.accepts(u, p[x], q[x])

    def accept_prob(self, p: np.ndarray, q: np.ndarray, x: int) -> float:
        """P(accept) over u ~ U[0, 1): min(1, p(x) / q(x))."""
        return min(1.0, float(p[x]) / float(q[x]))

    def recover(self, p: np.ndarray, q: np.ndarray, req: SamplerRequest, o: int) -> np.ndarray:
        """The distribution of the token after a rejection at offset o."""
        return sampling.residual(p, q)

    def bonus(self, ps: list, qs: list, req: SamplerRequest) -> np.ndarray:
        """The distribution of the token after K acceptances."""
        return ps[req.K]

    def greedy(self, req: SamplerRequest) -> list[int]:
        out = []
        for o in range(req.K + 1):
            best = sampling.greedy_token(req.target_logits[o], req.params)
            out.append(best)
            if o == req.K or req.draft_tokens[o] != best:
                return out

    def dists(self, req: SamplerRequest) -> tuple[list, list]:
        return self.target(req), self.draft(req)

    def decide(self, req: SamplerRequest, u: np.ndarray, dists: tuple | None = None, memo=None) -> list[int]:
        """The emitted tokens given the uniforms [K + 1] (contract.py's layout). memo: a dict
        that keeps each final distribution of this request (a < K: recovered, K: bonus) across
        calls on copies of it."""
        if req.params.greedy:
            return self.greedy(req)
        ps, qs = dists or self.dists(req)
        K, x = req.K, req.draft_tokens
        a = next((o for o in range(K) if not self.accept(float(u[o]), ps[o], qs[o], x[o])), K)
        final = None if memo is None else memo.get(a)
        if final is None:
            final = self.recover(ps[a], qs[a], req, a) if a < K else self.bonus(ps, qs, req)
            if memo is not None:
                memo[a] = final
        return list(x[:a]) + [sampling.categorical(final, float(u[final_uniform(K, a)]))]

    def outcome_distribution(self, req: SamplerRequest) -> np.ndarray:
        """[K + 1, V] float64: P(a accepted drafts, final token t) given the drafts. Greedy
        requests: one outcome of probability 1."""
        K, V = req.K, req.V
        out = np.zeros((K + 1, V))
        if req.params.greedy:
            toks = self.greedy(req)
            out[len(toks) - 1, toks[-1]] = 1.0
            return out
        ps, qs = self.dists(req)
        reach = 1.0  # P(offsets 0..o-1 all accepted)
        for o in range(K):
            acc = self.accept_prob(ps[o], qs[o], req.draft_tokens[o])
            if acc < 1:
                r = np.asarray(self.recover(ps[o], qs[o], req, o), np.float64)
                out[o] = reach * (1 - acc) * r / r.sum()
            reach *= acc
        b = np.asarray(self.bonus(ps, qs, req), np.float64)
        out[K] = reach * b / b.sum()
        return out


RULES = Rules()
