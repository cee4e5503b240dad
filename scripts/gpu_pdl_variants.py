"""PDL variants of the GEMV paths at the ouro-1.4b shape, one device call (issue 14):
  early: the successor's launch triggered at a kernel's start instead of after its wait
         (LOOPSPEC_PDL_EARLY=1), so several kernels' CTAs stand launched, weights loaded;
  prefetch K: each kernel's next K weight columns (and attention's keys and values) into L2
         before its wait (LOOPSPEC_PREFETCH_K=K).
Each variant runs in its own process (the switches are Triton constexprs read at import):
whole recurrent calls with PDL against the same calls without it, eager and graph, bit for
bit (M = 1, 4, 16), then c(M) for M = 1..16 (graphs, context 256, median of 100 replays).
The baseline runs first and last, for drift. Results: $OUT/pdl_variants.json.
    PYTHONPATH=. python scripts/gpu_pdl_variants.py [EARLY:PF ...]     (default: the set below)"""
import json
import os
import subprocess
import sys
import time

VARIANTS = ["0:0", "1:0", "0:1024", "1:512", "1:1024", "1:2048", "0:0"]
ROWS = [1, 2, 4, 8, 16]


def child():
    import torch
    import kernels.model as km
    from kernels import bench
    from kernels.kvplanes import KVPlanes
    from kernels.options import KernelOptions
    from kernels.weights import TorchWeights
    from oracle.config import preset
    dev, cfg = torch.device("cuda"), preset("ouro-1.4b")
    w = TorchWeights.random(cfg, dev, torch.bfloat16, 0)
    kv = KVPlanes(cfg, 1, 17, 257, dev, torch.bfloat16)
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(16, cfg.hidden_size, generator=g, device=dev).bfloat16()
    pos, plane = torch.full((16,), 256, device=dev), torch.arange(16, device=dev)
    models = {p: km.PackedModel(w, kv, KernelOptions(gemv=True, gemv_max_rows=16, pdl=p)) for p in (False, True)}
    same = {}
    for m in (1, 4, 16):
        h, outs = x[:m].clone(), {}
        for p, model in models.items():
            step = lambda: model.recurrent_call(h, pos[:m], plane[:m], plane[:m], plane[:m], 1)   # noqa: E731
            outs[("eager", p)] = step().clone()
            graph = bench.capture_graph(lambda: outs.__setitem__(("graph", p), step()), dev)
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
        ref = outs[("eager", False)]
        same[m] = all(torch.equal(v, ref) for v in outs.values())
    del models
    ct = bench.measure_c_table("ouro-1.4b", ROWS, 256, device="cuda", repeats=100,
                               kernel_options=KernelOptions(gemv=True, gemv_max_rows=16, pdl=True))
    print("RESULT " + json.dumps({"bitwise_equal_to_pdl_off": same, "c_ms": ct["c_ms"]}), flush=True)


def main():
    out = os.environ.get("OUT", ".")
    variants = sys.argv[1:] or VARIANTS
    res, t0 = [], time.time()
    for v in variants:
        early, pf = v.split(":")
        env = {**os.environ, "LOOPSPEC_PDL_EARLY": early, "LOOPSPEC_PREFETCH_K": pf}
        p = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, timeout=240)
        line = [s for s in p.stdout.splitlines() if s.startswith("RESULT ")]
        r = {"early": early == "1", "prefetch_k": int(pf), "rc": p.returncode}
        r.update(json.loads(line[0][7:]) if line else {"error": p.stderr[-2000:]})
        res.append(r)
        print(json.dumps(r), f"[{time.time() - t0:.0f} s]", flush=True)
        json.dump(res, open(os.path.join(out, "pdl_variants.json"), "w"), indent=1)


if __name__ == "__main__":
    child() if "--child" in sys.argv else main()
