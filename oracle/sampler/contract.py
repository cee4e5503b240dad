"""The sampler contract: what `python -m oracle sampler --backend package.module:factory` hands
a speculative rejection sampler, and what it must hand back.

A batch is a list of `SamplerRequest`s (one vocabulary size V per batch; K, the draft count, may
differ per request and may be 0). For each request the sampler returns the tokens it emits: the
accepted drafts, then one recovered token (after a rejection) or one bonus token (all accepted),
so 1..K+1 tokens. The rules (oracle/sampling.py, docs/DESIGN.md section 5):

  greedy (params.temperature == 0): draft o is accepted while it equals the argmax of
      target_logits[o] (ties: the lowest id); the final token is the argmax at the first
      mismatch, or at offset K. Draft logits and probabilities are ignored; no randomness.
  sampled: p_o = oracle.sampling.filtered_probs(target_logits[o], params): temperature, min-p,
      top-k, top-p (every token tied with the last survivor of top-k or top-p survives),
      softmax. q_o, the draft distribution of offset o, is
        draft_probs[o] as given (the draft model's probabilities, as vLLM's draft_probs), or
        filtered_probs(draft_logits[o], params) (the oracle's round: the draft head's logits
            through the same chain), or
        one-hot at draft_tokens[o] when both are None (n-gram drafts; vLLM's draft_probs=None).
      Offset o's draft x_o is accepted iff u_o * q_o(x_o) < p_o(x_o) (u_o ~ U[0, 1)), in
      order; at the first rejected offset a the final token is drawn from
      normalize(max(0, p_a - q_a)) (the recovered token); if all K are accepted (a = K) it is
      drawn from p_K (the bonus token).

Legal input (`check_request`, an OracleError of one line otherwise): logits finite or -inf
(not a whole row of -inf); params without stop cut or processors (the sampler's business is
the chain's mask and filters); drafts in [0, V); q_o(x_o) > 0 (a draft of probability zero
under q could not have been drawn from it, DESIGN section 5); and where a rejection can happen
at offset o (p_o(x_o) < q_o(x_o)) the residual max(0, p_o - q_o) has mass. p_o(x_o) = 0 is
legal (the draft is always rejected), and so is p_o == q_o (the residual is all zero, and
never drawn from: u * q < p holds for every u < 1).

Randomness. `seed`: the request's own seed; a sampler that draws its own uniforms derives them
from it (copies of one request in a batch carry distinct seeds; `seeded_uniforms` is one way).
`uniforms` (exact mode only, for a sampler with takes_uniforms): float64 [K + 1] in [0, 1),
the round's uniforms after its K draft uniforms in the reference's `sequential` layout
(oracle.rng_trace.round_layout: the stream index K + i is uniforms[i]): uniforms[o] is offset
o's accept uniform (drawn in order until the first rejection); the final token takes
uniforms[min(a + 1, K)]. A draw is the inverse CDF over token ids in FP64
(oracle.sampling.categorical: the first token whose cumulative mass exceeds u * total), and
acceptance compares u * q(x) < p(x) in FP64. Greedy requests get uniforms=None.

A sampler (what the factory returns):
  name: str
  takes_uniforms: bool           it uses `uniforms` when given (else draws its own from seed)
  sample(batch: list[SamplerRequest]) -> list[list[int]]
and may have
  max_batch: int                 requests per sample() call, at most (default: no limit)
  refuses(request) -> str | None a reason it does not take this request (say "top-k/top-p: not
                                 on the CPU"); the judge leaves such requests out of their case
                                 (and of the family), skips a case of none left, and lists them.
A sampler must treat the requests of a batch independently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.backends import call_factory
from ..errors import OracleError, printable
from ..sampling import check_logits, filtered_probs
from ..sampling_params import CHAIN, SamplingParams

NAMED = {
    "reference": "oracle.sampler.reference:make_reference_sampler",
    "torch": "kernels.sampler_plugin:make_torch_sampler",
}


@dataclass(slots=True)
class SamplerRequest:
    """One request of a batch (the module docstring). K = len(draft_tokens)."""

    target_logits: np.ndarray  # [K + 1, V] float32: offsets 0..K
    draft_tokens: tuple  # K token ids
    params: SamplingParams
    seed: int = 0
    draft_logits: np.ndarray | None = None  # [K, V] float32, or None
    draft_probs: np.ndarray | None = None  # [K, V] float32, or None (both None: n-gram)
    uniforms: np.ndarray | None = None  # [K + 1] float64 (exact mode), or None

    @property
    def K(self) -> int:
        return len(self.draft_tokens)

    @property
    def V(self) -> int:
        return int(self.target_logits.shape[1])

    @property
    def kind(self) -> str:
        """ "greedy", "probs" (draft_probs given), "logits" (draft_logits given) or "ngram"."""
        if self.params.greedy:
            return "greedy"
        return "probs" if self.draft_probs is not None else "logits" if self.draft_logits is not None else "ngram"


def draft_dist(req: SamplerRequest, o: int) -> np.ndarray:
    """q_o [V] float32 of a sampled request (the module docstring)."""
    if req.draft_probs is not None:
        return np.asarray(req.draft_probs[o], np.float32)
    if req.draft_logits is not None:
        return filtered_probs(req.draft_logits[o], req.params)
    q = np.zeros(req.V, np.float32)
    q[req.draft_tokens[o]] = 1
    return q


def seeded_uniforms(seeds, n: int) -> np.ndarray:
    """[R, n] float64 in [0, 1): uniform i of seed s is a SplitMix64 hash of (s, i), so a
    sampler can draw per (seed, position) without a generator per request (the reference's and
    the torch sampler's own draws when the judge passes no uniforms)."""
    with np.errstate(over="ignore"):
        z = np.asarray(seeds, np.uint64)[:, None] * np.uint64(0x9E3779B97F4A7C15) + np.arange(1, n + 1, dtype=np.uint64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def check_request(req: SamplerRequest, where: str = "request") -> None:
    """Refuse what is not a legal request (the module docstring), in one line."""
    t = np.asarray(req.target_logits)
    if t.dtype != np.float32 or t.ndim != 2 or t.shape[0] != req.K + 1 or t.shape[1] < 1:
        raise OracleError(f"{where}: target_logits must be float32 [K + 1, V], K = {req.K}; got {t.dtype} {t.shape}")
    V, K, p = t.shape[1], req.K, req.params
    for name in ("draft_logits", "draft_probs"):
        a = getattr(req, name)
        if a is not None and (a.dtype != np.float32 or a.shape != (K, V)):
            raise OracleError(f"{where}: {name} must be float32 [K, V] = [{K}, {V}], got {a.dtype} {a.shape}")
    if req.draft_logits is not None and req.draft_probs is not None:
        raise OracleError(f"{where}: give draft_logits or draft_probs, not both")
    if p.stop_token_ids or p.max_tokens is not None or any(s.is_on(p) for s in CHAIN.named("processor")):
        raise OracleError(f"{where}: params with a stop cut or processors: a sampler gets only the mask and filters")
    p.check_vocab(V, where)
    bad = [x for x in req.draft_tokens if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < V]
    if bad:
        raise OracleError(f"{where}: draft token {bad[0]!r} is not a token id in [0, {V})")
    for o in range(K + 1):
        check_logits(t[o], f"{where}: target_logits[{o}]")
    if req.uniforms is not None:
        u = np.asarray(req.uniforms)
        if u.dtype != np.float64 or u.shape != (K + 1,) or not np.all((u >= 0) & (u < 1)):
            raise OracleError(f"{where}: uniforms must be float64 [K + 1] = [{K + 1}] in [0, 1)")
    if p.greedy:
        return
    if req.draft_logits is not None:
        for o in range(K):
            check_logits(req.draft_logits[o], f"{where}: draft_logits[{o}]")
    if req.draft_probs is not None:
        q = req.draft_probs.astype(np.float64)
        if not np.all(np.isfinite(q) & (q >= 0)) or np.any(np.abs(q.sum(1) - 1) > 1e-3):
            raise OracleError(f"{where}: draft_probs rows must be finite, >= 0 and sum to 1 (within 1e-3)")
    for o, x in enumerate(req.draft_tokens):
        pr, q = filtered_probs(t[o], p), draft_dist(req, o)
        if not q[x] > 0:
            raise OracleError(f"{where}: draft {x} at offset {o} has q = 0: it could not have been drawn from q")
        if pr[x] < q[x] and not np.any(pr > q):
            raise OracleError(f"{where}: offset {o} can reject its draft but max(0, p - q) is all zero")


# ---- a sampler: found by name, checked, its output checked ----


def load_sampler(spec: str):
    """The sampler `spec` names (NAMED, or package.module:factory), checked; one-line errors."""
    target = NAMED.get(spec, spec)
    mod_name, _, attr = target.partition(":")
    if not mod_name or not attr:
        raise OracleError(f"unknown sampler {printable(spec)!r} (known: {', '.join(NAMED)}, package.module:factory)")
    s = call_factory(f"sampler {printable(spec)!r}", target, "sampler")
    problem = sampler_problem(s)
    if problem:
        raise OracleError(f"sampler {printable(spec)!r}: {target}() returned {problem} (oracle/sampler/contract.py)")
    return s


def sampler_problem(s) -> str | None:
    """What breaks the contract in a sampler object, or None."""
    if not isinstance(getattr(s, "name", None), str):
        return f"{type(s).__name__} without a str `name`"
    if not isinstance(getattr(s, "takes_uniforms", None), bool):
        return f"{type(s).__name__} without a bool `takes_uniforms`"
    if not callable(getattr(s, "sample", None)):
        return f"{type(s).__name__} without a `sample(batch)` method"
    mb = getattr(s, "max_batch", None)
    if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or mb < 1):
        return f"{type(s).__name__} whose max_batch {mb!r} is not an integer >= 1"
    return None


def check_output(out, batch: list, who: str) -> list[list[int]]:
    """The sampler's answer as lists of ints, or an OracleError of one line naming what is
    wrong with its shape (a token outside [0, V) included). Whether the tokens are right is
    the judge's business."""
    if not isinstance(out, (list, tuple)):
        raise OracleError(f"sampler {who}: sample() returned {type(out).__name__}, not a list of token lists")
    if len(out) != len(batch):
        raise OracleError(f"sampler {who}: sample() returned {len(out)} token lists for {len(batch)} requests")
    res = []
    for i, (toks, req) in enumerate(zip(out, batch)):
        try:
            if not all(type(t) is int for t in toks):  # the fast path: a list of ints
                toks = [int(t) for t in toks] if all(isinstance(t, (int, np.integer)) for t in toks) else None
        except TypeError:
            toks = None
        if toks is None or isinstance(out[i], (str, bytes)):
            raise OracleError(f"sampler {who}: request {i}: sample() returned {printable(out[i])[:80]}, not token ids")
        if not 1 <= len(toks) <= req.K + 1:
            raise OracleError(f"sampler {who}: request {i}: {len(toks)} tokens emitted, expected 1..K+1 ({req.K + 1})")
        bad = [t for t in toks if not 0 <= t < req.V]
        if bad:
            raise OracleError(f"sampler {who}: request {i}: token {bad[0]} is outside the vocabulary [0, {req.V})")
        res.append(toks)
    return res
