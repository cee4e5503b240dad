"""The device sampler behind the oracle's host-sampling interface (numpy in, numpy out),
so the property suite's enumeration tests exercise kernels/sampler.py (backend.sampling).
The rows come from kernels/rows.py (as Engine.set_params's); the processors' inputs from a
Seen (oracle/processors.py), one row."""

from __future__ import annotations

import numpy as np
import torch

from oracle.errors import OracleError
from oracle.sampling import check_logits, seen_or_empty

from . import sampler
from .rows import FILTER_ROWS, STEP_ROWS, STEPS, TAIL, sampling_rows


def _t(a) -> torch.Tensor:
    """A numpy row or scalar as a one-row tensor."""
    return torch.as_tensor(np.asarray(a))[None]


def proc_rows(rows: dict, seen, V: int) -> dict:
    """The processors' one-row inputs (kernels/sampler.py) from rows and what the logits see."""
    out = np.asarray(seen.output, np.int64)
    ctx = np.zeros(TAIL, np.int64)
    tail = out[len(out) - TAIL :] if len(out) > TAIL else out
    ctx[TAIL - len(tail) :] = tail
    prompt = np.zeros(V, bool)
    prompt[list(seen.prompt)] = True
    seq = np.asarray(tuple(seen.prompt) + tuple(seen.output) or (0,), np.int64)
    r = {k: _t(rows[k]) for name in STEPS for k in STEP_ROWS[name]}
    return r | {
        "nvalid": torch.tensor([len(out)]),
        "ctx": _t(ctx),
        "prompt": _t(prompt),
        "counts": _t(np.bincount(out, minlength=V).astype(np.float32)),
        "seq": _t(seq),
        "seqlen": torch.tensor([len(seen.prompt) + len(out)]),
    }


def _processed(logits, params, seen):
    """(raw [1, V], processed [1, V], rows) with oracle.sampling's checks."""
    check_logits(np.asarray(logits))
    raw = torch.as_tensor(np.asarray(logits, np.float32))[None]
    V = raw.shape[1]
    rows = sampling_rows(params, V)
    steps = rows["steps"]
    r = proc_rows(rows, seen_or_empty(params, seen), V) if steps else None
    x = sampler.processed(raw, _t(rows["ban"]), r, steps)
    if bool(sampler.nonfinite(raw, x, processed=bool(steps))[0]):
        raise OracleError("masked logits: a non-finite value (NaN or +inf), or every token is masked (-inf)")
    return raw, x, rows


def processed_logits(logits, params, seen=None) -> np.ndarray:
    return _processed(logits, params, seen)[1][0].numpy()


def greedy_token(logits, params=None, seen=None) -> int:
    if params is None:
        check_logits(np.asarray(logits))
        return int(sampler.greedy(torch.as_tensor(np.asarray(logits, np.float32))[None])[0])
    return int(sampler.greedy(_processed(logits, params, seen)[1])[0])


def filtered_probs(logits, params, seen=None) -> np.ndarray:
    assert not params.greedy, "greedy requests have no sampling distribution"
    _, x, rows = _processed(logits, params, seen)
    out = sampler.filtered_probs(x, {k: _t(rows[k]) for k in FILTER_ROWS})
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
    return bool(
        sampler.accepts(torch.tensor(float(u), dtype=torch.float64), torch.tensor(float(p_x)), torch.tensor(float(q_x)))
    )


def residual(p, q) -> np.ndarray:
    r, ok = sampler.residual(
        torch.as_tensor(np.asarray(p, np.float32))[None], torch.as_tensor(np.asarray(q, np.float32))[None]
    )
    if not bool(ok[0]):
        raise OracleError("residual max(0, p - q) is all zero after a rejection (p == q)")
    return r[0].numpy()
