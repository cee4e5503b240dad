"""The block round (docs/DESIGN.md section 4): draft offsets one after another with d_i
calls each, then one packed verification of loops d_i..D_i-1 over every offset. The calls
are the schedule planner's block plan (oracle/schedule.py `block_calls`): with ragged depths
a call holds the rows whose request runs that depth, and calls without rows are skipped.
`phases`: the phases to run (default oracle.phases.PHASES; meta_tests pass faulty ones)."""

from __future__ import annotations

from .phases import PHASES, Phases, RoundState
from .schedule import block_calls


def block_round(model, kv, requests, counts, d, D, round_idx=0, policy="sequential", phases: Phases = PHASES):
    st = RoundState(model, kv, requests, counts, d, D, round_idx, policy, "block", phases)
    for call in block_calls(st.counts, d, D).calls:
        phases.run_call(st, list(call.rows))  # draft: rows <= C; verify: sum(T_i) when depths are shared
        phases.draft_head(st, list(call.draft_head))  # offsets whose request just reached depth d_i - 1
    logits = phases.verify_head(st)  # one head call over all sum(T_i) rows
    return phases.finish_round(st, logits)
