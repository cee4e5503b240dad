"""Host time per round phase of TorchSession on the CPU (tiny model, greedy, K = 4, d = 2, D = 4):
the mean plan / enqueue / wait / finish ms of 12 synchronous rounds after a warm-up generation.
The model's compute lands in enqueue on the CPU; plan and finish are the host bookkeeping a
CUDA round also pays (docs/results.md, "Host bookkeeping per round").
    PYTHONPATH=. python scripts/host_finish_time.py C block|loop CONTEXT [profile]"""
import argparse, cProfile, pstats, sys
from kernels.bench_rounds import make_session, random_weights, run_generation
from oracle.sampling import SamplingParams as SP
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("C", type=int, help="concurrency")
ap.add_argument("mode", choices=("block", "loop"))
ap.add_argument("context", type=int, help="prompt length")
ap.add_argument("profile", nargs="?", help="any value: also profile the finish phase")
ARGS = ap.parse_args()
C, mode, ctx = ARGS.C, ARGS.mode, ARGS.context
w = random_weights("tiny", "cpu")
s = make_session(w, mode, C, ctx, 16, 4, 2, 4)
prompts = [[(i * 7 + j) % 60 for j in range(ctx)] for i in range(C)]
run_generation(s, prompts, [SP()] * C, 4, 4)
r = run_generation(s, prompts, [SP()] * C, 12, 4)
print(mode, C, ctx, {k: round(v, 3) for k, v in r["host_ms"].items()})
if ARGS.profile is not None:
    import kernels.session as S
    pr = cProfile.Profile()
    orig = S.TorchSession._finish
    def fin(self, h):
        pr.enable(); orig(self, h); pr.disable()
    S.TorchSession._finish = fin
    run_generation(s, prompts, [SP()] * C, 12, 4)
    pstats.Stats(pr).sort_stats("cumtime").print_stats(15)
