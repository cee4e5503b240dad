"""Is c(1) a first-use effect? Measure c(M) twice in one fresh process, then once more
after a warm-up of every GEMM shape on the default stream. One device call.
    PYTHONPATH=. python scripts/gpu_c1_probe.py"""
import json
import os


from kernels import bench

out = {}
rows = [1, 4, 16]
out["first"] = bench.measure_c_table("ouro-1.4b", rows, 256, device="cuda", repeats=50)["c_ms"]
out["second"] = bench.measure_c_table("ouro-1.4b", rows, 256, device="cuda", repeats=50)["c_ms"]
out["eager_second"] = bench.measure_c_table("ouro-1.4b", [1], 256, device="cuda", repeats=20, graphs=False)["c_ms"]
print(json.dumps(out), flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "c1_probe.json"), "w"), indent=1)
