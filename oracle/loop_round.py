"""The loop round (docs/DESIGN.md section 4): mixed-depth waves. Request i's offset o at
depth j runs in wave w = o*d_i + j; the whole wave schedule is planned from the counts and
depths before compute."""
from __future__ import annotations

from .phases import RoundState, draft_head, finish_round, run_call, verify_head
from .schedule import loop_waves


def loop_round(model, kv, requests, counts, d, D, round_idx=0, policy="sequential"):
    st = RoundState(model, kv, requests, counts, d, D, round_idx, policy, "loop")
    plan = loop_waves(st.counts, d, D)          # every wave's rows and draft-head rows (d_i - 1)
    for wave in plan.calls:
        run_call(st, list(wave.rows))           # rows of one request at several depths
        draft_head(st, list(wave.draft_head))   # only rows that just reached depth d-1
    logits = verify_head(st)                    # one head call over all sum(T_i) rows
    return finish_round(st, logits)
