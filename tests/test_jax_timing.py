"""The JAX judge's round at a tiny shape on the CPU: what crosses between host and device
(counted by the judge itself and by gpu_tests/judge_timing.py), no recompiles in steady
state, both KV fetch modes match the reference, and scripts/gpu_judge_time.py runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from gpu_tests.judge_timing import count_transfers, time_judge_round
from judge_jax.backend import make_jax_backend
from oracle.judge.runner import REFERENCE, run_scenario as run
from oracle.judge.comparison.compare import compare_runs
from oracle.sampling_params import SamplingParams as SP

ROOT = Path(__file__).resolve().parents[1]
# scripts/gpu_judge_time.py at the smallest shape, one repeat (the CPU runs of its GPU timing)
JUDGE_TIME_TINY = [
    sys.executable,
    str(ROOT / "scripts" / "gpu_judge_time.py"),
    "--preset",
    "tiny",
    "--C",
    "2",
    "--ctx",
    "8",
    "--repeats",
    "1",
]


def session(tiny, mode="block", kv_fetch="async", C=3, n=9):
    s = make_jax_backend().session(tiny, 2, 4, mode, max_requests=C, max_len=64, kv_fetch=kv_fetch)
    for rid in range(C):
        s.add(rid, [(rid + 3 * p) % 64 for p in range(n)], SP(seed=rid))
    return s


@pytest.mark.parametrize("kv_fetch", ["async", "thread", "round", "pinned"])
def test_what_crosses_per_round(tiny, kv_fetch):
    """Per round (K=4, d=2, D=4: 12 calls, 5 head calls): up, one index vector per call and per
    head call (the call's vector names the K/V rows it gathers too; "round": one more, its
    gather at the end); down, the logits of each head call and the KV writes (one copy per
    call, or one per round). No hidden state crosses, nothing recompiles, and every
    host-to-device transfer is explicit (the guard refuses implicit ones)."""
    s = session(tiny, kv_fetch=kv_fetch)
    counts = {rid: 5 for rid in range(3)}
    s.step(counts)  # compiles
    s.step(counts)
    before = dict(s.jm.counts)
    with count_transfers() as seen:
        tr = s.step(counts)
    got = {k: s.jm.counts[k] - before[k] for k in before}
    with jax.transfer_guard_host_to_device("disallow"):  # an implicit transfer would raise
        s.step(counts)
    fetches = 1 if kv_fetch == "round" else 12
    assert got["calls"] == 12 and tr.stats["head_calls"] == 5
    assert got["h2d"] == 12 + 5 + (kv_fetch == "round") and got["d2h"] == 5 + fetches
    assert seen["h2d"] == got["h2d"] and seen["d2h"] == got["d2h"] and seen["compiles"] == 0
    assert len(tr.kv_writes) == 3 * 5 * 4 * tiny.cfg.num_layers


@pytest.mark.parametrize(
    "mode,options",
    [
        ("block", {"kv_fetch": "round"}),
        ("loop", {"kv_fetch": "round"}),
        ("block", {"kv_fetch": "thread"}),
        ("loop", {"kv_fetch": "thread", "rows_bits": 2}),
        ("block", {"kv_fetch": "async"}),
        ("loop", {"kv_fetch": "async", "rows_bits": 1}),
        ("block", {"logits_fetch": "pageable"}),
        ("block", {"unroll": False}),
        ("loop", {"unroll": False, "ctx_bits": 1}),
    ],
)
def test_other_options_match_reference(tiny, mode, options):
    """KV writes fetched once per round, by the fetch thread or copied to pageable host memory at
    the next head call, the heads' logits through jax.device_get, the stacked-weight scan, and
    rows padded to 1 or 2 significant bits judge like the defaults."""
    from tests.test_jax_backend import case

    ref = run(REFERENCE, tiny, case(), mode).traces
    got = run(make_jax_backend(**options), tiny, case(), mode).traces
    rep = compare_runs(ref, got, "float32")
    assert rep.ok, rep.first_failure()
    assert rep.kv_writes_compared > 0


def test_pinned_kv_becomes_trace_entries_while_the_device_works(tiny, monkeypatch):
    """kv_fetch="pinned": at each head call (before the host waits for its logits) the calls whose
    pinned copies are done become trace entries, so flush is left only the rest; the trace's KV
    writes are the reference's. Whether a copy is done at a head call depends on the machine's
    load, so here every call's copy but the newest is waited for first: then each head call must
    stage all of those, and flush the newest if its copy was not done."""
    from judge_jax import backend as jb

    at_flush = []
    flush, kick = jb._RoundModel.flush, jb._RoundModel._kick

    def waited_kick(self):
        jax.block_until_ready([dev[0] for dev, _ in self.pending[:-1]])
        kick(self)

    monkeypatch.setattr(jb._RoundModel, "_kick", waited_kick)
    monkeypatch.setattr(
        jb._RoundModel,
        "flush",
        lambda self, trace=None: at_flush.append((len(self.staged), len(self.pending))) or flush(self, trace),
    )
    s, ref = session(tiny, kv_fetch="pinned"), REFERENCE.session(tiny, 2, 4, "block")
    for rid in range(3):
        ref.add(rid, [(rid + 3 * p) % 64 for p in range(9)], SP(seed=rid))
    counts = {rid: 5 for rid in range(3)}
    for _ in range(2):
        got, want = s.step(counts), ref.step(counts)
        assert sorted(got.kv_writes) == sorted(want.kv_writes)
    # 12 calls a round; the verification head comes after the last: 11 or all 12 staged by then
    assert at_flush and all(staged >= 11 and pending == 12 for staged, pending in at_flush), at_flush
    rep = compare_runs([want], [got], "float32")
    assert rep.ok and rep.kv_writes_compared == len(want.kv_writes), rep.first_failure()


def test_time_judge_round_reports_the_floor(tiny):
    r = time_judge_round(make_jax_backend(), tiny, C=2, ctx=8, repeats=1)
    for mode in ("block", "loop"):
        m = r[mode]
        assert m["median_ms"] > 0 and m["floor_ms"] > 0
        assert m["over_floor"] == pytest.approx(m["median_ms"] / m["floor_ms"], rel=0.02)
        assert (
            m["per_round"]["compiles"] == 0 and m["per_round"]["h2d"] == 17
        )  # an index vector per call (its K/V gather named in it) and per head call
        assert m["per_round"]["kv_donated"] is True  # no call copied the KV planes
        steps = m["probe"]["steps"]
        assert steps["recurrent"]["n"] == 12 and steps["head"]["n"] == 5


def test_a_traced_round_is_read_back_by_phase(tiny, tmp_path):
    """trace_dir: one more round per mode under jax.profiler with the phases annotated; the
    trace is read back (gpu_tests.trace_gaps) into the round's wall time and the host time per
    annotated phase, and the annotations are gone afterwards. (No GPU plane on the CPU: the
    device's idle time is measured on the H200 only.)"""
    import oracle.phases
    import judge_jax.model

    before = (oracle.phases.run_call, judge_jax.model.JaxLoopedModel.call)
    r = time_judge_round(make_jax_backend(), tiny, C=2, ctx=8, repeats=1, trace_dir=tmp_path)
    for mode in ("block", "loop"):
        tg = r[mode]["trace_gaps"]
        host = tg["host_ms"]
        assert {"run_call", "draft_head", "verify_head", "call", "head_rows", "flush"} <= set(host), host
        assert 0 < host["call"] <= host["run_call"] <= tg["wall_ms"]  # nested: the call inside run_call
        assert "idle_ms" not in tg  # no device plane here
    assert (oracle.phases.run_call, judge_jax.model.JaxLoopedModel.call) == before


def test_gpu_judge_time_script_runs_on_the_cpu(tmp_path):
    out = tmp_path / "t.json"
    p = subprocess.run(
        [
            *JUDGE_TIME_TINY,
            "--kv-fetch",
            "both",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(out.read_text())
    assert {"async", "round"} <= set(res) and res["async"]["block"]["floor_ms"] > 0
    assert "measured/floor" in p.stdout


def test_gpu_judge_time_variants_in_one_process(tmp_path):
    """--variant: one model build, each variant timed with its own options; a bad key is refused."""
    out = tmp_path / "v.json"
    script = JUDGE_TIME_TINY
    p = subprocess.run(
        script + ["--variant", "", "--variant", "kv_fetch=thread,rows_bits=2,layer_loop=scan", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    first, second = json.loads(out.read_text())["variants"]
    assert first["kv_fetch"] == "pinned" and first["unroll"] is True and "pinned" in first  # a CPU: unrolled
    assert second["rows_bits"] == 2 and second["unroll"] is False and second["thread"]["loop"]["median_ms"] > 0
    bad = subprocess.run(script + ["--variant", "dots=tf32x3"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "'dots=tf32x3' is not KEY=VALUE" in bad.stdout + bad.stderr


def test_gpu_judge_crosscheck_passes_and_fails(monkeypatch, capsys):
    """scripts/gpu_judge_crosscheck.py at a CPU shape: the judge within 1e-5 of the NumPy
    reference exits 0; a judge with the wrong RMSNorm (1 + w) exits 1, NOT within."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("crosscheck", ROOT / "scripts" / "gpu_judge_crosscheck.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--preset", "tiny", "--judges", "highest,highest/scan", "--tokens", "5", "--prompt", "9"]) == 0
    assert capsys.readouterr().out.count("-> within 1e-05") == 2
    real = mod.JaxLoopedModel

    def wrong(*a, **kw):
        return real(*a, norm_offset=1.0, **kw)

    monkeypatch.setattr(mod, "JaxLoopedModel", wrong)
    assert mod.main(["--preset", "tiny", "--judges", "highest", "--tokens", "5", "--prompt", "9"]) == 1
    assert "NOT within" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        mod.main(["--judges", "fp64"])
