"""Torch implementation of both speculative rounds (docs/DESIGN.md section 9).

FP32 on CPU (CI checks the logic against the reference), BF16 on CPU (the reduced-precision backend
CI judges by the bfloat16 row) and BF16 on CUDA with CUDA graphs. Entry points: the registry's
factories in kernels/backend.py (make_torch_cpu, make_torch_cpu_bf16, make_torch_cuda: `--backend
NAME`, ORACLE_BACKEND), and `kernels.backend.TorchBackend(device, dtype=, kernel_options=)` in code
(kernels/options.py: which device fast paths run).
"""
