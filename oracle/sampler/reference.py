"""The reference's sampler through the contract (`--backend reference`): oracle.sampling's rules
(rules.py), one request at a time, taking the judge's uniforms when given and else drawing
K + 1 uniforms from numpy PCG64(seed) (the RNG contract's generator)."""

from __future__ import annotations


from ..rng_trace import uniform_source
from .contract import SamplerRequest
from .rules import Rules


class ReferenceSampler:
    takes_uniforms = True

    def __init__(self, rules: Rules | None = None, name: str = "reference"):
        self.rules, self.name = rules or Rules(), name

    def sample(self, batch: list[SamplerRequest]) -> list[list[int]]:
        cache = {}  # copies of one request share their arrays: p and q once per request
        out = []
        for req in batch:
            key = (id(req.target_logits), id(req.draft_logits), id(req.draft_probs), req.draft_tokens, req.params)
            if not req.params.greedy and key not in cache:
                cache[key] = self.rules.dists(req)
            u = req.uniforms
            if u is None and not req.params.greedy:
                u = uniform_source(req.seed)[0].random(req.K + 1)
            out.append(self.rules.decide(req, u, cache.get(key)))
        return out


def make_reference_sampler() -> ReferenceSampler:
    return ReferenceSampler()
