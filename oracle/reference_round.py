"""The block round (shared/DESIGN.md section 4): draft offsets one after another with d
calls each, then one packed verification of loops d..D-1 over every offset."""
from __future__ import annotations

from .phases import RoundState, draft_head, finish_round, run_call, verify_head


def block_round(model, kv, requests, counts, d, D, round_idx=0, policy="sequential"):
    st = RoundState(model, kv, requests, counts, d, D, round_idx, policy, "block")
    counts = st.counts
    # draft phase: offset o through loops 0..d-1, then the draft head draws offset o+1
    for o in range(max(counts)):
        for depth in range(d):
            run_call(st, [(i, o, depth) for i, t in enumerate(counts) if o < t])   # rows: C_o
        draft_head(st, [(i, o) for i, t in enumerate(counts) if o + 1 < t])
    # verify phase: loops d..D-1 over all sum(T_i) rows, then one head call
    for depth in range(d, D):
        run_call(st, [(i, o, depth) for i, t in enumerate(counts) for o in range(t)])
    logits = verify_head(st)
    return finish_round(st, logits)
