"""The device sampler behind the oracle's host-sampling interface (numpy in, numpy out),
so the property suite's enumeration tests exercise kernels/sampler.py (backend.sampling)."""
from __future__ import annotations

import numpy as np
import torch

from oracle.errors import OracleError
from oracle.sampling import check_logits

from . import sampler


def banned_row(params, V: int) -> torch.Tensor:
    """[1, V] bool: banned or outside allowed_token_ids (the engine's per-slot mask)."""
    ban = torch.full((1, V), params.allowed_token_ids is not None)
    if params.allowed_token_ids is not None:
        ban[0, list(params.allowed_token_ids)] = False
    ban[0, list(params.banned_token_ids)] = True
    return ban


def filtered_probs(logits, params) -> np.ndarray:
    check_logits(np.asarray(logits))
    assert not params.greedy, "greedy requests have no sampling distribution"
    raw = torch.as_tensor(np.asarray(logits, np.float32))[None]
    V = raw.shape[1]
    x = sampler.mask(raw, banned_row(params, V))
    if bool(sampler.nonfinite(raw, x)[0]):
        raise OracleError("masked logits: every token is masked (-inf)")
    top_p = params.top_p if params.top_p is not None and params.top_p < 1 else float("inf")
    out = sampler.filtered_probs(x, torch.tensor([float(params.temperature)]), torch.tensor([min(params.top_k or V, V)]),
                                 torch.tensor([top_p]), torch.tensor([float(params.min_p or 0.0)]))
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
