"""Round benchmarks on the torch backend (docs/DESIGN.md section 10): head-call costs,
device copy bandwidth, and paired block/loop rounds. Used by `python -m oracle bench`."""

from __future__ import annotations

import dataclasses

import statistics
import time
from collections import deque

import torch

from oracle.config import preset as get_preset
from oracle.sampling_params import SamplingParams

from kernels.backend import DTYPES
from kernels.options import KernelOptions
from kernels.session import TorchSession
from kernels.weights import TorchWeights

from .calls import _time


def random_weights(preset: str, device: str = "cuda", dtype: str | None = None, seed: int = 0) -> TorchWeights:
    dev = torch.device(device)
    dtype = dtype or ("bfloat16" if dev.type == "cuda" else "float32")
    return TorchWeights.random(get_preset(preset), dev, DTYPES[dtype], seed)


def copy_bandwidth(device: str = "cuda", nbytes: int = 2 << 30, repeats: int = 20) -> float:
    """Bytes per second of a device-to-device copy, counting bytes read plus written."""
    dev = torch.device(device)
    a = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=dev).normal_()
    b = torch.empty_like(a)
    ms = statistics.median([_time(lambda: b.copy_(a), dev) for _ in range(repeats + 1)][1:])
    return 2 * nbytes / (ms / 1e3)


def measure_head_table(w: TorchWeights, row_counts, repeats: int = 50) -> dict:
    """h(M): ms of one lm_head call over M rows (graph replay on CUDA), median."""
    dev = w.device
    table = {}
    for M in sorted(set(row_counts)):
        h = torch.randn(M, w.cfg.hidden_size, device=dev).to(w.dtype)
        step = lambda: (h @ w.lm_head.T).float()
        fn = step
        if dev.type == "cuda":
            step()
            torch.cuda.synchronize(dev)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
            fn = g.replay
        table[str(M)] = round(statistics.median([_time(fn, dev) for _ in range(repeats + 1)][1:]), 4)
    return {"c_ms": table, "description": "h(M): ms of one lm_head call over M rows"}


def session_kv_capacity(context_len: int, tokens: int, K: int) -> int:
    """Positions per KV plane of a benchmark session: the prompt, the generated tokens, room for
    rounds in flight. The sweep measures its c-table at this capacity."""
    return context_len + tokens + 4 * (K + 1) + 2


def make_session(
    w: TorchWeights, mode: str, n_requests: int, context_len: int, tokens: int, K: int, d: int, D: int, **options
) -> TorchSession:
    """options: TorchSession's; kernel_options defaults to KernelOptions.from_env() (this is
    `oracle bench`'s entry point)."""
    dev = w.device
    opts = {"graphs": "cuda" if dev.type == "cuda" else "off", "trace": False} | options
    if opts.get("kernel_options") is None:
        opts["kernel_options"] = KernelOptions.from_env()
    return TorchSession(
        w,
        d,
        D,
        mode,
        "sequential",
        name=f"torch-{dev.type}",
        dtype_name="bfloat16" if w.dtype == torch.bfloat16 else "float32",
        max_requests=n_requests,
        max_len=session_kv_capacity(context_len, tokens, K),
        max_tokens_per_round=K + 1,
        **opts,
    )


def run_generation(s: TorchSession, prompts, params, tokens: int, K: int, in_flight: int = 1) -> dict:
    """Prefill (untimed), then rounds until every request has `tokens` new tokens (timed).
    in_flight: rounds submitted before the oldest is collected (1: submit, collect, repeat;
    2: the host plans and launches round n+1 while the device runs round n). A new round
    counts one emitted token per round of the request still in flight, so with accepted
    drafts a request may end past `tokens` (stats["emitted"] counts what was emitted).
    stats["host_ms"]: mean host ms per round of TorchSession's phases (plan and enqueue in
    submit; wait for the device and finish in collect). stats["device_ms"] (CUDA, else None):
    mean device ms per round, from its upload to its result copies in stream order, so
    ms_per_round - device_ms is the time per round the device had no round to run."""
    assert in_flight >= 1, in_flight
    for rid in list(s.requests):
        s.remove(rid)
    for rid, (p, sp) in enumerate(zip(prompts, params)):
        s.add(rid, p, sp)
    n0 = {rid: len(p) for rid, p in enumerate(prompts)}
    have, ahead = dict(n0), dict.fromkeys(n0, 0)
    stats = {
        "rounds": 0,
        "drafted": 0,
        "accepted": 0,
        "emitted": 0,
        "graph_captures": 0,
        "graph_replays": 0,
        "graph_fallbacks": 0,
    }
    host = dict.fromkeys(("plan", "enqueue", "wait", "finish"), 0.0)
    device = []
    pending: deque = deque()
    _sync(s.device)
    t0 = time.perf_counter()
    while True:
        left = {rid: tokens - (have[rid] - n0[rid]) - ahead[rid] for rid in have}
        counts = {rid: min(K, n - 1) + 1 for rid, n in left.items() if n > 0}
        if counts and len(pending) < in_flight:
            pending.append((s.submit(counts), counts))
            for rid in counts:
                ahead[rid] += 1
            continue
        if not pending:
            break
        h, done = pending.popleft()
        tr = s.collect(h)
        for rid in done:
            ahead[rid] -= 1
        for rid, em in tr.emitted.items():
            have[rid] += len(em)
            stats["emitted"] += len(em)
        stats["rounds"] += 1
        for k, v in h.host_ms.items():
            host[k] += v
        if h.device_ms is not None:
            device.append(h.device_ms)
        for k in ("drafted", "accepted", "graph_captures", "graph_replays", "graph_fallbacks"):
            stats[k] += tr.stats[k]
    _sync(s.device)
    stats["ms"] = (time.perf_counter() - t0) * 1e3
    stats["ms_per_round"] = stats["ms"] / stats["rounds"]
    stats["tokens_per_s"] = stats["emitted"] / (stats["ms"] / 1e3)
    stats["acceptance"] = stats["accepted"] / max(stats["drafted"], 1)
    stats["host_ms"] = {k: v / stats["rounds"] for k, v in host.items()}
    stats["device_ms"] = sum(device) / len(device) if device else None
    return stats


def paired_rounds(
    w: TorchSession,
    C: int,
    K: int,
    d: int,
    D: int,
    tokens: int = 128,
    repeats: int = 7,
    context_len: int = 512,
    params: SamplingParams | None = None,
    seed: int = 0,
    in_flight: int = 1,
    **options,
) -> dict:
    """Block and loop generations in alternating repeats, same prompts and per-request seeds
    in both arms (both draw the same random numbers). One untimed warm-up repeat per arm
    captures the graphs. Returns per-arm per-repeat stats."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, w.cfg.vocab_size, (context_len,), generator=g).tolist() for _ in range(C)]
    base = params or SamplingParams()
    ps = [dataclasses.replace(base, seed=seed + rid) for rid in range(C)]
    sessions = {m: make_session(w, m, C, context_len, tokens, K, d, D, **options) for m in ("block", "loop")}
    arms = {"block": [], "loop": []}
    for r in range(repeats + 1):
        for mode in ("block", "loop") if r % 2 == 0 else ("loop", "block"):
            st = run_generation(sessions[mode], prompts, ps, tokens, K, in_flight)
            if r > 0:
                arms[mode].append(st)
    return arms


def _sync(dev):
    if torch.device(dev).type == "cuda":
        torch.cuda.synchronize(dev)
