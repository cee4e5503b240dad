"""The reference's sampler through the contract (`--backend reference`): oracle.sampling's rules
(rules.py), one request at a time, taking the judge's uniforms when given and else K + 1
uniforms hashed from its seed (contract.seeded_uniforms, as the torch sampler draws them)."""

from __future__ import annotations


from .contract import SamplerRequest, seeded_uniforms
from .rules import Rules


class ReferenceSampler:
    takes_uniforms = True

    def __init__(self, rules: Rules | None = None, name: str = "reference"):
        self.rules, self.name = rules or Rules(), name

    def sample(self, batch: list[SamplerRequest]) -> list[list[int]]:
        cache, memo = {}, {}  # copies of one request share their arrays: p, q, residuals once per request
        own = seeded_uniforms([r.seed for r in batch], max(r.K for r in batch) + 1)
        out = []
        for n, req in enumerate(batch):
            key = (id(req.target_logits), id(req.draft_logits), id(req.draft_probs), req.draft_tokens, req.params)
            if not req.params.greedy and key not in cache:
                cache[key] = self.rules.dists(req)
            u = req.uniforms if req.uniforms is not None else own[n]
            out.append(self.rules.decide(req, u, cache.get(key), memo.setdefault(key, {})))
        return out


def make_reference_sampler() -> ReferenceSampler:
    return ReferenceSampler()
