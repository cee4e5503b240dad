"""The drift probe's runs (docs/DESIGN.md, "Reduced precision"): seeded requests through the backend
in both modes (`probe_runs`), checked for malformed output before a fit reads them (`run_probe`). Both
verdicts over them: oracle/judge/probe/drift.py and precision_fit.py."""

from __future__ import annotations

import time

from .calibration import PROBE_GROUP, PROBE_REQUESTS
from ..comparison.malformed import side_problem
from ..scenario import make_case
from ..runner import run_scenario as run
from ...sampling_params import SamplingParams

# The probe's requests run PROBE_GROUP (calibration.py) at a time (a round names one group): every call then has at
# most PROBE_GROUP * 5 = 15 rows, the rows a decode step of a small batch has, and on CUDA the
# torch backend takes its small-M (GEMV) path for all of them; LOOPSPEC_GEMV=0 judges the cuBLAS
# path instead. With all 24 in every round the calls had 24-120 rows and never took it.


def probe_case(vocab: int, total_loops: int, n: int = PROBE_REQUESTS, seed: int = 12345, rounds: int = 4):
    """n requests (half greedy, half sampled at T = 1), prompts of 24-40 tokens (RoPE's effect
    grows with the position), K = 4 per round, PROBE_GROUP requests a round."""
    D = max(2, min(total_loops, 4))
    params = [SamplingParams() if i % 2 == 0 else SamplingParams(temperature=1.0, seed=seed + i) for i in range(n)]
    groups = [range(g, min(n, g + PROBE_GROUP)) for g in range(0, n, PROBE_GROUP)]
    return make_case(
        "drift probe",
        [{i: 5 for i in grp} for grp in groups for _ in range(rounds)],
        max(1, D // 2),
        D,
        params,
        seed=seed,
        prompt_len=(24, 40),
        vocab=vocab,
    )


def probe_runs(backend, model, n: int = PROBE_REQUESTS, seed: int = 12345) -> dict:
    """The probe through the backend in both modes: mode -> ScenarioRun."""
    case = probe_case(model.cfg.vocab_size, model.cfg.total_loops, n, seed)
    case.policy = case.policy if case.policy in backend.policies else backend.policies[0]
    return {mode: run(backend, model, case, mode) for mode in ("block", "loop")}


def run_probe(backend, model, n: int) -> tuple:
    """probe_runs, checked: (the probe's runs, "", seconds), or (None, the backend's exception or the
    first malformed round in a line, seconds): a malformed probe is a failed check naming the place,
    not a fit."""
    t0 = time.perf_counter()
    try:
        runs = probe_runs(backend, model, n)
    except Exception as e:  # noqa: BLE001 -- judged: a failed drift check
        return None, f"drift probe: the backend raised {type(e).__name__}: {e}", time.perf_counter() - t0
    problem = probe_problem(model, runs)
    return (None if problem else runs), problem, time.perf_counter() - t0


def probe_problem(model, runs: dict) -> str:
    """The first malformed round of the probe's runs (malformed.side_problem), as a line naming the
    mode; "" if none."""
    for mode, r in runs.items():
        why = side_problem(r.traces, model.cfg)
        if why:
            return f"drift probe [{mode}]: {why}"
    return ""
