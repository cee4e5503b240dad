import json
import subprocess
import sys


def run(*args):
    r = subprocess.run([sys.executable, "-m", "oracle", "check", *args, "--json"], capture_output=True, text=True)
    return r.returncode, (json.loads(r.stdout) if r.stdout.startswith("{") else None), r.stderr


def test_torch_cpu_backend_passes_check():
    rc, j, err = run("--backend", "torch-cpu")
    assert rc == 0, err
    assert j["ok"] and j["backend"] == "torch-cpu" and j["kv_writes_compared"] > 0
    assert j["max_rel_err"]["logits"] < 1e-5


def test_torch_cpu_bf16_backend_passes_check():
    """The reduced-precision backend CI can run: BF16 on the CPU, the bfloat16 row."""
    rc, j, err = run("--backend", "torch-cpu-bf16")
    assert rc == 0, (err, [c for c in (j or {}).get("checks", []) if not c["ok"]][:3])
    assert j["dtype"] == "bfloat16" and j["tolerance_row"] == "bfloat16" and not j["exact"]
    assert j["kv_writes_compared"] > 0 and 0 < j["max_rel_err"]["kv"] < 0.1


def test_jax_backend_passes_check():
    rc, j, err = run("--backend", "jax")
    assert rc == 0, (err, [c for c in (j or {}).get("checks", []) if not c["ok"]][:3])
    assert j["backend"] == "jax" and j["tolerance_row"] == "float32" and j["max_rel_err"]["logits"] < 1e-5


def test_faulty_backend_fails_check_and_names_the_place():
    rc, j, _ = run(
        "--backend", "meta_tests.faulty:make_kv_wrong_plane", "--rounds", "1", "--counts", "3,2", "--no-shrink"
    )
    assert rc == 1 and not j["ok"]
    bad = [c for c in j["checks"] if not c["ok"]]
    assert any("KV" in c["detail"] or "kv" in c["name"] for c in bad), bad


def test_replayed_reference_reproduces_a_run():
    """The replay path used for inexact backends: the reference consuming a run's uniforms."""
    from oracle.judge.runner import REFERENCE, judge_run, run_scenario
    from oracle.cli.catalogue import default_cases
    from oracle.judge.comparison.compare import compare_runs
    from oracle.checkpoint import build_model

    m = build_model("tiny")
    for case in default_cases(m.cfg.vocab_size):
        got = run_scenario(REFERENCE, m, case, "loop")
        assert compare_runs(judge_run(m, case, "block", replay_from=got).traces, got.traces, "exact").ok, case.name
