"""The loop round (docs/DESIGN.md section 4): mixed-depth waves. Request i's offset o at
depth j runs in wave w = o*d_i + j; the calls are the schedule planner's loop plan
(oracle/schedule.py `loop_waves`), planned from the counts and depths before compute.
`phases`: the phases to run (default oracle.phases.PHASES)."""

from __future__ import annotations

from .phases import PHASES, Phases, RoundState
from .schedule import loop_waves


def loop_round(model, kv, requests, counts, d, D, round_idx=0, policy="sequential", phases: Phases = PHASES):
    st = RoundState(model, kv, requests, counts, d, D, round_idx, policy, "loop", phases)
    for wave in loop_waves(st.counts, d, D).calls:
        phases.run_call(st, list(wave.rows))  # rows of one request at several depths
        phases.draft_head(st, list(wave.draft_head))  # only rows that just reached depth d_i - 1
    logits = phases.verify_head(st)  # one head call over all sum(T_i) rows
    return phases.finish_round(st, logits)
