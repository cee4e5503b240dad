"""The one runner: a scenario through a backend's session (`run_scenario`), the judge's side of
a comparison (`judge_run`, by default on REFERENCE, the FP32 reference), and the uniforms a
replay consumes. The verdicts built on it are oracle/judge/plans/cases.py and oracle/judge/probe/probe_runs.py.

A scenario is any object with d, D, policy, prompts, params, `params_for(model)` (the params run on
that model), `depths` (None, or one (d_i, D_i) per request) and `ops`: a sequence of
("add", rid) | ("step", ((rid, T_i), ...)) | ("remove", rid): `Case` (oracle/judge/scenario.py) is
one, the property suite's drawn scenarios included. A backend is what oracle/runtime/contract.py says:
a LoadedBackend (load_backend), or an object made directly, whose Capabilities `capabilities` reads.
"""

from __future__ import annotations

import numpy as np

from ..runtime.backends import WrongReturn, load_backend
from ..runtime.contract import LoadedBackend, capabilities

REFERENCE = load_backend("reference")  # the judge's default side (oracle/reference_backend.py)


class ScenarioRun:
    """What one scenario did on one backend in one mode: its traces and committed tokens."""

    def __init__(self, backend_name: str, mode: str):
        self.backend_name, self.mode = backend_name, mode
        self.traces: list = []
        self.tokens: dict = {}  # rid -> committed tokens (at removal or at the end)
        self.session = None

    def events(self, rid) -> list:
        return [e for tr in self.traces for e in tr.rng_events if e.request == rid]

    def label(self) -> str:
        return f"{self.backend_name} {self.mode}"


def run_scenario(
    bk: LoadedBackend,
    model,
    sc,
    mode: str,
    replay: dict | None = None,
    after_step=None,
    submit_ahead: bool = False,
    on_session=None,
    **options,
) -> ScenarioRun:
    """Every op of `sc` on a fresh session of backend `bk`. replay: rid -> uniforms to consume
    instead of the request's generator. after_step(session, trace): called after each round.
    submit_ahead: consecutive rounds are all submitted before the first is collected (backends
    with submit/collect). on_session(session): called before the first op (the localizer arms its
    capture there). options: the backend's session options (e.g. graphs="off")."""
    s = bk.session(model, sc.d, sc.D, mode, sc.policy, **options)
    if on_session is not None:
        on_session(s)
    out = ScenarioRun(bk.name, mode)
    out.session = s
    pending = []  # submitted, not yet collected (submit_ahead)
    finished = set()  # requests that stopped: they left the batch
    depths = sc.depths
    params = sc.params_for(model)  # a Case derives some from the model
    for op, arg in list(sc.ops) + [("flush", None)]:
        if op != "step" and pending:
            for handle in pending:
                out.traces.append(returned(s.collect(handle), "collect()"))
                finished |= set(out.traces[-1].finished)
                if after_step is not None:
                    after_step(s, out.traces[-1])
            pending = []
        if op == "add":
            kw = {} if replay is None else {"replay": replay.get(arg, [])}
            if depths is not None:
                kw["depths"] = tuple(depths[arg])
            s.add(arg, list(sc.prompts[arg]), params[arg], **kw)
        elif op == "step":
            counts = {rid: t for rid, t in arg if rid not in finished}
            if not counts:
                continue
            if submit_ahead:
                pending.append(s.submit(counts))
                continue
            tr = returned(s.step(counts), "step()")
            finished |= set(tr.finished)
            out.traces.append(tr)
            if after_step is not None:
                after_step(s, tr)
        elif op == "flush":
            pass
        elif op == "remove":
            out.tokens[arg] = list(returned(s.remove(arg), "remove()"))
        else:
            raise ValueError(f"unknown scenario op {op!r}")
    for op, arg in sc.ops:
        if op == "add" and arg not in out.tokens:
            out.tokens[arg] = list(returned(s.tokens(arg), "tokens()"))
    return out


def returned(value, call: str):
    """value, when a session's `call` may return it (step() and collect(): a RoundTrace; remove()
    and tokens(): a sequence of token ids); else WrongReturn naming the call and the type."""
    from ..traces import RoundTrace

    if call in ("step()", "collect()"):
        ok, want = isinstance(value, RoundTrace), "RoundTrace"
    else:
        ok, want = isinstance(value, (list, tuple, np.ndarray)), "a list of token ids"
    if not ok:
        raise WrongReturn(f"{call} returned {type(value).__name__}, expected {want} (oracle/runtime/contract.py)")
    return value


def replay_lists(other: ScenarioRun, sc) -> dict:
    """Per request: the uniforms the backend consumed, in order, then padding (consumed only by
    the reference after a divergence, where the judge no longer compares that request)."""
    n_rounds = sum(op == "step" for op, _ in sc.ops)
    pad = list(np.random.default_rng(2**31 - 1).random(19 * (n_rounds + 1)))
    return {rid: [e.value for e in other.events(rid)] + pad for rid in range(len(sc.prompts))}


def judge_run(
    model, sc, mode: str, replay_from: ScenarioRun | None = None, judge: LoadedBackend | None = None, **options
) -> ScenarioRun:
    """The judge's side of a comparison: `judge` (default REFERENCE, the FP32 reference) on the
    scenario; with replay_from, consuming the uniforms that run drew."""
    return run_scenario(
        judge or REFERENCE,
        model,
        sc,
        mode,
        replay=None if replay_from is None else replay_lists(replay_from, sc),
        **options,
    )


def draws_host_stream(bk: LoadedBackend) -> bool:
    """Whether a backend's uniforms are each request's seeded host stream (its Capabilities'
    host_rng: exact backends and `host_rng = True`): then the reference draws its own and the
    order is checked too; else the reference replays the backend's recorded uniforms (a device
    RNG need not match)."""
    return capabilities(bk).host_rng
