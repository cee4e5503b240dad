"""Why a round's two-row call costs more than c(2) (scripts/gpu_round_steps.py, C = 1 loop round):
the same call timed four ways in one process (ouro-1.4b shape, BF16, graph replays, median):
  1. c(2) as the c-table measures it (bench.measure_c_table: recurrent_call on fresh planes, position 256);
  2. the round's captured call_step graph of key (2, 2, 1), replayed alone on the last round's metadata;
  3. recurrent_call alone, captured on that call's own inputs (rows, positions, planes), no call_step around it;
  4. the round's sequence: the draft-head graph, then the call graph, replayed back to back (minus 5.: the head alone).
    PYTHONPATH=. python scripts/gpu_call_in_round.py [--json out.json]"""
import argparse
import json
import torch

from kernels import bench
from kernels.bench_rounds import make_session, random_weights
from oracle.sampling import SamplingParams


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    K, d, D, ctx = 4, 2, 4, 256
    w = random_weights("ouro-1.4b", "cuda")
    prompt = torch.randint(0, w.cfg.vocab_size, (ctx,), generator=torch.Generator().manual_seed(0)).tolist()
    s = make_session(w, "loop", 1, ctx, 64, K, d, D)
    s.add(0, prompt, SamplingParams(seed=0))
    for _ in range(3):
        s.step({0: K + 1})
    torch.cuda.synchronize()
    graphs = s.graphs.graphs
    call = next(g for (kind, key), g in graphs.items() if kind == "call" and key[:3] == (2, 2, 1))
    head = graphs[("draft", (1, "greedy"))]
    res = {"c2_table": bench.measure_c_table("ouro-1.4b", [2], ctx, repeats=50)["c_ms"]["2"]}
    res["call_graph_alone"] = bench.median_ms(call.replay, 50)
    e, meta = s.engine, call.static
    flat, slot, off, plane, qidx = meta[:10].view(5, 2)
    pos = e.start.index_select(0, slot) + off
    h = torch.where((plane < e.kv.n_slots)[:, None], e.model.embed(e.tok.view(-1).index_select(0, flat)),
                    e.hid.index_select(0, flat))
    gplane = meta[10:]
    step = lambda: e.model.recurrent_call(h, pos, plane, qidx, gplane, 1)
    res["recurrent_call_on_round_inputs"] = bench.graph_replay_ms(step, reps=50)
    res["positions"], res["planes"] = pos.tolist(), plane.tolist()
    # 3b. the same call on the round's KV planes, with c-table-like inputs, one change at a time
    hr = torch.randn_like(h.float()).to(h.dtype)
    p256, p01 = torch.full_like(pos, 256), torch.arange(2, device=pos.device)
    for name, (hh, pp, pl) in {"random_h": (hr, pos, plane), "pos_256": (h, p256, plane), "planes_0_1": (h, pos, p01),
                               "random_h_pos_256_planes_0_1": (hr, p256, p01)}.items():
        res[f"recurrent_call_{name}"] = bench.graph_replay_ms(
            lambda hh=hh, pp=pp, pl=pl: e.model.recurrent_call(hh, pp, pl, qidx, gplane, 1), reps=50)
    # 3c. the KV planes' shape: P planes of capacity max_len (the c-table: P = M, max_len = context + 1)
    from kernels.kvplanes import KVPlanes
    from kernels.model import PackedModel
    cfg = w.cfg
    for n_req, depth, max_len in ((2, 1, 257), (2, 1, 342), (2, 4, 257), (1, 4, 342), (2, 1, 513)):
        kv = KVPlanes(cfg, depth, n_req, max_len, w.device, w.dtype)
        m = PackedModel(w, kv, e.model.options)
        for M in (1, 2):
            rows = torch.arange(M, device=w.device)
            hx, px = torch.randn(M, cfg.hidden_size, device=w.device).to(w.dtype), torch.full_like(rows, 256)
            res[f"P={kv.k.shape[1]} max_len={max_len} M={M}"] = bench.graph_replay_ms(
                lambda m=m, hx=hx, px=px, rows=rows: m.recurrent_call(hx, px, rows, rows, rows, 1), reps=50)
        del kv, m
    res["head_alone"] = bench.median_ms(head.replay, 50)
    res["head_then_call"] = bench.median_ms(lambda: (head.replay(), call.replay()), 50)
    res["call_after_head"] = res["head_then_call"] - res["head_alone"]
    res["call_then_call"] = bench.median_ms(lambda: (call.replay(), call.replay()), 50) / 2
    for k, v in res.items():
        print(f"{k:32s} {v if isinstance(v, list) else round(v, 4)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
