"""The torch backend with one deliberate kernel fault (kernels/options.py FAULTS), for the drift
verdict's tests (meta_tests/test_drift_faults.py) and `make gpu-parity` (gpu_tests):

    make_attn_scale_bf16      softmax logit scale x1.01 in the attention kernels (BF16, CPU)
    make_rope_theta_bf16      RoPE base x1.01 in the cos/sin tables (BF16, CPU)
    make_input_norm_bf16      layer 0's input_layernorm weight x1.01 (BF16, CPU)
    make_*_cuda               the same faults in the BF16 CUDA kernels with graphs
    make_inv_splitk_bf16      batch-invariant torch-cpu-bf16-inv whose o_proj splits K by the call's rows,
    make_inv_attn_split_bf16  whose attention splits the keys by the call's rows, and
    make_inv_norm_block_bf16  whose post_attention_layernorm sums in call-dependent blocks
                              (kernels/invariant_faults.py; INVARIANT_OPS: the operation each breaks)

Each is a correct-looking engine: every value stays within the bfloat16 row of the table; only
the drift verdict sees the fault, and it must name the parameter (NAMES).

    python -m oracle check --backend meta_tests.faulty_kernels:make_attn_scale_bf16
"""

from __future__ import annotations

import dataclasses
import functools

from kernels.backend import TorchBackend
from kernels.options import KernelOptions

FAULTS = {
    "attn_scale": "attn_scale=1.01",
    "rope_theta": "rope_theta=1.01",
    "input_norm": "input_layernorm.0=1.01",
    # precision faults: computes or stores below the declared bfloat16 (the precision verdict)
    "fp8_k": "fp8_k",
    "fp8_v": "fp8_v",
    "fp8_act": "fp8_act",
    "fp8_gate_up": "fp8_gate_up.1",
}
# what the verdict must name for each fault
NAMES = {
    "attn_scale": "attention logit scale",
    "rope_theta": "RoPE base",
    "input_norm": "layer 0 input_layernorm weight",
}


def _make(fault: str, device: str) -> TorchBackend:
    opts = dataclasses.replace(KernelOptions.from_env(), fault=FAULTS[fault])
    if device == "cpu":
        return TorchBackend("cpu", dtype="bfloat16", name=f"torch-cpu-bf16 ({FAULTS[fault]})", kernel_options=opts)
    return TorchBackend("cuda", name=f"torch-cuda ({FAULTS[fault]})", kernel_options=opts)


# the factories `--backend meta_tests.faulty_kernels:make_<fault>_<device>` names
make_attn_scale_bf16 = functools.partial(_make, "attn_scale", "cpu")
make_rope_theta_bf16 = functools.partial(_make, "rope_theta", "cpu")
make_input_norm_bf16 = functools.partial(_make, "input_norm", "cpu")
make_attn_scale_cuda = functools.partial(_make, "attn_scale", "cuda")
make_rope_theta_cuda = functools.partial(_make, "rope_theta", "cuda")
make_input_norm_cuda = functools.partial(_make, "input_norm", "cuda")
make_fp8_k_bf16 = functools.partial(_make, "fp8_k", "cpu")
make_fp8_v_bf16 = functools.partial(_make, "fp8_v", "cpu")
make_fp8_act_bf16 = functools.partial(_make, "fp8_act", "cpu")
make_fp8_gate_up_bf16 = functools.partial(_make, "fp8_gate_up", "cpu")
make_fp8_k_cuda = functools.partial(_make, "fp8_k", "cuda")
make_fp8_v_cuda = functools.partial(_make, "fp8_v", "cuda")
make_fp8_act_cuda = functools.partial(_make, "fp8_act", "cuda")
make_fp8_gate_up_cuda = functools.partial(_make, "fp8_gate_up", "cuda")

# Batch-invariance faults (kernels/invariant_faults.py): declared batch_invariant, yet in calls of
# more than 2 rows one operation rounds differently (about 1 ULP of bfloat16 in some elements).
# The exactness tier must fail each and the localizer name this capture op (oracle/capture.py).
INVARIANT_OPS = {
    "make_inv_splitk_bf16": "o_proj",
    "make_inv_attn_split_bf16": "attn",
    "make_inv_norm_block_bf16": "post_norm",
}


def _make_inv(fault: str) -> TorchBackend:
    opts = dataclasses.replace(KernelOptions.from_env(), invariant=True, fault=fault)
    return TorchBackend("cpu", dtype="bfloat16", name=f"torch-cpu-bf16-inv ({fault})", kernel_options=opts)


make_inv_splitk_bf16 = functools.partial(_make_inv, "inv_splitk")
make_inv_attn_split_bf16 = functools.partial(_make_inv, "inv_attn_split")
make_inv_norm_block_bf16 = functools.partial(_make_inv, "inv_norm_block")
