"""TorchBackend(device, dtype=, name=, kernel_options=, **session defaults): the torch rounds as an
oracle backend (oracle/runtime/backends.py). FP32 on CPU, BF16 with CUDA graphs on CUDA. The registry
factories (make_torch_cpu, make_torch_cpu_bf16, make_torch_cuda, and the batch-invariant
make_torch_cpu_bf16_inv, make_torch_cuda_inv: `--backend NAME`, ORACLE_BACKEND) take their
KernelOptions from the LOOPSPEC_* variables (KernelOptions.from_env, which refuses a malformed one in
a line; the _inv ones with invariant=True); TorchBackend itself does not read the environment
(default KernelOptions(): each fast path on where available)."""

from __future__ import annotations

import dataclasses
import weakref

import torch

from oracle.errors import OracleError

from . import host_sampling, invariant
from .options import KernelOptions
from .session import TorchSession
from .weights import TorchWeights

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TorchBackend:
    exact = False
    policies = ("sequential", "fixed")
    host_rng = True  # uniforms come from PCG64(seed), drawn on the host like the reference
    sampling = host_sampling  # the device sampler behind oracle.sampling's interface

    def __init__(
        self,
        device: str = "cpu",
        dtype: str | None = None,
        name: str | None = None,
        kernel_options: KernelOptions | None = None,
        **session_defaults,
    ):
        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise OracleError(f"backend {name or 'torch-cuda'}: no CUDA device is available")
        self.device = dev
        self.dtype = dtype or ("bfloat16" if dev.type == "cuda" else "float32")
        self.name = name or f"torch-{dev.type}"
        if self.dtype not in DTYPES:
            raise OracleError(f"backend {self.name}: unknown dtype {self.dtype!r} (known: {', '.join(DTYPES)})")
        graphs = "cuda" if dev.type == "cuda" else "off"
        self.kernel_options = KernelOptions() if kernel_options is None else kernel_options
        self.kernel_options.resolve(dev)  # refuses a path this device cannot take
        if self.kernel_options.invariant:
            invariant.prims_for(dev)  # refuses a device without invariant primitives
        # a row's values do not depend on its call's other rows (the verdict's exactness tier)
        self.batch_invariant = self.kernel_options.invariant
        self.defaults = {"graphs": graphs, "kernel_options": self.kernel_options} | session_defaults
        self._weights = weakref.WeakKeyDictionary()  # reference model -> converted weights

    @property
    def fork_safe(self) -> bool:
        """On the CPU with one intra-op thread a forked child may run this backend (`check
        --backend` runs the drift probe in one): no thread pool or device context to inherit."""
        return self.device.type == "cpu" and torch.get_num_threads() == 1

    def weights(self, model) -> TorchWeights:
        w = self._weights.get(model)
        if w is None:
            w = TorchWeights.from_model(model, self.device, DTYPES[self.dtype])
            w = self._weights[model] = w.with_fault(self.kernel_options.fault)
        return w

    def session(self, model, d, D, mode, policy="sequential", **options) -> TorchSession:
        if policy not in self.policies:
            raise OracleError(f"backend {self.name} does not support RNG policy {policy!r}")
        return TorchSession(
            self.weights(model), d, D, mode, policy, name=self.name, dtype_name=self.dtype, **(self.defaults | options)
        )


def make_torch_cpu() -> TorchBackend:
    """ORACLE_BACKEND=torch-cpu: FP32 on the CPU (the kernels' logic, judged in the float32 row)."""
    return TorchBackend("cpu", kernel_options=KernelOptions.from_env())


def make_torch_cpu_bf16() -> TorchBackend:
    """ORACLE_BACKEND=torch-cpu-bf16: BF16 weights, activations and KV on the CPU: a
    reduced-precision backend CI can judge with the bfloat16 row, no GPU needed."""
    return TorchBackend("cpu", dtype="bfloat16", name="torch-cpu-bf16", kernel_options=KernelOptions.from_env())


def make_torch_cuda() -> TorchBackend:
    """ORACLE_BACKEND=torch-cuda: BF16 with CUDA graphs."""
    return TorchBackend("cuda", kernel_options=KernelOptions.from_env())


def make_torch_cpu_bf16_inv() -> TorchBackend:
    """ORACLE_BACKEND=torch-cpu-bf16-inv: torch-cpu-bf16 in the invariant mode (kernels/invariant.py):
    batch-invariant, so the verdict adds its exactness tier."""
    opts = dataclasses.replace(KernelOptions.from_env(), invariant=True)
    return TorchBackend("cpu", dtype="bfloat16", name="torch-cpu-bf16-inv", kernel_options=opts)


def make_torch_cuda_inv() -> TorchBackend:
    """ORACLE_BACKEND=torch-cuda-inv: torch-cuda in the invariant mode (kernels/invariant_triton.py)."""
    if not torch.cuda.is_available():
        raise OracleError("backend torch-cuda-inv: no CUDA device is available")
    opts = dataclasses.replace(KernelOptions.from_env(), invariant=True)
    return TorchBackend("cuda", name="torch-cuda-inv", kernel_options=opts)
