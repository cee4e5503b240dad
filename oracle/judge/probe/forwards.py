"""The reference's forwards the reduced-precision verdicts read (docs/DESIGN.md, "Reduced
precision"), made in batches and kept for one verdict's run: `Forwards(model)`.

    fd      (tokens, loops, dtype) -> (finite-difference batch, forward with weights in dtype)
            the drift fit's sensitivities (probe_forwards; oracle/judge/probe/drift.py)
    twin    (tokens, loops, dtype, samples, seed) -> (center, twin samples)
            the noise twin (oracle/judge/probe/noise.py twin_bounds; precision.py; drift's twin allowance)

verdict.judge makes one per run and hands it to the cases' twin bounds, the drift fit and the
precision fit, so a context any of them computed is not computed again; it goes with the run.
A forked worker works on its own copy (what it adds stays there). Threads may share one: its
dicts are only read, filled and cleared, so a race costs a forward made twice at most.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import calibration, drift_model, knobs
from .calibration import FD_STEP, SAMPLES, SEED, SIGMA

# SIGMA (the twin's relative noise per rounding), FD_STEP (the finite differences' relative step,
# FP64) and BATCH_ROWS_T / TWIN_ROWS_T (rows x positions of one batched forward: finite differences,
# P + 1 rows per request; twin, `samples` rows per context; contexts batched in order of length,
# right-padded to the chunk's longest): oracle/judge/probe/calibration.py, with their measurements.
# BATCH_ROWS_T and TWIN_ROWS_T are read from calibration at each call (tests set calibration.TWIN_ROWS_T).
# The twin's forwards run in FP32: its noise (SIGMA, ~1e-3 relative) is four orders of magnitude
# above FP32 rounding (6e-8), so FP64 would change its bounds by less than one part in 1e4, at
# about twice the arithmetic cost.
TWIN_PRECISION = np.float32
# Entries kept before a cache is cleared (memory stays bounded on a long run).
FD_KEEP, TWIN_KEEP, ROUNDED_KEEP = 64, 256, 8


def _chunks(ctx: list, rows: int, limit: int):
    """ctx (sorted by length) in chunks of up to `limit` rows x positions, `rows` rows each context
    (a chunk is padded to its last, longest context); one context at least."""
    while ctx:
        n = 1
        while n < len(ctx) and (n + 1) * rows * len(ctx[n]) <= limit:
            n += 1
        yield ctx[:n]
        ctx = ctx[n:]


@dataclass(slots=True)
class Forwards:
    """The forwards of one model, kept for one verdict's run."""

    model: object
    fd: dict = field(default_factory=dict)  # (tokens, loops, dtype) -> (fd batch, rounded forward)
    twin: dict = field(default_factory=dict)  # (tokens, loops, dtype, samples, seed) -> (center, twin)
    weights: dict = field(default_factory=dict)  # dtype -> drift_model.Rounded

    def rounded(self, dtype: str):
        """The model with its weights stored in dtype, built once per dtype."""
        hit = self.weights.get(dtype)
        if hit is None:
            if len(self.weights) >= ROUNDED_KEEP:
                self.weights.clear()
            hit = self.weights[dtype] = drift_model.Rounded(self.model, dtype)
        return hit

    def batch_forwards(self, contexts, dtype: str) -> dict:
        """(tokens, loops) -> (finite-difference batch [1 + P rows: center, then one step per
        parameter], forward with the weights stored in dtype [1 row]) for every context; those not
        yet computed are batched over contexts (BATCH_ROWS_T), each row the same values as a
        forward per context."""
        model = self.model
        P = len(knobs.params(model.cfg.num_layers))
        out, todo = {}, {}
        for tokens, loops in dict.fromkeys(contexts):
            hit = self.fd.get((tokens, loops, dtype))
            if hit is not None:
                out[(tokens, loops)] = hit
            else:
                todo.setdefault(loops, []).append(tokens)
        if sum(map(len, todo.values())) + len(self.fd) > FD_KEEP:
            self.fd.clear()
        scales = np.ones((P + 1, P))  # [1 + P, P]: row 0 the center, row 1 + p steps parameter p
        scales[1 + np.arange(P), np.arange(P)] += FD_STEP
        rounded = self.rounded(dtype) if todo else None
        for loops, ctx in todo.items():
            for chunk in _chunks(sorted(ctx, key=len), P + 1, calibration.BATCH_ROWS_T):
                n = len(chunk)
                fw = drift_model.forward(
                    model, [list(t) for t in chunk for _ in range(P + 1)], loops, np.tile(scales, (n, 1))
                )  # n * (1 + P) rows
                fr = drift_model.forward(rounded, [list(t) for t in chunk], loops, np.ones((n, P)))  # n rows
                for i, t in enumerate(chunk):
                    hit = out[(t, loops)] = (
                        drift_model.rows(fw, i * (P + 1), (i + 1) * (P + 1), len(t)),
                        drift_model.rows(fr, i, i + 1, len(t)),
                    )
                    self.fd[(t, loops, dtype)] = hit
        return out

    def forwards(self, tokens: tuple, loops: int, dtype: str) -> tuple:
        """(finite-difference batch, forward with the weights stored in dtype) at these tokens."""
        return self.batch_forwards([(tokens, loops)], dtype)[(tokens, loops)]

    def twins(self, contexts, dtype: str, samples: int, seed: int) -> dict:
        """(tokens, loops) -> (center [1 row], twin [samples rows]) forwards of each context; the
        noise is seeded by the context, so the block and loop runs of one case (same contexts) get
        the same bounds, computed once. The contexts not yet computed run as one batch per loop
        count (TWIN_ROWS_T; each context its own rows and its own noise stream: the same values
        as one forward per context)."""
        model, sigma = self.model, SIGMA[dtype]
        P = len(knobs.params(model.cfg.num_layers))
        out, todo = {}, {}
        for tokens, loops in contexts:
            hit = self.twin.get((tokens, loops, dtype, samples, seed))
            if hit is not None:
                out[(tokens, loops)] = hit
            else:
                todo.setdefault(loops, {})[tokens] = None
        if sum(map(len, todo.values())) + len(self.twin) > TWIN_KEEP:
            self.twin.clear()
        for loops, ctx in todo.items():
            for chunk in _chunks(sorted(ctx, key=len), samples, calibration.TWIN_ROWS_T):
                n = len(chunk)
                rngs = [np.random.default_rng([seed, len(t), *t]) for t in chunk]
                center = drift_model.forward(
                    model, [list(t) for t in chunk], loops, np.ones((n, P)), precision=TWIN_PRECISION
                )  # n rows
                twin = drift_model.forward(
                    model,
                    [list(t) for t in chunk for _ in range(samples)],
                    loops,
                    np.ones((n * samples, P)),
                    noise=(rngs, sigma),
                    precision=TWIN_PRECISION,
                )  # n * samples rows
                for i, t in enumerate(chunk):
                    hit = out[(t, loops)] = (
                        drift_model.rows(center, i, i + 1, len(t)),
                        drift_model.rows(twin, i * samples, (i + 1) * samples, len(t)),
                    )
                    self.twin[(t, loops, dtype, samples, seed)] = hit
        return out

    def probe_forwards(self, twin_contexts: list, fd_contexts: list, dtype: str) -> tuple:
        """(twins, made): the probe fits' NumPy forwards, each context's made once, in batches: the
        noise twin's (center, samples) at twin_contexts and fd_contexts (twins: (tokens, loops) ->
        forwards; {} for a dtype without a twin), then the finite differences and the forward with
        the weights in dtype at fd_contexts (batch_forwards). made: for each of fd_contexts in order,
        (its finite-difference batch and rounded forward, its twin or None): drift.fit_drift's."""
        contexts = list(dict.fromkeys([*twin_contexts, *fd_contexts]))
        twins = self.twins(contexts, dtype, SAMPLES, SEED) if dtype in SIGMA else {}
        fds = self.batch_forwards(fd_contexts, dtype) if fd_contexts else {}
        return twins, [(fds[c], twins.get(c)) for c in fd_contexts]


def drift_contexts(merged: dict) -> list:
    """The context (span) of each observation set of merged (observations.observed's), in order."""
    return [span(t, lo, obs) for sets in merged.values() for t, lo, obs in sets]


def span(tokens, loops: int, obs) -> tuple:
    """(the committed tokens a request's observations depend on, up to its last observed position,
    loops): the context of its forwards."""
    return tuple(tokens[: max(k[1] for k in obs) + 1]), loops


def of(model, fwd: Forwards | None) -> Forwards:
    """fwd (made for this model), or a fresh Forwards for one call where none is given."""
    if fwd is None:
        return Forwards(model)
    if fwd.model is not model:
        raise ValueError("a Forwards serves the model it was made for")
    return fwd
