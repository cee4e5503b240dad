"""scripts/gpu_parity_full.py (gpu_tests/parity_full.py) on the CPU at the tiny preset: the
torch-cpu backend against the JAX judge, and the replay path for a backend that does not draw
host uniforms."""
from __future__ import annotations

import json

SMALL = ["--preset", "tiny", "--cases", "2", "--rounds", "1", "--max-prompt", "8", "--max-requests", "3"]


def load_script():
    from gpu_tests import parity_full
    return parity_full


def test_cases_cover_the_grid():
    mod = load_script()
    pairs = mod.make_cases(12, 49152, 2048, 64, 24576, 2, 0)
    cases = [c for c, _ in pairs]
    assert {(c.d, c.D) for c in cases} == {(1, 4), (2, 4), (3, 4)}
    assert {m for _, m in pairs} == {"block", "loop"} and {c.policy for c in cases} == {"sequential", "fixed"}
    assert max(len(c.prompts) for c in cases) == 64
    assert max(len(p) for c in cases for p in c.prompts) == 2048 and min(len(p) for c in cases for p in c.prompts) == 1
    assert all(len(c.prompts) * mod.max_len(c) <= 24576 for c in cases)          # the memory bound
    Ts = {t for c in cases for r in c.rounds for t in r.values()}
    assert Ts == set(range(1, 10))
    kinds = {p.greedy for c in cases for p in c.params}
    assert kinds == {True, False}


def test_torch_cpu_against_the_judge(tmp_path, capsys):
    out = tmp_path / "summary.json"
    rc = load_script().main(SMALL + ["--backend", "torch-cpu", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    s = json.loads(out.read_text())
    assert s["cases"] == 2 and not s["failed"] and s["kv_writes"] > 0 and s["logits"] > 0
    assert s["max_rel_err"]["logits"] <= 1e-5 and "OK in" in text


def test_device_rng_backend_is_replayed(monkeypatch, capsys):
    from judge_jax.backend import make_jax_backend
    mod = load_script()
    device_rng = make_jax_backend()
    device_rng.host_rng = False          # as if it drew its own uniforms: the judge must replay them
    seen = []

    import oracle.judge.cases as cases
    import oracle.judge.runner as runner

    def fake_run(backend, model, sc, mode, replay=None, _run=runner.run_scenario, **kw):
        seen.append(replay is not None)
        return _run(backend, model, sc, mode, replay, **kw)

    monkeypatch.setattr(mod, "load_backend", lambda spec: device_rng)
    monkeypatch.setattr(cases, "run_scenario", fake_run)      # the backend's side (judge_mode)
    monkeypatch.setattr(runner, "run_scenario", fake_run)     # the judge's side (judge_run)
    assert mod.main(SMALL + ["--backend", "device-rng"]) == 0, capsys.readouterr().out
    assert seen == [False, True, False, True]       # backend first, then the judge in replay mode
