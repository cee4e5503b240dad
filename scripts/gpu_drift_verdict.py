"""The drift verdict on the BF16 CUDA kernels, correct and with each kernel fault
(meta_tests/faulty_kernels.py), at one preset, the model built once: the one verdict of
`check --backend torch-cuda [--reference jax]` (judge_cases on one custom case, then the
drift probe), with the time each part took. Writes one JSON object.

    python scripts/gpu_drift_verdict.py --preset small [--reference jax] [--faults none,attn_scale,rope_theta]
        [--cases-for none] [--json OUT]
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FAULTS = {"none": "", "attn_scale": "attn_scale=1.01", "rope_theta": "rope_theta=1.01",
          "input_norm": "input_layernorm.0=1.01"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--reference", default="reference", help="reference | jax")
    p.add_argument("--faults", default="none,attn_scale,rope_theta,input_norm")
    p.add_argument("--cases-for", default="all", help="all | none (only the correct kernels) | skip: which runs "
                   "also judge the custom case")
    p.add_argument("--requests", type=int, default=24, help="drift probe requests")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from kernels.backend import TorchBackend
    from kernels.options import KernelOptions
    from oracle.backends import load_backend
    from oracle.judge.scenario import make_case
    from oracle.judge.cases import judge_cases
    from oracle.judge.drift import judge_drift
    from oracle.model import build_model
    from oracle.sampling import SamplingParams as SP
    t0 = time.perf_counter()
    model = build_model(args.preset, 0)
    judge = None if args.reference == "reference" else load_backend(args.reference)
    out = {"preset": args.preset, "judge": args.reference, "build_s": round(time.perf_counter() - t0, 1), "runs": {}}
    params = [SP(), SP(1.0, top_k=20, seed=1), SP(0.8, top_p=0.9, seed=2)]
    case = make_case("real-shape 5,3,1 x2", [{0: 5, 1: 3, 2: 1}] * 2, 2, 4, params, seed=3,
                     vocab=model.cfg.vocab_size)
    for name in args.faults.split(","):
        bk = TorchBackend("cuda", name=f"torch-cuda {FAULTS[name]}".strip(), kernel_options=KernelOptions(fault=FAULTS[name]))
        t = time.perf_counter()
        res = {"ok": True, "checks": []}
        print(f"{name}: start at {time.perf_counter() - t0:.1f} s", flush=True)
        if args.cases_for == "all" or (name == "none" and args.cases_for == "none"):
            res = judge_cases(bk, model, [case], judge=judge)
        t_cases = time.perf_counter() - t
        judge_drift(bk, model, res, judge=judge, n=args.requests)
        dr = res["drift"]
        failed = [c for c in res["checks"] if not c["ok"]]
        out["runs"][name] = {"ok": res["ok"], "cases_s": round(t_cases, 1), "drift_s": dr["seconds"],
                             "failed": [f"{c['name']}: {c['detail'][:300]}" for c in failed],
                             "max_rel_err": res.get("max_rel_err"), "drift": dr}
        top = sorted(dr["estimates"], key=lambda e: -abs(e["z"]))[:3]
        print(f"{name}: ok={res['ok']} cases {t_cases:.1f} s, drift {dr['seconds']} s; "
              + (failed[0]["detail"][:220] if failed else "") + " | top: "
              + "; ".join(f"{e['parameter']} {e['scale']:.4f}±{e['se']:.4f} z={e['z']:.1f}" for e in top), flush=True)
    out["total_s"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(out, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
