"""What a backend committed in a run, as the probe's verdicts take it (oracle/judge/probe/drift.py,
oracle/judge/probe/precision.py): every K/V write and the draft and verification logits at positions
whose whole context was committed; `observed`: both verdicts' inputs, made once."""

from __future__ import annotations

import numpy as np

from ...traces import depths_of


def observations(runs) -> dict:
    """rid -> (tokens, loops, {key: value}) over the given runs of one request set; key is
    ("k" | "v", pos, depth, layer) or ("draft" | "verify", pos, depth). Only positions whose
    whole context is committed (pos <= len(tokens) - 2), each from the last round that wrote it."""
    out = {}
    for r in runs:
        for tr in r.traces:
            for rid in tr.requests:
                tokens = r.tokens[rid]
                _, _, obs = out.setdefault((id(r), rid), (tokens, depths_of(tr, rid)[1], {}))
                last, start = len(tokens) - 2, len(tr.prefix[rid]) - 1
                for (q, pos, j, l), (_, k, v) in tr.kv_writes.items():
                    if q == rid and pos <= last:
                        obs[("k", pos, j, l)], obs[("v", pos, j, l)] = k, v
                d, D = depths_of(tr, rid)
                for kind, logits, j in (("draft", tr.draft_logits, d - 1), ("verify", tr.verify_logits, D - 1)):
                    for (q, o), lg in logits.items():
                        if q == rid and start + o <= last:
                            obs[(kind, start + o, j)] = lg
    return out


def observed(runs) -> tuple:
    """(seen, merged): what both probe verdicts read, made once. seen: observations(runs) without
    the requests that committed nothing (the precision fit's); merged: rid -> [(tokens, loops, obs)],
    a request's runs that committed the same tokens one set, each value the mean of the runs' (their
    rounding errors average; one sensitivity pass serves both), and a run that committed other
    tokens a set of its own (the drift fit's)."""
    seen = {key: v for key, v in observations(runs).items() if v[2]}
    out: dict = {}
    for (_, rid), (tokens, loops, obs) in seen.items():
        sets = out.setdefault(rid, [])
        same = next((s for s in sets if s[0] == list(tokens) and s[1] == loops), None)
        if same is None:
            sets.append((list(tokens), loops, {k: [v] for k, v in obs.items()}))
        else:
            for k, v in obs.items():
                same[2].setdefault(k, []).append(v)
    merged = {
        rid: [(t, lo, {k: np.mean(np.stack(v), axis=0) for k, v in obs.items()}) for t, lo, obs in sets]
        for rid, sets in out.items()
    }
    return seen, merged
