"""The block round (docs/DESIGN.md section 4): draft offsets one after another with d_i
calls each, then one packed verification of loops d_i..D_i-1 over every offset. With ragged
depths a call holds the rows whose request runs that depth; calls without rows are skipped.
`phases`: the phases to run (default oracle.phases.PHASES; meta_tests pass faulty ones)."""
from __future__ import annotations

from .phases import PHASES, Phases, RoundState


def block_round(model, kv, requests, counts, d, D, round_idx=0, policy="sequential", phases: Phases = PHASES):
    st = RoundState(model, kv, requests, counts, d, D, round_idx, policy, "block", phases)
    counts, dep = st.counts, st.depths                    # dep[i] = (d_i, D_i)
    # draft phase: offset o through loops 0..d_i-1, then the draft head draws offset o+1
    for o in range(max(counts)):
        for j in range(max(di for di, _ in dep)):
            rows = [(i, o, j) for i, t in enumerate(counts) if o < t and j < dep[i][0]]   # rows: <= C
            if rows:
                phases.run_call(st, rows)
                phases.draft_head(st, [(i, o) for i, t in enumerate(counts) if o + 1 < t and j == dep[i][0] - 1])
    # verify phase: loops d_i..D_i-1 over all offsets of each request, then one head call
    for j in range(min(di for di, _ in dep), max(Di for _, Di in dep)):
        rows = [(i, o, j) for i, t in enumerate(counts) for o in range(t) if dep[i][0] <= j < dep[i][1]]
        if rows:
            phases.run_call(st, rows)                     # rows: sum(T_i) when depths are shared
    logits = phases.verify_head(st)
    return phases.finish_round(st, logits)
