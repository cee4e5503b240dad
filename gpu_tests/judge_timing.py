"""Timing of the JAX FP32 judge's rounds against their floor (oracle.roofline.judge_round_floor).

`time_judge_round(judge, model, C, ctx, repeats)` runs, per mode (block, loop), a session of C
greedy requests with prompts of ctx tokens, one warm-up round (it compiles), `repeats` timed
rounds (K = 4, d = 2, D = 4), then one counted round and one probed round (neither timed):

* counted: host-to-device transfers (the transfer guard's log, explicit ones included),
  device-to-host fetches (numpy reads of jax arrays: np.asarray, jax.device_get, float()),
  and XLA compilations (jax.monitoring's backend-compile events), per round;
* probed: the judge's own per-call record (JaxLoopedModel.probe): for each device step (a
  recurrent call, a head call, the round's KV fetch) the host seconds until it was enqueued
  and, synchronised, the seconds the host then waited for the device. The rest of the
  round's wall time is the host's own work in oracle.phases (bookkeeping, sampling).

Used by scripts/gpu_judge_time.py (the H200 measurement) and, at a small shape on the CPU, by
tests/test_jax_timing.py.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import threading
import time

import numpy as np

from oracle.roofline import judge_round_floor
from oracle.sampling_params import SamplingParams as SP

K, d, D = 4, 2, 4
MODES = ("block", "loop")

_compiles = {"on": False, "n": 0, "s": 0.0}


def _on_duration(name, secs, **_):
    if _compiles["on"] and name == "/jax/core/compile/backend_compile_duration":
        _compiles["n"] += 1
        _compiles["s"] += secs


_listening = False


def _listen():
    global _listening
    if not _listening:
        import jax

        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _listening = True


@contextlib.contextmanager
def count_transfers():
    """{"h2d", "d2h", "d2h_bytes", "d2h_logged", "compiles", "compile_s"} of the block inside,
    filled on exit. h2d (d2h_logged): lines of the transfer guard's log of host-to-device
    (device-to-host) transfers, explicit ones included (stderr, fd 2, captured; a CPU device
    logs no device-to-host reads: they are zero-copy); d2h, d2h_bytes: jax arrays read on the
    host through numpy.asarray, numpy.array or jax.device_get (__array__), counted in Python."""
    import jax
    from jax._src import array as jarray

    _listen()
    out = {"h2d": 0, "d2h": 0, "d2h_bytes": 0, "d2h_logged": 0, "compiles": 0, "compile_s": 0.0}
    local = threading.local()  # per thread: inside a counted read (the fetch thread reads too)
    lock = threading.Lock()

    def counting(fn):
        def wrapper(x, *a, **kw):
            depth = getattr(local, "depth", 0)
            if isinstance(x, jax.Array) and not depth:
                with lock:
                    out["d2h"] += 1
                    out["d2h_bytes"] += int(x.size) * x.dtype.itemsize
            local.depth = depth + 1
            try:
                return fn(x, *a, **kw)
            finally:
                local.depth = depth

        return wrapper

    saved_fns = (np.asarray, np.array, jarray.ArrayImpl.__array__)
    np.asarray, np.array = counting(np.asarray), counting(np.array)
    jarray.ArrayImpl.__array__ = counting(saved_fns[2])
    _compiles.update(on=True, n=0, s=0.0)
    log = tempfile.TemporaryFile()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        with jax.transfer_guard("log_explicit"):
            yield out
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        np.asarray, np.array, jarray.ArrayImpl.__array__ = saved_fns
        _compiles["on"] = False
        out["compiles"], out["compile_s"] = _compiles["n"], round(_compiles["s"], 3)
        log.seek(0)
        text = log.read().decode(errors="replace")
        log.close()
        out["h2d"] = text.count("host-to-device transfer")
        out["d2h_logged"] = text.count("device-to-host transfer")
        other = [ln for ln in text.splitlines() if ln.strip() and "transfer" not in ln]
        if other:  # whatever else was written to stderr
            os.write(2, ("\n".join(other) + "\n").encode())


def sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def _session(judge, model, mode: str, C: int, ctx: int, rounds: int, **options):
    rng = np.random.default_rng(0)
    s = judge.session(model, d, D, mode, max_requests=C, max_len=ctx + (rounds + 1) * (K + 1) + 1, **options)
    for rid in range(C):
        s.add(rid, list(map(int, rng.integers(0, model.cfg.vocab_size, ctx))), SP(seed=rid))
    kv = getattr(s, "kv", None)
    if kv is not None and hasattr(kv, "k"):  # the prefill's queued device work: done
        import jax

        jax.block_until_ready((kv.k, kv.v))
    return s


def _probe_round(s, counts) -> dict:
    """One round with the judge's per-step probe on (each device step synchronised)."""
    jm = s.jm
    if not hasattr(jm, "probe"):
        return {}
    jm.probe = []
    t0 = time.perf_counter()
    try:
        s.step(counts)
        wall = time.perf_counter() - t0
        steps = jm.probe
    finally:
        jm.probe = None
    by: dict = {}
    for kind, rows, host_s, wait_s in steps:
        b = by.setdefault(kind, {"n": 0, "rows": 0, "host_ms": 0.0, "device_wait_ms": 0.0})
        b["n"] += 1
        b["rows"] += rows
        b["host_ms"] += 1e3 * host_s
        b["device_wait_ms"] += 1e3 * wait_s
    for b in by.values():
        b["host_ms"], b["device_wait_ms"] = round(b["host_ms"], 3), round(b["device_wait_ms"], 3)
    inside = sum(b["host_ms"] + b["device_wait_ms"] for b in by.values())
    return {
        "wall_ms": round(1e3 * wall, 3),
        "steps": by,
        "phases_host_ms": round(1e3 * wall - inside, 3),
    }  # oracle.phases' own work


def time_judge_round(
    judge,
    model,
    C: int = 16,
    ctx: int = 1024,
    repeats: int = 5,
    gpu: str = "h200",
    trace_dir=None,
    host_profile: int = 0,
    **session_options,
) -> dict:
    """Per mode: median ms of a round (K = 4, d = 2, D = 4, greedy, C requests, prompts of ctx
    tokens), every timed round's ms, the floor ms on `gpu` with its terms, measured / floor,
    the transfers and compiles of one round, and a probed round's per-step host/device split.
    trace_dir: also write a jax.profiler trace of one more round per mode there, and keep what
    gpu_tests.trace_gaps reads from it (the device's busy and idle time, the idle by phase);
    host_profile: also run one more round per mode under cProfile and keep its top
    `host_profile` functions by cumulative and by own time (text, in the mode's "host_profile");
    session_options: for judge.session (e.g. kv_fetch="round").
    cpu_median_ms: the process's CPU time per round (all threads; on a shared CPU host the
    wall time also counts other processes' turns)."""
    out = {"C": C, "ctx": ctx, "K": K, "d": d, "D": D, "repeats": repeats, "gpu_floor": gpu}
    counts = {rid: K + 1 for rid in range(C)}
    for mode in MODES:
        s = _session(
            judge, model, mode, C, ctx, repeats + 3 + (trace_dir is not None) + bool(host_profile), **session_options
        )
        _listen()
        _compiles.update(on=True, n=0, s=0.0)
        t0 = time.perf_counter()
        try:
            s.step(counts)  # warm-up: compiles
        finally:
            _compiles["on"] = False
        warm = time.perf_counter() - t0
        warm_compiles = {"compiles": _compiles["n"], "compile_s": round(_compiles["s"], 3)}
        times, cpu, starts = [], [], []
        for _ in range(repeats):
            starts += [len(s.tokens(rid)) - 1 for rid in counts]  # offset 0's position
            t0, c0 = time.perf_counter(), time.process_time()
            s.step(counts)
            times.append(1e3 * (time.perf_counter() - t0))
            cpu.append(1e3 * (time.process_time() - c0))
        kv = getattr(s, "kv", None)
        held = getattr(kv, "k", None)
        with count_transfers() as per_round:
            s.step(counts)
        if held is not None and hasattr(held, "is_deleted"):  # the calls took the KV planes over
            per_round["kv_donated"] = bool(held.is_deleted())  # (False: each call copied them)
        del held
        probe = _probe_round(s, counts)
        traced = None
        if trace_dir is not None:
            import jax

            from gpu_tests.trace_gaps import annotated, gaps

            where = os.path.join(str(trace_dir), mode)
            opts = jax.profiler.ProfileOptions()
            opts.python_tracer_level = 0  # the phases and steps are annotated instead (trace_gaps)
            with annotated(), jax.profiler.trace(where, profiler_options=opts):
                with jax.profiler.TraceAnnotation("J:round"):
                    s.step(counts)
            traced = gaps(where)
        hprof = None
        if host_profile:
            import cProfile
            import io
            import pstats

            pr = cProfile.Profile()
            pr.enable()
            s.step(counts)
            pr.disable()
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(host_profile)
            pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(host_profile)
            hprof = buf.getvalue()
        context = round(statistics.mean(starts))  # the timed rounds' mean offset-0 position
        floor = judge_round_floor(model.cfg, C, context, d, D, mode, K=K, gpu=gpu)
        med = statistics.median(times)
        out[mode] = {
            "median_ms": round(med, 3),
            "context": context,
            "times_ms": [round(t, 3) for t in times],
            "cpu_median_ms": round(statistics.median(cpu), 3),
            "warmup_s": round(warm, 3),
            "warmup_compiles": warm_compiles,
            "floor_ms": sig(1e3 * floor["floor_s"]),
            "over_floor": sig(med / (1e3 * floor["floor_s"])),
            "floor_terms_ms": {k: sig(1e3 * floor[k]) for k in ("weights_s", "kv_s", "flops_s", "head_s")},
            "per_round": per_round,
            "probe": probe,
        }
        if hprof is not None:
            out[mode]["host_profile"] = hprof
        if traced is not None:
            out[mode]["trace_gaps"] = traced
        del s  # its KV planes go before the next mode's
    return out
