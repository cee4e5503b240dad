"""The precision verdict (docs/DESIGN.md, "Reduced precision"): does a backend compute or store
below the precision it declares? A KV cache that silently became FP8 stays inside every per-value
bound; its error *energy* does not.

For each value v the backend committed in the drift probe (every K and V write, every draft and
verification logits vector at a position whose whole context was committed), r_v = ||got - ref|| /
s_v, where ref is the reference's FP32 forward at the backend's own tokens and s_v the noise twin's
scale of that value (oracle/judge/probe/noise.py: the RMS of ||twin - ref|| over SAMPLES forwards with
every weight and stored intermediate rounded-as-noise to the declared dtype). A correct
implementation of the dtype gives E[r_v^2] near 1 (less where it keeps more precision).

    group g      (kind, depth[, layer]): kind k | v | draft | verify
    sample       one request: m_gr = mean over its values in g of r_v^2 (its block and loop runs averaged)
    statistic    x_gr = log m_gr; t_g = (mean_r x_gr - log limit_g) / se_g, Student's t, n - 1 dof
    verdict      fail iff t_g > t_crit(one-sided FAMILY_ALPHA / groups, n - 1) for some g

limit_g is the energy a correct backend may show in a group of g's kind, as a multiple of the
twin's, at the model's hidden size: measured on legitimate bfloat16 implementations
(calibration.precision_limits; docs/results.md, "The precision limit"). The report gives every
group's energy E_g = exp(mean_r x_gr) as effective significant bits, bits = BITS - log2(E_g) / 2,
and per kind the largest energy, its limit and the smallest energy the run could have detected,
limit * exp(t_crit * se) of its best-measured group (headroom and power).

This module is the verdict over the samples (`verdict`) and its report; the samples are made from the
probe's runs, and the verdict fitted, in oracle/judge/probe/precision_fit.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import drift_stats
from .calibration import FAMILY_ALPHA, RHO

BITS = {"bfloat16": 8, "float16": 11}  # significant bits of the declared dtype
KIND = {"k": "K writes", "v": "V writes", "draft": "draft logits", "verify": "verification logits"}


def group_label(g: tuple) -> str:
    return f"{KIND[g[0]]}, depth {g[1]}" + (f", layer {g[2]}" if len(g) > 2 else "")


@dataclass(slots=True)
class Group:
    key: tuple
    energy: float  # exp(mean_r log m_gr): the group's error energy over the twin's
    se: float  # standard error of mean_r log m_gr
    t: float  # (mean log m - log RHO) / se
    values: int
    bits: float  # effective significant bits: BITS - log2(energy) / 2
    requests: int = 0  # the requests the group was seen in (its samples)
    threshold: float = 0.0  # its one-sided t threshold (n - 1 degrees of freedom, Bonferroni)
    limit: float = RHO  # the energy a correct implementation may show in this group (x the twin's)

    @property
    def detectable(self) -> float:
        """The smallest energy this group's test would have called (z = threshold at this se)."""
        return self.limit * math.exp(self.threshold * self.se) if np.isfinite(self.se) else math.inf

    def line(self, dtype: str) -> str:
        return (
            f"{group_label(self.key)}: error energy {self.energy:.2f}x the {dtype} twin's (limit {self.limit:.2f}x, "
            f"z = {self.t:.1f}): about {self.bits:.1f} significant bits where {dtype} has {BITS[dtype]}"
        )

    def to_json(self) -> dict:
        return {
            "group": group_label(self.key),
            "kind": KIND[self.key[0]],  # the group's place as fields (the report's heatmap reads them)
            "depth": self.key[1],
            "layer": self.key[2] if len(self.key) > 2 else None,
            "energy": self.energy,
            "se_log": self.se,
            "z": self.t,
            "values": self.values,
            "bits": self.bits,
            "requests": self.requests,
            "threshold": self.threshold,
            "limit": self.limit,
            "detectable": self.detectable,
        }


@dataclass(slots=True)
class PrecisionReport:
    ok: bool
    dtype: str
    requests: int
    threshold: float
    rho: float = RHO  # the largest limit of any kind (the limits themselves: limits)
    groups: list = field(default_factory=list)
    failure: str = ""
    seconds: float = 0.0
    limits: dict = field(default_factory=dict)  # kind -> the energy a correct implementation may show
    hidden: int | None = None  # the model's hidden size the limits are for

    def kinds(self) -> list[dict]:
        """Per kind of value group, in compute order: the largest energy (and its group), the limit,
        and the smallest energy this run could have detected (its best-measured group's)."""
        out = []
        for kind in KIND:
            gs = [g for g in self.groups if g.key[0] == kind]
            if not gs:
                continue
            top = max(gs, key=lambda g: g.energy)
            out.append(
                {
                    "kind": KIND[kind],
                    "groups": len(gs),
                    "largest": top.energy,
                    "largest_group": group_label(top.key),
                    "largest_z": top.t,
                    "limit": top.limit,
                    "headroom": top.limit / top.energy if top.energy > 0 else math.inf,
                    "detectable": min(g.detectable for g in gs),
                    # the largest limit under which this run would have failed a group of this kind
                    "critical_limit": max(g.energy * math.exp(-g.threshold * g.se) for g in gs),
                }
            )
        return out

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "dtype": self.dtype,
            "requests": self.requests,
            "threshold": self.threshold,
            "rho": self.rho,
            "limits": {KIND[k]: v for k, v in self.limits.items()},
            "hidden": self.hidden,
            "family_alpha": FAMILY_ALPHA,
            "failure": self.failure,
            "seconds": round(self.seconds, 2),
            "kinds": self.kinds(),
            "groups": [g.to_json() for g in self.groups],
        }


def one_sided_threshold(n_tests: int, n_samples: int, family_alpha: float = FAMILY_ALPHA) -> float:
    """The t beyond which a group's energy exceeds RHO: one-sided, Bonferroni over n_tests."""
    return drift_stats.t_critical(2 * family_alpha / max(1, n_tests), n_samples - 1)


def verdict(
    energies: dict, dtype: str, reproduce: str = "", rho: float = RHO, limits: dict | None = None, hidden=None
) -> PrecisionReport:
    """The precision verdict from request_energies. Each group is tested over its own requests (its
    own degrees of freedom) against its kind's limit (limits: kind -> limit, e.g. precision_limits
    of the model's hidden size; a kind not in it, or no limits: rho); a group seen in one request
    only is not tested; no group at all fails."""
    limits = {k: (limits or {}).get(k, rho) for k in KIND}
    by_group: dict = {}
    for groups in energies.values():
        for g, (m, n) in groups.items():
            by_group.setdefault(g, []).append((m, n))
    n_req = len(energies)
    tested = {g: v for g, v in by_group.items() if len(v) >= 2}
    thr = one_sided_threshold(len(tested), max(2, n_req))
    out = []
    for g in sorted(tested, key=lambda k: (["k", "v", "draft", "verify"].index(k[0]),) + k[1:]):
        ms = np.array([max(m, 1e-300) for m, _ in tested[g]])
        x = np.log(ms)
        mean, se, _ = drift_stats.one_sample_t(x)
        lim = limits[g[0]]
        if not np.isfinite(mean):  # a value not finite where the reference's is
            t = math.inf
        else:
            t = (mean - math.log(lim)) / se if se > 0 else (math.inf if mean > math.log(lim) else -math.inf)
        e = math.exp(mean) if np.isfinite(mean) else math.inf
        out.append(
            Group(
                g,
                e,
                se,
                t,
                sum(n for _, n in tested[g]),
                BITS[dtype] - math.log2(e) / 2,
                len(ms),
                one_sided_threshold(len(tested), len(ms)),
                lim,
            )
        )
    bad = [g for g in out if g.t > g.threshold]
    seen = {g.key[0] for g in out}
    rep = PrecisionReport(
        bool(out) and not bad,
        dtype,
        n_req,
        thr,
        max((limits[k] for k in seen), default=rho),
        out,
        limits={k: v for k, v in limits.items() if k in seen},
        hidden=hidden,
    )
    if not out:
        rep.failure = "no value group was observed in two or more probe requests: nothing to judge the precision by" + (
            f" (reproduce: {reproduce})" if reproduce else ""
        )
    elif bad:
        first = min(bad, key=lambda g: compute_order(g.key))
        worst = max(bad, key=lambda g: g.energy)
        rep.failure = (
            f"{first.line(dtype)}: computed or stored below {dtype}, the first group past the threshold "
            f"in compute order (the error enters there or just before)"
            + (f"; the largest: {group_label(worst.key)}, {worst.energy:.2f}x" if worst is not first else "")
            + f"; {len(bad)} of {len(out)} groups past it (a correct {dtype} implementation stays within "
            f"{first.limit:.2f}x the twin's energy in {KIND[first.key[0]]}"
            + (f" at hidden size {hidden}" if hidden else "")
            + f"; z > {first.threshold:.2f} over {first.requests} requests, "
            f"family-wise false-alarm rate {FAMILY_ALPHA:g})" + (f" (reproduce: {reproduce})" if reproduce else "")
        )
    return rep


def compute_order(g: tuple) -> tuple:
    """Where a group's values are made in a forward: by depth, then layer (K before V), the logits
    after the depth's last layer (draft before verification)."""
    if g[0] in ("k", "v"):
        return (g[1], g[2], g[0] == "v")
    return (g[1], float("inf"), g[0] == "verify")


def report_lines(p: dict) -> list[str]:
    """The precision section of `check --backend`'s text output: per kind its largest energy, limit
    and the smallest energy the run could have detected (headroom and power), then every group's
    effective precision."""
    head = (
        f"  precision: {len(p['groups'])} value groups over {p['requests']} probe requests ({p['seconds']} s); "
        f"a group's error energy beyond its kind's limit (x the twin's) at z > {p['threshold']:.2f} fails "
        f"(family-wise false-alarm rate {p['family_alpha']:g}): "
        + ("every group within" if p["ok"] else "BELOW THE DECLARED PRECISION")
    )
    kinds = [
        f"    {k['kind']}: largest {k['largest']:.2f}x ({k['largest_group']}), limit {k['limit']:.2f}x"
        + (f" at hidden {p['hidden']}" if p.get("hidden") else "")
        + f", detectable from {k['detectable']:.2f}x"
        for k in p.get("kinds", [])
    ]
    return (
        [head]
        + kinds
        + [
            f"    {g['group']}: energy {g['energy']:.2f}x (z = {g['z']:.1f}), about {g['bits']:.1f} bits"
            for g in p["groups"]
        ]
    )
