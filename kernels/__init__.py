"""Torch implementation of both speculative rounds (docs/DESIGN.md section 9).

FP32 on CPU (CI checks the logic against the reference), BF16 on CUDA with CUDA graphs.
Entry point: `kernels.backend.make_torch_backend(device, kernel_options=KernelOptions(...))`
(kernels/options.py: which device fast paths run).
"""
