"""Timing helpers for a benchmark CLI (docs/DESIGN.md section 10); no CLI here.

measure_c_table: c(M) = one recurrent call over M rows, each row on its own KV plane at
position context_len (so it attends to context_len + 1 keys, like a loop-round wave),
graph replay on CUDA, median over repeats with the inputs rotated between replays; "spread"
holds (q3 - q1) / median of the repeats per M (bench/ctable.py refuses a table beyond
its noise bound).
rows_per_plane r > 1: M/r planes with r rows each at positions context_len-r+1..context_len
(like a block round's verification call of T = r tokens per request).
KV memory: layers x (max(row_counts)/r + 1) planes x (context_len+1) x nkv x hd, K and V.
Sessions and paired round timing live in bench/rounds.py.
"""

from __future__ import annotations

import statistics
import time

import torch

from .stats import quartiles
from oracle.config import ModelConfig, preset as get_preset

from kernels.backend import DTYPES
from kernels.kvplanes import KVPlanes
from kernels.model import PackedModel
from kernels.options import KernelOptions
from kernels.triton_attention import span_bucket
from kernels.weights import TorchWeights


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def measure_c_table(
    preset: str | ModelConfig,
    row_counts,
    context_len: int,
    *,
    device: str = "cuda",
    dtype: str | None = None,
    repeats: int = 50,
    rotate: int = 4,
    seed: int = 0,
    graphs: bool = True,
    kernel_options: KernelOptions | None = None,
    rows_per_plane: int = 1,
    kv_capacity: int | None = None,
) -> dict:
    """Returns {"c_ms": {"M": median ms}, ...}; the layout of oracle's c-table JSON (the
    "c_ms" of rows_per_plane r > 1 belong under the table's "c_ms_shared"[r]).
    kernel_options: default KernelOptions.from_env() (this is `oracle bench c-table`'s entry point).
    kv_capacity: positions per KV plane (default context_len + 1, the fewest the call needs). The
    call's attention covers the span a session's round at this context gets
    (triton_attention.span_bucket), not the whole capacity: before spans, a call of 2 rows cost
    7% more at a capacity of 342 than at 257 on the H200 (docs/results.md)."""
    rpp = rows_per_plane
    bad = [M for M in row_counts if M % rpp]
    assert 1 <= rpp <= context_len + 1 and not bad, (rpp, bad)
    kv_capacity = context_len + 1 if kv_capacity is None else kv_capacity
    assert kv_capacity >= context_len + 1, (kv_capacity, context_len)
    cfg = get_preset(preset) if isinstance(preset, str) else preset
    dev = torch.device(device)
    dtype = dtype or ("bfloat16" if dev.type == "cuda" else "float32")
    use_graphs = graphs and dev.type == "cuda"
    w = TorchWeights.random(cfg, dev, DTYPES[dtype], seed)
    kv = KVPlanes(cfg, 1, max(row_counts) // rpp, kv_capacity, dev, DTYPES[dtype])
    model = PackedModel(w, kv, KernelOptions.from_env() if kernel_options is None else kernel_options)
    span = span_bucket(context_len + 1, kv_capacity)
    g = torch.Generator(device=dev).manual_seed(seed + 1)
    table, spread = {}, {}
    for M in sorted(set(row_counts)):
        rows = torch.arange(M, device=dev)
        plane = rows // rpp  # rpp rows on each of M/rpp planes
        pos = context_len - rpp + 1 + rows % rpp
        inputs = [torch.randn(M, cfg.hidden_size, generator=g, device=dev).to(w.dtype) for _ in range(rotate)]
        h = inputs[0].clone()  # static input
        step = lambda: model.recurrent_call(h, pos, plane, rows, torch.arange(M // rpp, device=dev), rpp, span)
        graph = capture_graph(step, dev) if use_graphs else None
        times = []
        for r in range(repeats + 1):  # the first one warms up
            h.copy_(inputs[r % rotate])
            times.append(_time(graph.replay if graph is not None else step, dev))
        table[str(M)] = round(statistics.median(times[1:]), 4)
        q1, med, q3 = quartiles(times[1:])
        spread[str(M)] = round((q3 - q1) / med, 4) if med > 0 else 0.0
        del graph
    gemv = lambda M: model.gemv and M <= model.options.gemv_max_rows  # noqa: E731
    path = {
        str(M): ("gemv" if M == 1 else "gemv-small-m") if gemv(M) else "torch"  # cuBLAS (+ compiled blocks)
        for M in sorted(set(row_counts))
    }
    return {
        "c_ms": table,
        "spread": spread,
        "path": path,
        "preset": cfg.to_dict(),
        "context_len": context_len,
        "kv_capacity": kv_capacity,
        "span": span,
        "dtype": dtype,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "graphs": use_graphs,
        "repeats": repeats,
        "rows_per_plane": rpp,
        "description": "c(M): ms of one recurrent call (all layers, attention over context_len+1 keys per "
        "row, norms, final norm; no heads) over M rows, median of graph replays",
    }


def capture_graph(fn, dev) -> "torch.cuda.CUDAGraph":
    """fn() once on a side stream (compiles, lazy inits), then captured into a CUDA graph."""
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _time(fn, dev) -> float:
    if dev.type == "cuda":
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3
