"""A minimal plug-in backend: the shape of what `python -m oracle check --backend` judges.

    python -m oracle check --backend examples.plugin_backend:make_backend          # passes
    python -m oracle check --backend examples.plugin_backend:make_faulty_backend   # fails, naming
                                                     # the logit index and both values

(run from the repository root, or with PYTHONPATH set to it). Your engine replaces the
wrapped reference session below with its own: `session()` returns an object with `add`,
`step`, `remove` and `tokens` (and optionally `submit`/`collect`), and `step` returns an
`oracle.traces.RoundTrace` (docs/DESIGN.md section 9; README "Plugging in your engine").

This one wraps the FP32 reference (oracle.reference_backend.ReferenceBackend) and declares itself
`dtype = "float32"`, `exact = False`: it is judged by the float32 row of
oracle.tolerances.TOLERANCES, the row an FP32 engine of your own gets: relative error 1e-5
at depth 0, growing 1.5x per loop (`1e-5 * 1.5**depth`: a verification logit at D = 4, depth 3,
may differ by 3.375e-05, the `tolerance` a failure line prints).
`make_faulty_backend` is the one-line change that makes it fail: it adds 0.5 to the
verification logit of token 17 in every trace it returns.
"""

from __future__ import annotations

import numpy as np

from oracle.reference_backend import ReferenceBackend


class PluginSession:
    """One generation session: the reference's, with an optional logit perturbation."""

    def __init__(self, inner, perturb):
        self.inner, self.perturb = inner, perturb

    def add(self, rid, prompt, params, replay=None, depths=None):
        """Prefill `prompt` for request `rid` at every depth."""
        self.inner.add(rid, prompt, params, replay=replay, depths=depths)

    def step(self, counts):
        """One round: {rid: T_i} -> RoundTrace."""
        trace = self.inner.step(counts)
        if self.perturb is not None:
            token, delta = self.perturb
            for key, logits in trace.verify_logits.items():
                logits = np.array(logits, copy=True)
                logits[token] += delta
                trace.verify_logits[key] = logits
        return trace

    def remove(self, rid):
        """Drop request `rid`; returns its committed tokens."""
        return self.inner.remove(rid)

    def tokens(self, rid):
        """The committed tokens of request `rid`."""
        return self.inner.tokens(rid)


class PluginBackend:
    """What the oracle reads: name, dtype, exact, policies and session()."""

    name = "example-plugin"
    dtype = "float32"  # a row of oracle.tolerances.TOLERANCES
    exact = False  # judged by tolerance, not bit for bit
    policies = ("sequential", "fixed")  # RNG policies it supports
    host_rng = True  # uniforms from each request's seeded PCG64 stream

    def __init__(self, perturb=None):
        self.perturb = perturb

    def session(self, model, d, D, mode, policy="sequential"):
        """A session over `model` (the reference LoopedModel) for d/D loops, mode block|loop."""
        return PluginSession(ReferenceBackend().session(model, d, D, mode, policy), self.perturb)


def make_backend():
    """The factory `--backend examples.plugin_backend:make_backend` calls."""
    return PluginBackend()


def make_faulty_backend():
    """The same backend with one logit perturbed: the judge must fail it."""
    return PluginBackend(perturb=(17, 0.5))
