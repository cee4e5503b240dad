"""Does a call's cost depend on the KV planes' capacity (max_len), and where? (issue 14: the C = 1
loop round's two-row calls cost c(2) + 7%: scripts/gpu_call_in_round.py). ouro-1.4b shape,
BF16, rows at position 256, graph replays (median of 50), for max_len 257 / 342 / 513, M = 1, 2,
PDL on and off: the whole recurrent call, and attention alone (24 layers of
triton_attention.decode_attention in one graph); at capacities above 257, also the call with
attention's grid over positions 0..256 only (decode_attention's span).
    PYTHONPATH=. python scripts/gpu_attn_capacity.py [--json out.json]"""
import argparse
import json

import torch

from kernels import bench, triton_attention
from kernels.bench_rounds import random_weights
from kernels.kvplanes import KVPlanes
from kernels.model import PackedModel
from kernels.options import KernelOptions


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    w = random_weights("ouro-1.4b", "cuda")
    cfg, dev, res = w.cfg, w.device, {}
    for max_len in (257, 342, 513):
        kv = KVPlanes(cfg, 1, 2, max_len, dev, w.dtype)
        for pdl in (True, False):
            m = PackedModel(w, kv, KernelOptions(pdl=pdl))
            for M in (1, 2):
                rows = torch.arange(M, device=dev)
                h, pos = torch.randn(M, cfg.hidden_size, device=dev).to(w.dtype), torch.full_like(rows, 256)
                q = torch.randn(M, cfg.num_heads, cfg.head_dim, device=dev).to(w.dtype)
                call = bench.graph_replay_ms(lambda: m.recurrent_call(h, pos, rows, rows, rows, 1), reps=50)
                attn = bench.graph_replay_ms(lambda: [triton_attention.decode_attention(q, kv, l, rows, pos, pdl)
                                                      for l in range(cfg.num_layers)], reps=50)
                key = f"max_len={max_len} pdl={pdl} M={M}"
                res[key] = {"call_ms": call, "attention_24_layers_ms": attn}
                if max_len > 257:             # attention's grid over positions 0..256 only (span), not the capacity
                    orig = triton_attention.decode_attention
                    triton_attention.decode_attention = lambda *a, **k: orig(*a, span=257, **k)
                    try:
                        res[key]["call_ms_span_257"] = bench.graph_replay_ms(
                            lambda: m.recurrent_call(h, pos, rows, rows, rows, 1), reps=50)
                    finally:
                        triton_attention.decode_attention = orig
                print(f"{key:28s} call {call:.4f} ms  attention x24 {attn:.4f} ms  "
                      f"call with span 257 {res[key].get('call_ms_span_257', float('nan')):.4f} ms", flush=True)
        del kv
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
