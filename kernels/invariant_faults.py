"""The invariant mode's deliberate faults (KernelOptions.fault, kernels/options.py INVARIANT_FAULTS):
each breaks batch invariance in one operation, the way a kernel that picks its blocking by the
call's row count does. In calls of up to 2 rows every one is the invariant primitive itself; in
larger calls:

    inv_splitk      o_proj splits K in two halves, each half's product stored in the activation
                    dtype (a split-K kernel's bfloat16 partials), then added          (op "o_proj")
    inv_attn_split  attention splits each row's keys in two chunks, each normalized by its own
                    max and sum, probabilities in the activation dtype, combined with a running
                    max/sum (split-KV decode); such a kernel has no probabilities of its own,
                    so the capture records none                                       (op "attn")
    inv_norm_block  post_attention_layernorm sums its squares in blocks of hidden/4, each
                    block's sum stored in the activation dtype                        (op "post_norm")

The differences are about 1 ULP of bfloat16 in some elements of the named operation, then spread.
"""

from __future__ import annotations

import functools
import types

import torch

from . import invariant as inv

ROWS = 2  # calls of more rows than this take the faulty form


def splitk_linear(prims, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x: [M, K], w: [N, K] -> [M, N]: the two halves of K apart, each rounded to x.dtype, then added."""
    half = x.shape[1] // 2
    lo, hi = prims.linear(x[:, :half], w[:, :half]), prims.linear(x[:, half:], w[:, half:])
    return (lo.float() + hi.float()).to(x.dtype)


def split_attention(q, k, v, plane, pos, scale) -> torch.Tensor:
    """kernels/invariant.py attention with each row's keys 0..pos in two chunks (split-KV decode)."""
    M, nh, hd = q.shape
    s, visible, idx = inv.scores(q, k, plane, pos, scale)  # [M, nkv, gq, S2]
    j = torch.arange(s.shape[-1], device=q.device)[None, :]
    half = (pos[:, None] + 2) // 2  # chunk 0: keys below ceil((pos + 1) / 2)
    ms, ls, os_ = [], [], []
    for part in (j < half, j >= half):
        vis = visible & part  # [M, S2]
        sc = torch.where(vis[:, None, None, :], s, float("-inf"))
        m = sc.amax(-1)  # [M, nkv, gq]; -inf for an empty chunk
        e = torch.where(vis[:, None, None, :], inv._exp(sc - m[..., None]), -0.0)
        lsum = inv._tree(e)
        p = torch.where(vis[:, None, None, :], e / lsum[..., None], -0.0).to(q.dtype)
        ms.append(m), ls.append(lsum), os_.append(inv.weighted(p, v, idx, vis))
    top = torch.maximum(*ms)
    w0, w1 = (lsum * inv._exp(m - top) for m, lsum in zip(ms, ls))  # an empty chunk: weight 0
    o = (w0[..., None] * os_[0] + w1[..., None] * os_[1]) / (w0 + w1)[..., None]
    return o.reshape(M, nh * hd).to(q.dtype)


def block_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """kernels/invariant.py rms_norm with the sum of squares in blocks of H/4, each stored in x.dtype."""
    xf = x.float()
    B = max(1, x.shape[-1] // 4)
    total = xf.new_zeros(x.shape[0])
    for b0 in range(0, x.shape[-1], B):
        total = total + inv._tree(xf[:, b0 : b0 + B] * xf[:, b0 : b0 + B]).to(x.dtype).float()
    return inv.norm_scale(x, total, w, eps)


def ops(prims, fault: str, M: int):
    """The operations a fault may replace, for a call of M rows: o_proj, attention, post_norm, and
    probs (whether the attention has probabilities to capture)."""
    big = M > ROWS
    split = fault == "inv_attn_split" and big
    return types.SimpleNamespace(
        o_proj=functools.partial(splitk_linear, prims) if fault == "inv_splitk" and big else prims.linear,
        attention=split_attention if split else prims.attention,
        post_norm=block_norm if fault == "inv_norm_block" and big else prims.rms_norm,
        probs=not split,
    )
