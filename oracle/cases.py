"""The one runner: a scenario through a backend's session, and a backend judged against the
reference on it (used by `check`, `check --backend`, the property suite and gpu_tests).

A scenario is any object with d, D, policy, prompts, params and `ops`: a sequence of
("add", rid) | ("step", ((rid, T_i), ...)) | ("remove", rid). `oracle.check.Case` and
`property_tests.strategies.Scenario` both are one.
"""
from __future__ import annotations

import numpy as np

from .backends import ReferenceBackend
from .compare import Report, compare_runs

MODES = ("block", "loop")
REFERENCE = ReferenceBackend()


class Run:
    """One scenario run on one backend in one mode."""

    def __init__(self, backend_name: str, mode: str):
        self.backend_name, self.mode = backend_name, mode
        self.traces: list = []
        self.tokens: dict = {}            # rid -> committed tokens (at removal or at the end)
        self.session = None

    def events(self, rid) -> list:
        return [e for tr in self.traces for e in tr.rng_events if e.request == rid]

    def label(self) -> str:
        return f"{self.backend_name} {self.mode}"


def run(bk, model, sc, mode: str, replay: dict | None = None, after_step=None, submit_ahead: bool = False,
        **options) -> Run:
    """Every op of `sc` on a fresh session of backend `bk`. replay: rid -> uniforms to consume
    instead of the request's generator. after_step(session, trace): called after each round.
    submit_ahead: consecutive rounds are all submitted before the first is collected (backends
    with submit/collect). options: the backend's session options (e.g. graphs="off")."""
    s = bk.session(model, sc.d, sc.D, mode, sc.policy, **options)
    out = Run(getattr(bk, "name", type(bk).__name__), mode)
    out.session = s
    pending = []                                  # submitted, not yet collected (submit_ahead)
    finished = set()                              # requests that stopped: they left the batch
    depths = getattr(sc, "depths", None)
    for op, arg in list(sc.ops) + [("flush", None)]:
        if op != "step" and pending:
            for h in pending:
                out.traces.append(s.collect(h))
                finished |= set(out.traces[-1].finished)
                if after_step is not None:
                    after_step(s, out.traces[-1])
            pending = []
        if op == "add":
            kw = {} if replay is None else {"replay": replay.get(arg, [])}
            if depths is not None:
                kw["depths"] = tuple(depths[arg])
            s.add(arg, list(sc.prompts[arg]), sc.params[arg], **kw)
        elif op == "step":
            counts = {rid: t for rid, t in arg if rid not in finished}
            if not counts:
                continue
            if submit_ahead:
                pending.append(s.submit(counts))
                continue
            tr = s.step(counts)
            finished |= set(tr.finished)
            out.traces.append(tr)
            if after_step is not None:
                after_step(s, tr)
        elif op == "flush":
            pass
        elif op == "remove":
            out.tokens[arg] = list(s.remove(arg))
        else:
            raise ValueError(f"unknown scenario op {op!r}")
    for op, arg in sc.ops:
        if op == "add" and arg not in out.tokens:
            out.tokens[arg] = list(s.tokens(arg))
    return out


def replay_lists(other: Run, sc) -> dict:
    """Per request: the uniforms the backend consumed, in order, then padding (consumed only by
    the reference after a divergence, where the judge no longer compares that request)."""
    n_rounds = sum(op == "step" for op, _ in sc.ops)
    pad = list(np.random.default_rng(2**31 - 1).random(19 * (n_rounds + 1)))
    return {rid: [e.value for e in other.events(rid)] + pad for rid in range(len(sc.prompts))}


def reference_run(model, sc, mode: str, replay_from: Run | None = None, judge=None) -> Run:
    """A reference run; with replay_from, in replay mode consuming that run's uniforms.
    judge: the backend computing the judge's side (default the NumPy reference)."""
    return run(judge or REFERENCE, model, sc, mode,
               replay=None if replay_from is None else replay_lists(replay_from, sc))


def draws_host_stream(bk) -> bool:
    """Whether a backend's uniforms are each request's seeded host stream (exact backends and
    `host_rng = True`): then the reference draws its own and the order is checked too; else
    the reference replays the backend's recorded uniforms (a device RNG need not match)."""
    return bool(bk.exact or getattr(bk, "host_rng", False))


def judge_mode(bk, model, sc, mode: str, reproduce: str = "", case: str = "", judge=None) -> tuple[Report, Run]:
    """The backend's run in one mode against the judge's (default the reference), by the
    backend's tolerance row; device-RNG backends against the judge replaying their uniforms."""
    got = run(bk, model, sc, mode)
    ref = reference_run(model, sc, mode, replay_from=None if draws_host_stream(bk) else got, judge=judge)
    return compare_runs(ref.traces, got.traces, "exact" if bk.exact else bk.dtype, reproduce, case), got


def judge_backend(bk, model, sc, reproduce: str = "", case: str = "", catch: bool = False, judge=None) -> list:
    """[(label, Report)]: backend block vs judge block, backend loop vs judge loop, and backend
    block vs backend loop. catch=True: a backend that raises is a failed check."""
    out, runs = [], {}
    for mode in MODES:
        label = f"{case} [{mode}]" if case else mode
        try:
            rep, runs[mode] = judge_mode(bk, model, sc, mode, reproduce, label, judge)
        except Exception as e:                     # noqa: BLE001 -- judged, not aborted
            if not catch:
                raise
            rep = Report(reproduce=reproduce)
            rep.fail("backend", f"{label}: the backend raised {type(e).__name__}: {e}")
            rep.finish()
        out.append((label, rep))
    if len(runs) == 2:
        label = f"{case} [block vs loop]" if case else "block vs loop"
        out.append((label, compare_runs(runs["block"].traces, runs["loop"].traces,
                                        "exact" if bk.exact else bk.dtype, reproduce, label)))
    return out
