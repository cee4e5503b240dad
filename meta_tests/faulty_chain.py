"""The torch backend with one step of the sampling chain skipped on the draft rows or on the
verification rows only (kernels/options.py chain_fault, applied in kernels/engine_heads.py
Engine._processed): a one-sided mask or processor, a realistic engine bug. The built-in cases
must catch each (meta_tests/test_cases_bite.py):

    python -m oracle check --backend meta_tests.faulty_chain:make_skip_draft_mask_bf16

Factories: make_skip_{draft,verify}_{STEP}_{bf16,fp32}, STEP in STEPS.
"""

from __future__ import annotations

import functools

from kernels.backend import TorchBackend
from kernels.options import KernelOptions

STEPS = ("mask", "bad_words", "min_tokens", "logit_bias", "repetition", "presence", "frequency")
ROWS = ("draft", "verify")


def make(step: str, rows: str, dtype: str = "bfloat16") -> TorchBackend:
    fault = f"skip_{rows}.{step}"
    opts = KernelOptions.from_env()
    opts = KernelOptions(**{**{f: getattr(opts, f) for f in opts.__dataclass_fields__}, "fault": fault})
    name = ("torch-cpu-bf16" if dtype == "bfloat16" else "torch-cpu") + f" ({fault})"
    return TorchBackend("cpu", dtype=dtype, name=name, kernel_options=opts)


for _step in STEPS:
    for _rows in ROWS:
        globals()[f"make_skip_{_rows}_{_step}_bf16"] = functools.partial(make, _step, _rows, "bfloat16")
        globals()[f"make_skip_{_rows}_{_step}_fp32"] = functools.partial(make, _step, _rows, "float32")
