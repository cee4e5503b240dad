"""The drift verdict (docs/DESIGN.md, "Reduced precision"): effective parameter drifts of a
backend, estimated from its errors at committed positions, each with its interval; a drift
beyond the threshold is a systematic error and fails, named in a kernel engineer's terms.

    e = got - ref  ~  sum_p J_p * delta_p + rounding noise

For each request r (the sample), the values it committed (every K/V write and the draft and
verification logits at positions whose whole context was committed) give e_r; J_p is the
reference's own derivative of those values along parameter p (finite differences of
oracle/judge/probe/drift_model.py in FP64, or jax.jvp on the JAX judge). With each value group (kind,
depth, layer) normalised by its RMS and by 1.5**depth, a request's estimate of one direction c
is delta_rc = <J c, e_r> / <J c, J c>. Across requests the mean estimate of a correct backend, less
a share s in [0, 1] of the weights' own rounding drift, lies within the rounding allowance: the
noise twin's own drift (from 0 to RHO times its mean) widened by TWIN_SPREAD of its standard errors
and by drift_floor(hidden) (twin_allowance); drift_stats.beyond_interval tests that with Student's
t, Bonferroni over the directions tested.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import drift_stats, knobs
from .calibration import (
    ALIAS,
    DRIFT_FLOOR,
    FAMILY_ALPHA,
    FD_STEP,
    FLOOR_HIDDEN,
    FLOOR_POWER,
    GROWTH,
    RHO,
    SAMPLES,
    TWIN_SPREAD,
    VISIBLE,
    precision_limits,
)
from .forwards import Forwards, of, span

# GROWTH: weight of a value group at depth j, 1 / (rms * GROWTH**j); COARSE_HIDDEN: from this hidden
# size the JAX judge fits knobs.coarse_directions only; VISIBLE: a direction whose pooled <Jc, Jc>
# is below this times the largest is invisible; ALIAS: directions with |cos| > 1 - ALIAS are one
# direction (named together). These and the allowance's TWIN_SPREAD, DRIFT_FLOOR, FLOOR_HIDDEN:
# oracle/judge/probe/calibration.py.
# A correct engine may multiply by weights stored in its dtype or wider: the drift is tested
# against d - s * d_w, s in [0, 1] (d_w: what rounding the weights to the dtype alone gives); |z|
# is the smallest over s.
WEIGHT_SHARES = tuple(np.linspace(0.0, 1.0, 11))
# Rounding noise also drifts a little by itself, at second order (normalising a noisy vector
# shrinks it by ~ sigma**2 / 2). What it gives along each direction is measured on the noise twin
# (the same estimator over each twin sample's error, SAMPLES per request): a correct engine's drift,
# beyond the weights' share, lies between 0 and rho times the twin's mean drift (rounding with up to
# rho times the twin's error energy, rho the largest energy the precision verdict allows at the
# model's hidden size: allowance_rho), widened by TWIN_SPREAD standard errors of that mean and by
# drift_floor(hidden), what the twin does not draw (calibration.py: DRIFT_FLOOR up to FLOOR_HIDDEN,
# shrinking as (FLOOR_HIDDEN / hidden) ** FLOOR_POWER above). Where no twin applies (the JAX judge's
# sensitivities) the allowance is [-DRIFT_FLOOR, DRIFT_FLOOR].


def request_stats(model, tokens, loops, obs, dtype: str = "float32", fwd: Forwards | None = None) -> tuple:
    """(b [P], G [P, P], values, bw [P], bt [S, P] or None) over one request's observations at its
    committed tokens (set_stats), on fwd: the run's forwards (oracle/judge/probe/forwards.py; None:
    made for this call)."""
    return set_stats(model, obs, *of(model, fwd).probe_forwards([], [span(tokens, loops, obs)], dtype)[1][0])


def set_stats(model, obs, fd: tuple, tw: tuple | None) -> tuple:
    """(b [P], G [P, P], values, bw [P], bt [S, P] or None): b = J^T W e and G = J^T W J over one
    observation set, J by forward finite differences of drift_model.forward (FP64) at its committed
    tokens; bw = J^T W e_w, where e_w is what storing the weights in the backend's dtype alone
    changes; bt[s] = J^T W e_s for each noise-twin sample s (oracle/judge/probe/noise.py; None for a
    dtype without a twin): what rounding alone does to the estimates. fd, tw: its forwards
    (forwards.Forwards.probe_forwards: the finite-difference batch and the forward with the weights
    in the dtype; the twin's center and samples, or None)."""
    P = len(knobs.params(model.cfg.num_layers))
    fw, fr = fd
    groups: dict = {}
    for key, got in obs.items():  # value groups (kind, depth[, layer]): positions, values
        g = groups.setdefault((key[0],) + key[2:], ([], []))
        g[0].append(key[1])
        g[1].append(got)
    b, G, bw, n = np.zeros(P), np.zeros((P, P)), np.zeros(P), 0
    bt = None if tw is None else np.zeros((SAMPLES, P))
    for gkey, (pos, got) in groups.items():
        if gkey[0] in ("k", "v"):
            val, ref_w = fw[gkey[0]][gkey[1]][gkey[2]], fr[gkey[0]][gkey[1]][gkey[2]]
            twin = None if tw is None else (tw[0][gkey[0]][gkey[1]][gkey[2]], tw[1][gkey[0]][gkey[1]][gkey[2]])
        else:
            val, ref_w = fw["logits"][gkey[1]], fr["logits"][gkey[1]]
            twin = None if tw is None else (tw[0]["logits"][gkey[1]], tw[1]["logits"][gkey[1]])
        pos = np.asarray(pos)
        val = val[:, pos].reshape(P + 1, len(pos), -1)  # [1 + P, values, n]
        c = val[0]
        J = (val[1:] - c) / FD_STEP
        e = np.stack([np.asarray(x, np.float64).reshape(-1) for x in got]) - c
        ew = ref_w[0, pos].reshape(len(pos), -1) - c
        ok = np.isfinite(e) & np.isfinite(ew)
        depth = gkey[1]
        rms = np.sqrt(np.mean(np.sum(np.where(ok, c, 0.0) ** 2, axis=1)))
        w = 1.0 / max(rms * GROWTH**depth, 1e-30) ** 2
        if ok.all():
            Jf, ef, ewf = J.reshape(P, -1), e.ravel(), ew.ravel()
        else:
            Jf, ef, ewf = J[:, ok], e[ok], ew[ok]
        b += w * (Jf @ ef)
        bw += w * (Jf @ ewf)
        G += w * (Jf @ Jf.T)
        if twin is not None:  # each twin sample's error against the twin's own center
            et = (np.asarray(twin[1][:, pos], np.float64) - np.asarray(twin[0][:, pos], np.float64)).reshape(
                SAMPLES, len(pos), -1
            )
            bt += w * (np.where(ok, et, 0.0).reshape(SAMPLES, -1)[:, ok.ravel()] @ Jf.T)
        n += ef.size
    return b, G, n, bw, bt


# ---- the verdict over the directions tested (knobs.directions) ----


@dataclass(slots=True)
class Estimate:
    label: str
    drift: float  # mean over requests of the estimated relative drift
    se: float  # its standard error over requests
    t: float
    explained: float  # pooled (c.b)^2 / (c.G.c): the error this direction alone explains
    weights: float = 0.0  # the drift that storing the weights in the backend's dtype alone gives
    allowance: tuple = (-DRIFT_FLOOR, DRIFT_FLOOR)  # the rounding allowance beyond the weights' share (lo, hi)

    def line(self) -> str:
        return f"{self.label} {1 + self.drift:.4f} ± {self.se:.4f} (z = {self.t:.1f})"

    def to_json(self) -> dict:
        return {
            "parameter": self.label,
            "scale": 1 + self.drift,
            "se": self.se,
            "z": self.t,
            "weights_alone": 1 + self.weights,
            "allowance": list(self.allowance),
        }


@dataclass(slots=True)
class DriftReport:
    ok: bool
    requests: int
    threshold: float
    estimates: list = field(default_factory=list)
    invisible: list = field(default_factory=list)
    failure: str = ""
    seconds: float = 0.0
    values: int = 0

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "requests": self.requests,
            "threshold": self.threshold,
            "failure": self.failure,
            "family_alpha": FAMILY_ALPHA,
            "values": self.values,
            "seconds": round(self.seconds, 2),
            "invisible": self.invisible,
            "estimates": [e.to_json() for e in self.estimates],
        }


def drift_floor(hidden: int) -> float:
    """What the twin does not draw, at this hidden size: DRIFT_FLOOR up to FLOOR_HIDDEN, then
    DRIFT_FLOOR * (FLOOR_HIDDEN / hidden) ** FLOOR_POWER."""
    return DRIFT_FLOOR * float((FLOOR_HIDDEN / max(hidden, FLOOR_HIDDEN)) ** FLOOR_POWER)


def allowance_rho(hidden: int) -> float:
    """The error energy (x the twin's) whose rounding drift a correct engine may show: the largest
    the precision verdict allows any kind of value group at this hidden size."""
    return max(precision_limits(hidden).values())


def twin_allowance(xt: np.ndarray, floor: float = DRIFT_FLOOR, rho: float | None = None) -> tuple[float, float]:
    """(lo, hi): the drift rounding alone may give along one direction, from the twin samples'
    estimates xt [requests, SAMPLES]: between 0 and rho (default RHO) times their mean, widened
    by TWIN_SPREAD standard errors of that mean (over requests) and by floor (drift_floor of the model)."""
    per = xt.mean(axis=1)
    mean = float(per.mean())
    se = float(per.std(ddof=1) / np.sqrt(len(per))) if len(per) > 1 else abs(mean)
    ends = (0.0, (RHO if rho is None else rho) * mean)
    return min(ends) - TWIN_SPREAD * se - floor, max(ends) + TWIN_SPREAD * se + floor


def verdict(
    stats: list, dirs: list, reproduce: str = "", floor: float = DRIFT_FLOOR, rho: float | None = None
) -> DriftReport:
    """The drift verdict from per-request (b, G, values, bw[, bt]) along dirs, the directions tested
    ((name, c) pairs: knobs.directions, every parameter per layer, or knobs.coarse_directions). With
    every request's bt (the twin samples' J^T W e), each direction's rounding allowance is the twin's
    (rho: allowance_rho of the model's hidden size; None: RHO) widened by floor (drift_floor of the
    model's hidden size); else the flat DRIFT_FLOOR."""
    Gs, bs = np.stack([s[1] for s in stats]), np.stack([s[0] for s in stats])
    bws = np.stack([s[3] for s in stats])
    bts = np.stack([s[4] for s in stats]) if all(len(s) > 4 and s[4] is not None for s in stats) else None
    Gp = Gs.sum(0)
    power = [c @ Gp @ c for _, c in dirs]
    top = max(power)
    tested, invisible = [], []
    for (name, c), pw in zip(dirs, power):
        if pw <= VISIBLE * top:
            invisible.append(name)
            continue
        for k, (names, c2, pw2) in enumerate(tested):  # an alias of a direction already tested
            if abs(c @ Gp @ c2) >= (1 - ALIAS) * np.sqrt(pw * pw2):
                tested[k] = (names + [name], c2, pw2)
                break
        else:
            tested.append(([name], c, pw))
    n = len(stats)
    thr = drift_stats.threshold(len(tested), n)
    est = []
    for names, c, pw in tested:
        a = np.einsum("p,rpq,q->r", c, Gs, c)
        keep = a > 0
        x, xw = (bs[keep] @ c) / a[keep], (bws[keep] @ c) / a[keep]
        lo, hi = (
            twin_allowance(bts[keep] @ c / a[keep, None], floor, rho)
            if bts is not None
            else (-DRIFT_FLOOR, DRIFT_FLOOR)
        )
        mean, se, t, s = min(
            (drift_stats.beyond_interval(x - s * xw, lo, hi) + (s,) for s in WEIGHT_SHARES), key=lambda r: abs(r[2])
        )
        est.append(
            Estimate(
                " = ".join(names),
                mean + s * float(np.mean(xw)),
                se,
                t,
                float((bs.sum(0) @ c) ** 2 / pw),
                float(np.mean(xw)),
                (lo, hi),
            )
        )
    bad = [e for e in est if abs(e.t) > thr]
    rep = DriftReport(not bad, n, thr, est, invisible, values=sum(s[2] for s in stats))
    if bad:
        worst = max(bad, key=lambda e: e.explained)
        rep.failure = (
            f"{worst.line()}: a systematic error, not rounding (weights rounded to the dtype alone give "
            f"{1 + worst.weights:.4f}; |z| > {thr:.2f} over {n} requests, "
            f"family-wise false-alarm rate {FAMILY_ALPHA:g})"
            + (f"; {len(bad) - 1} more directions past the threshold" if len(bad) > 1 else "")
            + (f" (reproduce: {reproduce})" if reproduce else "")
        )
    return rep


def fit_drift(model, merged: dict, dirs: list, reproduce="", stats_fn=None, made=None, allowance=()) -> DriftReport:
    """The drift fit over the probe's observations (merged: observations.observed's, rid -> sets)
    along dirs (verdict's).
    stats_fn(tokens, loops, obs) -> (b, G, values, bw): the JAX judge's sensitivities (its jvp,
    judge_jax/drift.py); None: finite differences of the NumPy model (set_stats) on made, the sets'
    forwards in order (forwards.Forwards.probe_forwards' made). allowance: (floor, rho) of the twin
    allowance (default: drift_floor and allowance_rho of the model's hidden size). rep.seconds: this
    fit's own time."""
    t0 = time.perf_counter()
    per: dict = {}
    flat = [(rid, s) for rid, sets in merged.items() for s in sets]
    for k, (rid, (tokens, loops, obs)) in enumerate(flat):
        new = set_stats(model, obs, *made[k]) if stats_fn is None else stats_fn(tokens, loops, obs)
        per[rid] = new if rid not in per else tuple(x + y for x, y in zip(per[rid], new))
    H = model.cfg.hidden_size
    floor, rho = allowance or (drift_floor(H), allowance_rho(H))
    rep = verdict(list(per.values()), dirs, reproduce, floor, rho)
    rep.seconds = time.perf_counter() - t0
    return rep
