"""The device sampler behind the oracle's host-sampling interface (numpy in, numpy out),
so the property suite's enumeration tests exercise kernels/sampler.py (backend.sampling)."""
from __future__ import annotations

import numpy as np
import torch

from oracle.errors import OracleError
from oracle.sampling import check_logits

from . import sampler


def filtered_probs(logits, params) -> np.ndarray:
    check_logits(np.asarray(logits))
    assert not params.greedy, "greedy requests have no sampling distribution"
    x = torch.as_tensor(np.asarray(logits, np.float32))[None]
    V = x.shape[1]
    top_p = params.top_p if params.top_p is not None and params.top_p < 1 else float("inf")
    out = sampler.filtered_probs(x, torch.tensor([float(params.temperature)]), torch.tensor([min(params.top_k or V, V)]),
                                 torch.tensor([top_p]))
    return out[0].numpy()


def categorical(probs, u: float) -> int:
    if not 0.0 <= u < 1.0:
        raise OracleError(f"uniform {u!r} is outside [0, 1)")
    p = torch.as_tensor(np.asarray(probs))[None]
    if not float(p.double().sum()) > 0:
        raise OracleError("categorical draw from a distribution with zero total mass")
    return int(sampler.categorical(p, torch.tensor([float(u)], dtype=torch.float64))[0])


def accepts(u: float, p_x: float, q_x: float) -> bool:
    if not q_x > 0:
        raise OracleError(f"draft token has q(x) = {q_x}: it could not have been drawn from q")
    return bool(sampler.accepts(torch.tensor(float(u), dtype=torch.float64), torch.tensor(float(p_x)),
                                torch.tensor(float(q_x))))


def residual(p, q) -> np.ndarray:
    r, ok = sampler.residual(torch.as_tensor(np.asarray(p, np.float32))[None], torch.as_tensor(np.asarray(q, np.float32))[None])
    if not bool(ok[0]):
        raise OracleError("residual max(0, p - q) is all zero after a rejection (p == q)")
    return r[0].numpy()
