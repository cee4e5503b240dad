"""Rounding to fewer significant bits than the dtype keeps: the coarser-rounding kernel faults
(KernelOptions.fault "k_bits", "v_bits", "attn_out_bits", "o_weight_bits"; kernels/model.py,
kernels/weights.py) and the band faults of meta_tests/band_faults.py share this one function."""

from __future__ import annotations

import torch


def round_bits(x: torch.Tensor, bits: float) -> torch.Tensor:
    """x rounded to nearest (ties to even) on a grid of step 2**-bits of its mantissa in [0.5, 1), then
    stored in x's dtype: `bits` significant bits for an integer (exact in bfloat16 for bits <= 8), a
    coarser grid that is no power of two for a fractional one, as a quantizer with a wrong scale has
    (the bits faults of KernelOptions.fault; meta_tests/band_faults.py)."""
    f = x.float()
    m, e = torch.frexp(f)
    step = 2.0**-bits
    out = torch.ldexp(torch.round(m / step) * step, e)
    return torch.where(torch.isfinite(f), out, f).to(x.dtype)
