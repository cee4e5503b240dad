"""c(M) when the first shape measured in a fresh process is M=32 (argv[1]=first) vs M=1.
    PYTHONPATH=. python scripts/gpu_c1_order.py 32"""
import json
import sys

from kernels import bench

first = int(sys.argv[1])
a = bench.measure_c_table("ouro-1.4b", [first], 256, device="cuda", repeats=30)["c_ms"]
b = bench.measure_c_table("ouro-1.4b", [1, 4, 32], 256, device="cuda", repeats=30)["c_ms"]
print(json.dumps({"first_shape": first, "first": a, "then": b}))
