"""The judge's tolerance table (oracle/judge/comparison/compare.py applies it; oracle/runtime/backends.py checks
a backend's dtype has a row). Imports nothing, so the backend registry need not import the judge."""

# The one tolerance table, keyed by dtype. kv, logits: relative error ||got - ref|| /
# max(||ref||, the RMS norm of the reference's vectors of that kind, depth and layer in the
# round) allowed per KV write and per logits vector at depth 0; growth: the factor each further
# loop multiplies it by (errors compound through every pass of the stack), so the bound at depth
# j is base * growth**j (`allowed`). margin: how close the reference's decision must be to its
# threshold for a token divergence to be excused (oracle/judge/comparison/decisions.py); it does not grow with
# depth: on the H200 (torch-cuda vs the reference on tiny/small, and vs the JAX judge at the
# ouro-1.4b shape) correct near-tie flips had reference margins up to 0.0516 at depth 0 (a draft,
# ouro-1.4b), 0.0456 at depth 1, 0.106 at depth 2 and ~0.1 at depth 3 (the table of those runs:
# `git show 0fdc589:docs/results.md`; raw runs docs/results/parity_full_*.json).
# bfloat16: measured with the torch backend in BF16 on the CPU over 40 random property-suite
# models (hidden 8-32, 1-2 layers, D up to 6, 1-2 rounds; docs/results.md): max KV error by
# depth 0..5 was 0.012, 0.028, 0.058, 0.037, 0.092, 0.21 (bounds 0.04 ... 0.30); on the
# tiny/small presets (D <= 5) 0.028-0.048 on the CPU and the H200. self_margin: a backend's
# decision must be the reference's rule applied to the backend's OWN logits and uniforms,
# except within this margin (sampling runs in FP32 on every backend: the same for all dtypes).
# float32: errors compound through the loops as in BF16. Over 2000 random property-suite models
# (`python scripts/bf16_false_alarm_rate.py --row --backend torch-cpu --n 2000`, and the same with
# --backend meta_tests.faulty:make_noisy_fp32; docs/results/fp32_row_*.json) the largest error of
# correct FP32 backends, in units of 1e-5, was 0.20-0.76 (KV) and 0.13-1.01 (logits) per depth 0..5,
# its 99% quantile growing about 1.45x per loop (0.056 at depth 0 to 0.374 at depth 5, logits): a
# flat 1e-5 failed 1 of 2000 torch-cpu runs (1.01e-5 at depth 3), and a noisy-FP32 property example
# reached 1.21e-5 at depth 4. With growth 1.5 the worst of those runs uses 0.34 of its bound.
TOLERANCES = {
    "exact": {"kv": 0.0, "logits": 0.0, "margin": 0.0, "growth": 1.0, "self_margin": 0.0},
    "float32": {"kv": 1e-5, "logits": 1e-5, "margin": 1e-5, "growth": 1.5, "self_margin": 1e-5},
    "bfloat16": {"kv": 0.04, "logits": 0.04, "margin": 0.12, "growth": 1.5, "self_margin": 1e-5},
    "float16": {"kv": 1e-2, "logits": 1e-2, "margin": 3e-2, "growth": 1.5, "self_margin": 1e-5},
}
