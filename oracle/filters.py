"""The filters of the chain (oracle/sampling_params.py CHAIN, after the processors; sampled
requests only), each in four parts that its `Step` (oracle/sampling_params.py, beside its fields)
names: the FP32 step (logits [V] -> logits [V], a dropped token -inf), the check of its fields
(`<name>_check`, as oracle/step.py says), its device rows, and its margin.

Device rows: params, V -> {row name: numpy scalar}; kernels/rows.py gathers them per slot and
kernels/sampler.py runs the filter of the same name on them (an off filter's rows make it the
identity).

Margins: how near the filter's kept set was to changing, for the judge's first-divergence rule
(oracle/judge/comparison/decisions.py `filter_margin`). `margin(m)` takes a `Margins` and lowers m.best;
m.kept is the size of the top-k cut, which top-p's margin reads. Each scale follows the greedy
margin's: a probability gap / max p at temperature 1, or a tempered quantity times `temper`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import OracleError


F32 = np.float32
INF = float("inf")


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return (e / e.sum()).astype(F32, copy=False)


def temper(params) -> float:
    """Margins measured on tempered probabilities move 1/T times as fast as the logits, so
    below temperature 1 they are scaled by T to stay comparable with a logit-scale precision."""
    return min(float(params.temperature), 1.0)


@dataclass(slots=True)
class Margins:
    """What the filters' margins share. lg: FP64 processed logits [V]; r1: their probabilities
    at temperature 1, descending, / nothing (max 1); kept: tokens the top-k cut keeps (V
    without one); x: the FP32 logits after the filters before the current one (the chain's own
    steps); best: the smallest margin so far (inf: no filter cuts)."""

    lg: np.ndarray
    params: object
    r1: np.ndarray
    kept: int
    x: np.ndarray
    best: float = INF

    @classmethod
    def of(cls, x, params) -> "Margins":
        """x: the processed FP32 logits [V]."""
        lg = np.asarray(x, np.float64)
        r1 = np.sort(np.exp(lg - lg.max()))[::-1]
        return cls(lg, params, r1, len(r1), np.asarray(x, F32))

    def lower(self, m: float) -> None:
        self.best = min(self.best, float(m))

    def tempered(self) -> np.ndarray:
        """FP64 logits at the request's temperature."""
        return self.lg / self.params.temperature


# ---- temperature ----

# A sampled request's temperature T: logits divided by it stay finite float32 (max 3.4e38) for logits
# up to 3e8 in size, and a logit of 1e-8 stays nonzero (smallest normal 1.2e-38). Beyond this range the
# scaled logits overflow (T = 1e-38: "zero total mass") or vanish; as --repetition-penalty's range.
TEMPERATURE_RANGE = (1e-30, 1e30)


def temperature(x: np.ndarray, params) -> np.ndarray:
    return x / F32(params.temperature)


def temperature_rows(p, V) -> dict:
    return {"temp": F32(1.0 if p.greedy else p.temperature)}


def temperature_check(p, vocab=None) -> dict:
    t = p.temperature
    if not isinstance(t, (int, float)) or math.isnan(t) or t < 0 or math.isinf(t):
        raise OracleError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
    lo, hi = TEMPERATURE_RANGE
    if t != 0 and not lo <= t <= hi:
        raise OracleError(
            f"temperature {t:g} is outside [{lo:g}, {hi:g}] (or 0 = greedy): the logits divided by it would "
            "overflow float32 (max 3.4e38) or vanish"
        )
    return {}


# ---- min-p (vLLM): drop tokens with softmax(x) < min_p * max softmax(x) ----


def min_p(x: np.ndarray, params) -> np.ndarray:
    if not params.min_p:
        return x
    p = softmax(x)
    return np.where(p >= F32(params.min_p) * p.max(), x, F32(-np.inf))  # the top token stays


def min_p_margin(m: Margins) -> None:
    """|p / max p - min_p| of the nearest token, tempered."""
    if m.params.min_p:
        x = m.tempered()
        ratio = np.exp(x - x.max())
        m.lower(temper(m.params) * np.min(np.abs(ratio[np.isfinite(x)] - m.params.min_p)))


def min_p_check(p, vocab=None) -> dict:
    mp = p.min_p
    if mp is not None and (isinstance(mp, bool) or not isinstance(mp, (int, float)) or not 0 <= mp <= 1):
        raise OracleError(f"min_p must be in [0, 1], got {mp!r}")
    return {}


# ---- top-k: keep x >= the k-th largest x (ties at the threshold stay) ----


def top_k(x: np.ndarray, params) -> np.ndarray:
    if params.top_k is None or params.top_k >= len(x):
        return x
    kth = np.sort(x)[::-1][params.top_k - 1]
    return np.where(x >= kth, x, F32(-np.inf))  # ties at the threshold stay


def top_k_margin(m: Margins) -> None:
    """The gap between the k-th and the (k+1)-th probability / max p at temperature 1."""
    k = m.params.top_k
    if k is not None and k < m.kept:
        m.kept = k
        m.lower((m.r1[k - 1] - m.r1[k]) / m.r1[0])


def top_k_check(p, vocab=None) -> dict:
    if p.top_k is not None and (isinstance(p.top_k, bool) or not isinstance(p.top_k, int) or p.top_k < 1):
        raise OracleError(f"top_k must be an integer >= 1, got {p.top_k!r}")
    return {}


# ---- top-p: in descending order, a token whose mass before it exceeds p is dropped ----


def top_p(x: np.ndarray, params) -> np.ndarray:
    if params.top_p is None or params.top_p >= 1:
        return x
    p = softmax(x)
    ps = p[np.argsort(-p, kind="stable")]
    before = np.cumsum(ps) - ps  # mass before each sorted token
    cut = ps[np.count_nonzero(before <= F32(params.top_p)) - 1]  # before[0] == 0: top stays
    return np.where(p >= cut, x, F32(-np.inf))  # ties with the last kept stay


def top_p_margin(m: Margins) -> None:
    """The distance of the nearest token's preceding mass to p (tempered, among top-k's kept),
    and the probability gap at the cut / max p at temperature 1."""
    tp = m.params.top_p
    if tp is None or tp >= 1 or m.kept <= 1:
        return
    x = m.tempered()
    s = np.sort(np.exp(x - x.max()))[::-1][: m.kept]
    s = s / s.sum()
    before = np.cumsum(s) - s
    m.lower(temper(m.params) * np.min(np.abs(before[1:] - tp)))
    cut = int(np.sum(before <= tp))  # tokens top-p keeps
    if cut < m.kept:
        m.lower((m.r1[cut - 1] - m.r1[cut]) / m.r1[0])


def top_p_check(p, vocab=None) -> dict:
    if p.top_p is not None and not (isinstance(p.top_p, (int, float)) and 0 < p.top_p <= 1):
        raise OracleError(f"top_p must be in (0, 1], got {p.top_p!r}")
    return {}


# ---- typical-p (Hugging Face's TypicalLogitsWarper, min_tokens_to_keep=1): with H the entropy
# of the distribution, sort the tokens by |-log p - H| ascending; keep them up to and including
# the first whose cumulative mass reaches typical_p, and every token whose score ties the last
# kept one's (tied tokens, equal p among them, share its fate) ----


def _typical_scores(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FP32 logits [V] -> (p [V], |-log p - H| [V]; inf for masked tokens)."""
    z = x - x.max()
    lp = z - np.log(np.sum(np.exp(z)))  # log-softmax; -inf where masked
    p = np.exp(lp)
    ent = -np.sum(p * np.where(lp > -np.inf, lp, F32(0)))  # HF's nansum: masked tokens add nothing
    return p, np.abs(-lp - ent)


def typical_p(x: np.ndarray, params) -> np.ndarray:
    tp = params.typical_p
    if tp is None or tp >= 1:
        return x
    p, s = _typical_scores(x)
    order = np.argsort(s, kind="stable")
    last = min(np.count_nonzero(np.cumsum(p[order]) < F32(tp)), len(x) - 1)  # the first to reach tp
    return np.where(s <= s[order[last]], x, F32(-np.inf))  # ties with the last kept stay


def typical_p_margin(m: Margins) -> None:
    """On the distribution the filters before it leave, in FP64: the distance of the nearest
    cumulative mass to typical_p, and the score gap between the last kept token and the next,
    both tempered (scores are in nats of the tempered distribution)."""
    tp = m.params.typical_p
    if tp is None or tp >= 1:
        return
    x = np.asarray(m.x, np.float64)
    p, s = _typical_scores(x)
    live = np.isfinite(s)
    if live.sum() <= 1:
        return
    order = np.argsort(s[live], kind="stable")
    ps, ss = p[live][order], s[live][order]
    cum = np.cumsum(ps)
    m.lower(temper(m.params) * np.min(np.abs(cum[:-1] - tp)))
    last = min(int(np.count_nonzero(cum < tp)), len(ss) - 1)
    above = ss[ss > ss[last]]
    if above.size:
        m.lower(temper(m.params) * (above[0] - ss[last]))


def typical_p_check(p, vocab=None) -> dict:
    tp = p.typical_p
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, (int, float)) or not 0 < tp <= 1):
        raise OracleError(f"typical_p must be in (0, 1], got {tp!r}")
    return {}


def off_at_one(field: str):
    """Device rows of a mass in (0, 1] where None and 1 are off: +inf (every comparison keeps)."""

    def rows(p, V) -> dict:
        v = getattr(p, field)
        return {field: F32(v if v is not None and v < 1 else INF)}

    return rows
