"""Malformed output, checked once at the side boundary: every backend run (and every recorded
trace) is read here before any noise twin, fit or comparison sees a value of it.

A round is malformed where a request's part cannot be a round's output (decisions.trace_problem:
tokens outside [0, V), negative ids included; a wrong number of drafts; NaN or +inf logits, or
logits of the wrong shape; emitted tokens that break the commit rule), where its per-request fields
are impossible (trace_problems.request_problem), or where a K/V write is not [kv heads, head_dim] numbers.
"""

from __future__ import annotations

import numpy as np

from .decisions import trace_problem
from ...trace_problems import request_problem


def kv_problem(tr, cfg) -> str | None:
    """The first K/V write of round trace tr that is not numbers of shape [kv heads, head_dim]."""
    want = (cfg.num_kv_heads, cfg.head_dim)
    for (rid, pos, j, l), (_, k, v) in tr.kv_writes.items():
        for name, x in (("K", k), ("V", v)):
            x = np.asarray(x)
            if x.dtype.kind not in "fiu" or x.shape != want:
                return (
                    f"request {rid}: the {name} write at position {pos}, depth {j}, layer {l} has shape "
                    f"{list(x.shape)} ({x.dtype}), expected numbers of shape {list(want)}"
                )
    return None


def malformed_rounds(traces, cfg=None, vocab: int | None = None) -> list[str]:
    """'round N request R: why' for every request whose part of a round cannot be a round's output,
    and 'round N: why' for a round whose fields or K/V writes are impossible. cfg: the model's
    config (the vocabulary and the K/V shape); vocab alone where no config is known."""
    V = cfg.vocab_size if cfg is not None else vocab
    out = []
    for n, t in enumerate(traces):
        where, before = f"round {getattr(t, 'round', n)}", len(out)
        for rid, T in zip(t.requests, t.token_counts):
            try:
                why = trace_problem(t, rid, T, V)
            except Exception as e:  # noqa: BLE001 -- whatever the trace holds
                why = f"cannot be judged ({type(e).__name__}: {e})"
            if why:
                out.append(f"{where} request {rid}: {why}")
        problem = None if len(out) > before else request_problem(t)
        if problem is None and cfg is not None:
            problem = kv_problem(t, cfg)
            where += " " if problem else ""
        elif problem:
            where += ": "
        if problem:
            out.append(f"{where}{problem}")
    return out


def side_problem(traces, cfg=None, vocab: int | None = None) -> str:
    """The first malformed round of a run, in one line ("" if none), with how many more there are."""
    bad = malformed_rounds(traces, cfg, vocab)
    if not bad:
        return ""
    return bad[0] + (f" (+{len(bad) - 1} more malformed)" if len(bad) > 1 else "")
