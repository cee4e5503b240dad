"""The sampler judge's cases: drawn (`draw_case`), written and read as one line of JSON
(`to_json`, `from_json`: the reproduce line's --case-json), and made smaller (`smaller`: the
shrinker's candidates).

A case is one batch of 1..3 requests of one vocabulary size. What the draw covers, each with a
tag (the run's coverage line counts them): the vocabulary size (2..256), draft counts 0..4,
greedy requests and sampled ones with draft probabilities, draft logits or n-gram (one-hot)
drafts, temperature, top-k, top-p and min-p, tied logits (quantised to a coarse grid), drafts
of target probability zero (always rejected), offsets whose draft distribution equals the
target (the residual is all zero, and never needed), and drafts from q or from anywhere in q's
support. Illegal requests (contract.py's check_request) are never drawn: a draw that makes one
is drawn again.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from ..errors import OracleError
from ..sampling import filtered_probs, softmax
from ..sampling_params import SamplingParams
from .contract import SamplerRequest, check_request, draft_dist

F32 = np.float32
VOCABS = (2, 3, 4, 6, 8, 12, 16, 32, 64, 256)
KINDS = ("greedy", "probs", "logits", "ngram")


@dataclass(slots=True)
class SamplerCase:
    name: str  # "case 3"
    requests: list  # SamplerRequest, one vocabulary size
    tags: tuple = ()  # what the case covers (the module docstring)


def _params(rng, greedy: bool, V: int) -> SamplingParams:
    if greedy:
        return SamplingParams()
    kw = {"temperature": float(rng.choice([0.5, 0.8, 1.0, 1.5]))}
    if rng.random() < 0.4:
        kw["top_k"] = int(rng.integers(1, V + 1))
    if rng.random() < 0.4:
        kw["top_p"] = float(rng.choice([0.3, 0.5, 0.8, 0.9, 0.95]))
    if rng.random() < 0.3:
        kw["min_p"] = float(rng.choice([0.02, 0.1, 0.3]))
    return SamplingParams(**kw)


def _logits(rng, shape, ties: bool) -> np.ndarray:
    scale = float(rng.choice([0.5, 1.0, 2.0, 4.0]))
    x = rng.normal(size=shape) * scale
    if ties:  # a coarse grid: many tokens share a logit
        x = np.round(x / max(scale, 1.0)) * max(scale, 1.0)
    return x.astype(F32)


def _draft_token(rng, req, o: int, tags: set) -> int:
    """A draft for offset o: one of p's zeros inside q's support now and then, else drawn from q
    (the n-gram path: the target's top token or any token)."""
    if req.params.greedy:
        best = int(np.argmax(req.target_logits[o]))
        return best if rng.random() < 0.6 else int(rng.integers(req.V))
    if req.draft_logits is None and req.draft_probs is None:
        return int(np.argmax(req.target_logits[o])) if rng.random() < 0.4 else int(rng.integers(req.V))
    q = draft_dist(req, o)
    zero = np.flatnonzero((filtered_probs(req.target_logits[o], req.params) == 0) & (q > 0))
    if zero.size and rng.random() < 0.3:
        tags.add("draft of p = 0")
        return int(rng.choice(zero))
    return int(rng.choice(req.V, p=q.astype(np.float64) / q.sum(dtype=np.float64)))


def _request(rng, V: int, tags: set) -> SamplerRequest:
    kind = str(rng.choice(KINDS, p=[0.2, 0.3, 0.3, 0.2]))
    K = int(rng.choice([0, 1, 1, 2, 2, 3, 4]))
    ties = rng.random() < 0.35
    params = _params(rng, kind == "greedy", V)
    target = _logits(rng, (K + 1, V), ties)
    req = SamplerRequest(target, (), params)
    same = rng.random() < 0.25  # an offset whose q is the target's p
    if kind == "logits":
        dl = target[:K] + _logits(rng, (K, V), ties) * F32(rng.choice([0.3, 1.0]))
        if same and K:
            dl[0] = target[0]
        req.draft_logits = dl.astype(F32)
    elif kind == "probs":
        dp = np.stack([softmax(x) for x in _logits(rng, (K, V), ties)]) if K else np.zeros((0, V), F32)
        if same and K:
            dp[0] = filtered_probs(target[0], params)
        req.draft_probs = dp.astype(F32)
    req.draft_tokens = tuple(
        _draft_token(rng, dataclasses.replace(req, draft_tokens=(0,) * K), o, tags) for o in range(K)
    )
    tags.update(_tags(req, same))
    return req


def _tags(req: SamplerRequest, same: bool) -> set:
    p, V = req.params, req.V
    out = {f"{req.kind}", f"K={req.K}"}
    out |= {name for name, on in (("top-k", p.top_k), ("top-p", p.top_p), ("min-p", p.min_p)) if on}
    if any(len(np.unique(row)) < V for row in req.target_logits):
        out.add("tied logits")
    if same and req.K and req.kind in ("probs", "logits"):
        out.add("q = p (zero residual)")
    return out


def draw_case(rng: np.random.Generator, name: str) -> SamplerCase:
    """One legal case (the module docstring); rng: the run's generator."""
    V = int(rng.choice(VOCABS))
    n = int(rng.choice([1, 1, 2, 3]))
    while True:
        tags: set = set()
        reqs = [_request(rng, V, tags) for _ in range(n)]
        try:
            for i, r in enumerate(reqs):
                check_request(r, f"request {i}")
        except OracleError:
            continue
        return SamplerCase(name, reqs, tuple(sorted(tags | {f"V={V}"})))


# ---- one line of JSON ----


def _floats(a) -> list:
    # float32 -> its exact float64 -> back; -inf (a masked token) as the string "-inf"
    return [[float(v) if v > -np.inf else "-inf" for v in row] for row in np.asarray(a, np.float32)]


def to_json(case: SamplerCase) -> str:
    reqs = []
    for r in case.requests:
        d = {"target_logits": _floats(r.target_logits), "draft_tokens": list(r.draft_tokens)}
        d["params"] = {k: v for k, v in r.params.to_json().items() if v is not None and k != "seed"}
        for name in ("draft_logits", "draft_probs"):
            if getattr(r, name) is not None:
                d[name] = _floats(getattr(r, name))
        reqs.append(d)
    return json.dumps({"requests": reqs}, separators=(",", ":"))


KEYS = {"target_logits", "draft_tokens", "params", "draft_logits", "draft_probs"}


def _array(v, what: str) -> np.ndarray:
    try:
        a = np.array([[float(x) for x in row] for row in v], np.float64)
    except (TypeError, ValueError):
        raise OracleError(f"--case-json: {what} must be a list of lists of numbers") from None
    return a.astype(F32)


def from_json(text: str, name: str = "case") -> SamplerCase:
    """A case from --case-json; every problem one OracleError line."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise OracleError(f"--case-json: not JSON ({e})") from None
    if not isinstance(d, dict) or set(d) != {"requests"} or not isinstance(d["requests"], list) or not d["requests"]:
        raise OracleError('--case-json: expected {"requests": [{...}, ...]} with at least one request')
    reqs = []
    for i, r in enumerate(d["requests"]):
        if not isinstance(r, dict) or not {"target_logits", "draft_tokens", "params"} <= set(r) <= KEYS:
            raise OracleError(
                f"--case-json: request {i} needs target_logits, draft_tokens, params (and may have "
                "draft_logits or draft_probs)"
            )
        if not isinstance(r["params"], dict) or "seed" in r["params"]:
            raise OracleError(f"--case-json: request {i}: params must be an object of SamplingParams fields but seed")
        try:
            params = SamplingParams(**r["params"])
        except TypeError as e:
            raise OracleError(f"--case-json: request {i}: params: {e}") from None
        if not isinstance(r["draft_tokens"], list):
            raise OracleError(f"--case-json: request {i}: draft_tokens must be a list of token ids")
        req = SamplerRequest(_array(r["target_logits"], "target_logits"), tuple(r["draft_tokens"]), params)
        for key in ("draft_logits", "draft_probs"):
            if key in r:
                setattr(req, key, _array(r[key], key) if r[key] else np.zeros((0, req.V), F32))
        check_request(req, f"--case-json: request {i}")
        reqs.append(req)
    if len({r.V for r in reqs}) > 1:
        raise OracleError("--case-json: the requests of one batch must share one vocabulary size")
    return SamplerCase(name, reqs)


# ---- smaller cases (the shrinker's candidates, most reducing first) ----


def _drop_tokens(req: SamplerRequest, drop) -> SamplerRequest | None:
    """The request without the vocabulary entries `drop` (the ids above move down), or None
    when a draft is among them or fewer than 2 would stay."""
    drop = set(int(t) for t in drop)
    if drop & set(req.draft_tokens) or req.V - len(drop) < 2 or not drop:
        return None
    keep = np.array([t not in drop for t in range(req.V)])
    ids = np.cumsum(keep) - 1  # old id -> new id
    p = req.params
    if p.top_k is not None and p.top_k >= int(keep.sum()):
        p = dataclasses.replace(p, top_k=None)
    out = dataclasses.replace(req, target_logits=req.target_logits[:, keep], params=p)
    out.draft_tokens = tuple(int(ids[x]) for x in req.draft_tokens)
    if req.draft_logits is not None:
        out.draft_logits = req.draft_logits[:, keep]
    if req.draft_probs is not None:
        q = req.draft_probs[:, keep].astype(np.float64)
        if np.any(q.sum(1) == 0):
            return None
        out.draft_probs = (q / q.sum(1, keepdims=True)).astype(F32)
    return out


def _vocab_cuts(req: SamplerRequest) -> list:
    """Vocabulary cuts, largest first: the least likely half, then quarter, of the tokens that
    are no draft (by their largest target logit), then (V <= 16) each such token alone."""
    free = [t for t in np.argsort(req.target_logits.max(0), kind="stable") if t not in req.draft_tokens]
    cuts = [free[: len(free) // d] for d in (2, 4) if len(free) // d >= 2]
    return cuts + ([[t] for t in free] if req.V <= 16 else [])


def _shorter(req: SamplerRequest) -> SamplerRequest:
    """The request with its last draft and target offset cut (K - 1)."""
    out = dataclasses.replace(req, target_logits=req.target_logits[:-1], draft_tokens=req.draft_tokens[:-1])
    for name in ("draft_logits", "draft_probs"):
        if getattr(req, name) is not None:
            setattr(out, name, getattr(req, name)[:-1])
    return out


def smaller(case: SamplerCase, focus: int) -> list[SamplerCase]:
    """Candidates, each one step smaller: request `focus` alone; the focus request with one
    offset less, its params simpler (one filter off; temperature 1), a smaller vocabulary."""
    reqs = case.requests
    out = [[reqs[focus]]] if len(reqs) > 1 else []
    r = reqs[focus]
    alt = []
    if r.K:
        alt.append(_shorter(r))
    for field, off in (("top_k", None), ("top_p", None), ("min_p", None), ("temperature", 1.0)):
        if getattr(r.params, field) not in (off,) and not r.params.greedy:
            alt.append(dataclasses.replace(r, params=dataclasses.replace(r.params, **{field: off})))
    for cut in _vocab_cuts(r):
        alt.append(_drop_tokens(r, cut))
    for a in alt:
        if a is not None:
            out.append([a] if len(reqs) == 1 else reqs[:focus] + [a] + reqs[focus + 1 :])
    legal = []
    for rs in out:
        if len({x.V for x in rs}) > 1:
            rs = [rs[focus]] if len(rs) > 1 else rs
        try:
            for i, x in enumerate(rs):
                check_request(x, f"request {i}")
        except OracleError:
            continue
        legal.append(SamplerCase(case.name, rs, case.tags))
    return legal
