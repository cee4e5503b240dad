"""The precision verdict over the drift probe's runs (docs/DESIGN.md, "Reduced precision"): `fit`
takes what the backend committed (observations.py `observed`), each request's error energy over the
noise twin's, value group by value group (`request_energies`: noise.numpy_energy_fn, or the JAX
judge's twin), and the verdict over them at the model's hidden size (precision.verdict, its limits
calibration.precision_limits)."""

from __future__ import annotations

import time

import numpy as np

from .calibration import SIGMA, precision_limits
from .precision import PrecisionReport, verdict


def fit(model, seen: dict, dtype: str, energy_fn, reproduce: str = "") -> PrecisionReport | None:
    """The precision verdict over the drift probe's observations (seen: observations.observed's,
    (run, rid) -> (tokens, loops, obs); None: no twin for this dtype), each kind of value group
    against its limit at the model's hidden size (calibration.precision_limits). energy_fn: the
    twin's (noise.numpy_energy_fn over Forwards.probe_forwards' twins, or the JAX judge's)."""
    if dtype not in SIGMA:
        return None
    t0 = time.perf_counter()
    H = model.cfg.hidden_size
    energies = request_energies(seen, energy_fn)
    rep = verdict(energies, dtype, reproduce, limits=precision_limits(H), hidden=H)
    rep.seconds = time.perf_counter() - t0
    return rep


def request_energies(seen: dict, energy_fn) -> dict:
    """rid -> {group: (m, values)}: m the mean r_v^2 over the request's values in the group, its
    runs (block, loop; seen: `fit`'s) averaged. energy_fn: the twin (noise.numpy_energy_fn, or the JAX
    judge's judge_jax/twin.py, on the device)."""
    per: dict = {}
    for (_, rid), (tokens, loops, o) in seen.items():
        for g, (s, n) in energy_fn(tokens, loops, o).items():
            if n:
                per.setdefault(rid, {}).setdefault(g, []).append((s / n, n))
    return {
        rid: {g: (float(np.mean([m for m, _ in ms])), sum(n for _, n in ms)) for g, ms in groups.items()}
        for rid, groups in per.items()
    }
