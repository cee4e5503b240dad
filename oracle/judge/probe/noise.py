"""The calibrated noise bound of reduced precision (docs/DESIGN.md, "Reduced precision").

What may a correct implementation of a precision differ by, on these very inputs? The twin
answers it by simulation: drift_model.forward with every weight and every stored intermediate
multiplied by (1 + SIGMA[dtype] * u) (u: mean 0, variance 1, uniform), SAMPLES times per round and request, over the
round's own context (the request's committed tokens plus the round's drafts). The spread of a
value over the samples is its noise scale s_v: it is large exactly where the model amplifies
rounding (a sandwich norm after an attention output that nearly cancels), small elsewhere.

    a KV write or logits vector v fails if  ||got - ref|| > K_VALUE * s_v
        (s_v: RMS over samples of ||twin - center||)
    a token divergence is excused only if  some part of its margin <= K_MARGIN * s_m
        (s_m: RMS of that part's change on the twin's logits)

`twin_bounds(model, ref_traces, dtype)` returns the `Bounds` compare_runs takes (bounds=); with
no bounds compare_runs uses the fixed row of TOLERANCES. `numpy_energy_fn(made)`, over the twin's
forwards (Forwards.probe_forwards), gives the precision verdict (oracle/judge/probe/precision.py) each
request's error energy over the twin's, value group by value group.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .calibration import K_MARGIN, K_VALUE, SAMPLES, SEED, SIGMA
from .forwards import Forwards, of, span
from ...traces import depths_of

# SIGMA[dtype] (the relative noise per rounding), SAMPLES, SEED, K_VALUE (a value may differ by up to
# this many noise scales), K_MARGIN (a divergence is excused within this many noise scales of
# flipping) and RHO: oracle/judge/probe/calibration.py, with the measurements that set them.


@dataclasses.dataclass(slots=True)
class Bounds:
    """Noise scales of one reference run, keyed like its traces: kv[(round, rid, pos, depth,
    layer)] = s (k and v together), logits[(round, kind, rid, o)] = (s, twin logits [S, V])."""

    kv: dict
    logits: dict
    scale: float = 1.0  # sqrt(2) when both sides are noisy (a backend's block vs loop runs)
    contexts: dict = dataclasses.field(default_factory=dict)  # (round, rid) -> (tokens, (d, D)) computed on
    # where the judge's side is a device model (the JAX judge): no per-value scales (kv, logits empty: the
    # fixed row), and a divergent request's twin logits made when its margin is asked for (margin_z):
    # twin_logits(tokens, loops, positions) -> [S, loops, positions, V] (capability twin_logits_fn)
    twin_logits: object = None

    def kv_allowed(self, rnd, key, ref_norm: float) -> float | None:
        s = self.kv.get((rnd,) + tuple(key))
        return None if s is None else K_VALUE * self.scale * s / max(ref_norm, 1e-30)

    def logits_allowed(self, rnd, kind, rid, o, ref_norm: float) -> float | None:
        s = self.logits.get((rnd, kind, rid, o))
        return None if s is None else K_VALUE * self.scale * s[0] / max(ref_norm, 1e-30)

    def excuse(self, a, b, rid, T, div) -> tuple | None:
        """Whether the reference's decision was within K_MARGIN noise scales of flipping: each part
        of its margin (the decision's own, each filter's kept set) moves by some RMS amount when
        the reference's logits are replaced by each twin sample's (same tokens, same uniforms); the
        divergence is excused iff some part is within K_MARGIN of its own scale. (excused, that
        part's noise scales, K_MARGIN, "decision margin 0.0023" or "filter margin ..."); None: no twin."""
        z = self.margin_z(a, b, rid, T, div)
        if z is None:
            return None
        n = int(np.argmin(z))
        part = "decision" if n == 0 else "filter"
        return bool(z[n] <= K_MARGIN), float(z[n]), float(K_MARGIN), f"{part} margin {div.parts[n]:.3g}"

    def margin_z(self, a, b, rid, T, div) -> np.ndarray | None:
        """Each part of the divergence's margin over the RMS of its change across the twin's samples."""
        from ..comparison.decisions import first_divergence

        twins = {
            (kind, o): self.logits.get((a.round, kind, rid, o))
            for kind in ("draft_logits", "verify_logits")
            for (q, o) in getattr(a, kind)
            if q == rid
        }
        if twins and any(t is None for t in twins.values()) and self.twin_logits is not None:
            twins = self._judge_twins(a, rid, list(twins))
        if not twins or any(t is None for t in twins.values()):
            return None
        moved = []
        for m in range(SAMPLES):  # sample m: every logits vector of the request at once
            new = {kind: dict(getattr(a, kind)) for kind in ("draft_logits", "verify_logits")}
            for (kind, o), (_, t) in twins.items():
                new[kind][(rid, o)] = t[m % len(t)].astype(np.float32)
            twin_div = first_divergence(dataclasses.replace(a, **new), b, rid, T)
            parts = (
                twin_div.parts
                if twin_div is not None and len(twin_div.parts) == len(div.parts)
                else (0.0,) * len(div.parts)
            )
            with np.errstate(invalid="ignore"):  # inf - inf: a filter that cuts nothing
                moved.append(np.nan_to_num(np.subtract(parts, div.parts), nan=0.0, posinf=0.0, neginf=0.0))
        scale = self.scale * np.sqrt(np.mean(np.square(moved), axis=0))  # [parts]
        parts = np.asarray(div.parts, np.float64)
        z = np.full(len(parts), np.inf)
        np.divide(parts, scale, out=z, where=np.isfinite(parts) & (scale > 0))
        z[parts == 0] = 0.0  # a tie: nothing to flip
        return z

    def _judge_twins(self, a, rid, keys) -> dict:
        """(kind, offset) -> (None, the twin samples' logits [S, V]) of request rid in round a, from
        the judge's twin over the round's context (the logits of offset o: position start + o, loop
        d - 1 for a draft's, D - 1 for a verification's)."""
        tokens, start, (d, D) = _contexts(a)[rid]
        pos = sorted({start + o for _, o in keys})
        t = self.twin_logits(tokens, D, pos)  # [S, D, len(pos), V]
        return {
            (kind, o): (None, t[:, (d if kind == "draft_logits" else D) - 1, pos.index(start + o)]) for kind, o in keys
        }


def judge_bounds(twin_logits, scale: float = 1.0) -> Bounds:
    """The Bounds of a comparison against the judge's side where the judge offers twin logits
    (twin_logits: twin_logits_fn(model, dtype)): the fixed row for values, the twin for tokens."""
    return Bounds({}, {}, scale=scale, twin_logits=twin_logits)


def _contexts(tr):
    """rid -> (tokens of the round's context, start position, (d, D))."""
    out = {}
    for rid in tr.requests:
        prefix = list(tr.prefix[rid])
        out[rid] = (prefix + list(tr.drafts.get(rid, [])), len(prefix) - 1, depths_of(tr, rid))
    return out


def twin_bounds(
    model,
    ref_traces,
    dtype: str,
    samples: int = SAMPLES,
    seed: int = SEED,
    reuse: Bounds | None = None,
    fwd: Forwards | None = None,
) -> Bounds | None:
    """The twin's noise scales for every KV write and logits vector of ref_traces (None: no twin
    for this dtype). reuse: bounds computed before (on the reference's run of the same scenario):
    a (round, request) with the context they were computed on takes its scales from them. fwd:
    the run's forwards (oracle/judge/probe/forwards.py; None: made for this call)."""
    if dtype not in SIGMA:
        return None
    kv, logits, seen = {}, {}, {}
    contexts = [(tr, _contexts(tr)) for tr in ref_traces]
    known = lambda rnd, rid, c: reuse is not None and reuse.contexts.get((rnd, rid)) == (tuple(c[0]), c[2])
    if reuse is not None and all(known(tr.round, rid, c) for tr, ctx in contexts for rid, c in ctx.items()):
        return Bounds(reuse.kv, reuse.logits, contexts=reuse.contexts)  # every context as before: its scales
    fw = of(model, fwd).twins(
        dict.fromkeys(
            (tuple(t), D)
            for tr, ctx in contexts
            for rid, (t, _, (_, D)) in ctx.items()
            if not known(tr.round, rid, ctx[rid])
        ),
        dtype,
        samples,
        seed,
    )
    for tr, ctx in contexts:
        writes: dict = {}  # rid -> (depth, layer) -> positions
        for q, pos, j, l in tr.kv_writes:
            writes.setdefault(q, {}).setdefault((j, l), []).append(pos)
        for rid, (tokens, start, (d, D)) in ctx.items():
            seen[(tr.round, rid)] = (tuple(tokens), (d, D))
            lkeys = [
                (kind, q, o)
                for kind, keys in (("draft_logits", tr.draft_logits), ("verify_logits", tr.verify_logits))
                for (q, o) in keys
                if q == rid
            ]
            if known(tr.round, rid, ctx[rid]):  # the same context: the same scales
                for (j, l), pos in writes.get(rid, {}).items():
                    kv.update((k, reuse.kv[k]) for k in ((tr.round, rid, p, j, l) for p in pos) if k in reuse.kv)
                logits.update((k, reuse.logits[k]) for k in ((tr.round,) + x for x in lkeys) if k in reuse.logits)
                continue
            center, twin = fw[(tuple(tokens), D)]
            for (j, l), pos in writes.get(rid, {}).items():
                at = np.asarray(pos)
                dk = twin["k"][j][l][:, at] - center["k"][j][l][:, at]  # [S, writes, nkv, hd]
                dv = twin["v"][j][l][:, at] - center["v"][j][l][:, at]
                s = np.sqrt(np.mean(np.sum(dk * dk + dv * dv, axis=(2, 3)), axis=0))
                for p, v in zip(pos, s.tolist()):
                    kv[(tr.round, rid, p, j, l)] = v
            for kind, q, o in lkeys:
                j = d - 1 if kind == "draft_logits" else D - 1
                t, c = twin["logits"][j][:, start + o], center["logits"][j][:, start + o]  # [S, V], [1, V]
                logits[(tr.round, kind, q, o)] = (float(np.sqrt(np.mean(np.sum((t - c) ** 2, axis=1)))), t)
    return Bounds(kv, logits, contexts=seen)


# ---- the twin's error energies (the precision verdict's samples, oracle/judge/probe/precision.py) ----


def numpy_energy_fn(made: dict):
    """energy_fn(tokens, loops, obs) -> {group: (sum of r_v^2, values)} on the NumPy twin, made: each
    request's span (forwards.span) -> its twin's (center, samples), as Forwards.twins or
    probe_forwards make them. The JAX judge's counterpart is judge_jax/twin.py's make_energy_fn."""

    def energy_fn(tokens, loops, obs):
        center, twin = made[span(tokens, loops, obs)]
        sums: dict = {}
        for vkey, got in obs.items():
            kind, pos = vkey[0], vkey[1]
            if kind in ("k", "v"):
                c, t = center[kind][vkey[2]][vkey[3]][0, pos], twin[kind][vkey[2]][vkey[3]][:, pos]
            else:
                c, t = center["logits"][vkey[2]][0, pos], twin["logits"][vkey[2]][:, pos]
            got = np.asarray(got, np.float64)
            if got.shape != c.shape:
                continue  # malformed: the comparison's to fail, not a sample here
            c, t = np.asarray(c, np.float64), np.asarray(t, np.float64)
            s2 = float(np.mean(np.sum((t - c) ** 2, axis=tuple(range(1, t.ndim)))))
            if not s2 > 0:
                continue
            e = np.where(np.isfinite(c), got - c, 0.0)  # where the reference is -inf (masked) too: 0
            acc = sums.setdefault((kind,) + tuple(vkey[2:]), [0.0, 0])
            acc[0] += float(np.sum(np.where(np.isfinite(e), e, np.inf) ** 2)) / s2
            acc[1] += 1
        return {g: (s, n) for g, (s, n) in sums.items()}

    return energy_fn
