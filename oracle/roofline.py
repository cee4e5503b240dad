"""The FP32 judge's floor (judge_jax on one GPU): the seconds a round of the judge cannot beat,
from the GPU's peak HBM bandwidth and FP32 rate (`judge_round_floor`); oracle/cli/limits.py
estimates the judge's time from it, scripts/gpu_judge_time.py compares against it."""

from __future__ import annotations

from .cost import head_row_counts
from .errors import OracleError
from .schedule import plan, validate


# ---- the FP32 judge's floor (judge_jax on one GPU) -----------------------------------------
# Peak rates of the GPUs the judge runs on. h200: NVIDIA H200 Tensor Core GPU datasheet, SXM
# column (nvidia.com/en-us/data-center/h200): GPU memory bandwidth 4.8 TB/s; FP32 67 TFLOPS
# (the non-tensor-core rate: the judge's matmuls run at Precision.HIGHEST, true FP32, no TF32).
GPU_PEAKS = {
    "h200": {
        "hbm_bytes_per_s": 4.8e12,
        "fp32_flops_per_s": 67e12,
        "what": "NVIDIA H200 SXM: HBM3e 4.8 TB/s, FP32 67 TFLOP/s (datasheet)",
    }
}
FP32_BYTES = 4


def judge_layer_params(cfg) -> int:
    """Weights one row multiplies through in one loop of the stack (all layers; no head)."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    q = H * cfg.num_heads * cfg.head_dim
    kv = H * cfg.num_kv_heads * cfg.head_dim
    return cfg.num_layers * (2 * q + 2 * kv + 3 * H * I + 4 * H)  # q, o, k, v, gate/up/down, 4 norms


def judge_round_floor(
    cfg, counts, context: int, d, D, mode: str = "block", K: int | None = None, gpu: str = "h200"
) -> dict:
    """Seconds an FP32 round of the judge cannot beat on `gpu`: per recurrent call (and head
    call) the roofline max(bytes / HBM bandwidth, FLOPs / FP32 rate), summed over the round.

    counts: the token counts T_i, or a request count C with K (every T_i = K + 1). context:
    the position of offset 0 (every request's committed tokens - 1), so the row at offset o
    attends to context + o + 1 keys. Per call:
      * weight bytes: every layer's matrices and norms once (judge_layer_params * 4 B);
      * KV bytes: each KV plane the call touches (one per request and depth) read once, up to
        the call's last row on it, all layers, K and V; plus the rows' own K/V writes;
      * FLOPs: 2 per weight per row, plus attention's 4 * keys * heads * head_dim per layer;
      * hidden states in and out (rows * H * 4 B each).
    A head call reads lm_head (H * V * 4 B) and does 2 * H * V FLOPs per row.
    Returns {"floor_s", "weights_s", "kv_s", "flops_s", "head_s", ...}: the *_s terms are each
    part alone at its peak rate, so floor_s <= weights_s + kv_s + flops_s + head_s."""
    if gpu not in GPU_PEAKS:
        raise OracleError(f"no peak rates for GPU {gpu!r} (known: {', '.join(GPU_PEAKS)})")
    peak = GPU_PEAKS[gpu]
    bw, rate = peak["hbm_bytes_per_s"], peak["fp32_flops_per_s"]
    if isinstance(counts, int) and not isinstance(counts, bool):
        if K is None:
            raise OracleError("judge_round_floor: a request count needs K (every T_i = K + 1)")
        counts = [K + 1] * counts
    s = plan(mode, validate(counts, d, D), d, D)
    L, H, V = cfg.num_layers, cfg.hidden_size, cfg.vocab_size
    kv_row = L * 2 * cfg.num_kv_heads * cfg.head_dim * FP32_BYTES  # one position's K and V, all layers
    weight_bytes = judge_layer_params(cfg) * FP32_BYTES
    attn_flops_per_key = 4 * cfg.num_heads * cfg.head_dim * L  # q.k and p.v, every layer
    out = {
        "gpu": gpu,
        "peaks": peak,
        "mode": mode,
        "calls": len(s.calls),
        "rows": sum(len(c.rows) for c in s.calls),
        "weight_bytes_per_call": weight_bytes,
        "weight_bytes": 0,
        "kv_bytes": 0,
        "flops": 0,
        "head_calls": 0,
        "head_bytes": 0,
        "head_flops": 0,
        "call_s": [],
    }
    floor = 0.0
    for c in s.calls:
        last: dict = {}  # plane -> keys read
        keys = 0
        for i, o, j in c.rows:
            n_keys = context + o + 1
            last[(i, j)] = max(last.get((i, j), 0), n_keys)
            keys += n_keys
        kv_bytes = sum(last.values()) * kv_row + len(c.rows) * kv_row
        flops = len(c.rows) * 2 * judge_layer_params(cfg) + keys * attn_flops_per_key
        moved = weight_bytes + kv_bytes + 2 * len(c.rows) * H * FP32_BYTES
        t = max(moved / bw, flops / rate)
        out["call_s"].append(t)
        floor += t
        out["weight_bytes"] += weight_bytes
        out["kv_bytes"] += kv_bytes
        out["flops"] += flops
    for n in head_row_counts(s):
        hb, hf = H * V * FP32_BYTES + n * (H + V) * FP32_BYTES, 2 * n * H * V
        floor += max(hb / bw, hf / rate)
        out["head_calls"] += 1
        out["head_bytes"] += hb
        out["head_flops"] += hf
    out.update(
        floor_s=floor,
        weights_s=out["weight_bytes"] / bw,
        kv_s=out["kv_bytes"] / bw,
        flops_s=out["flops"] / rate,
        head_s=max(out["head_bytes"] / bw, out["head_flops"] / rate),
    )
    return out
