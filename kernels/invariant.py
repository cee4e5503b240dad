"""The invariant mode's primitives (KernelOptions.invariant): a recurrent call and a head in which a
row's values do not depend on the other rows of its call (their count, depths, positions, the row's
place) nor on torch's thread count. The model-level function, kernels/model.py
`invariant_call(model, prims, h, pos, plane)`, runs the loop on four primitives of one signature:

    linear(x [M, K], w [N, K]) -> [M, N]          x.dtype, FP32 accumulation
    rms_norm(x [M, H], w [H], eps) -> [M, H]      statistic in FP32, cast, times w (model.rms_norm)
    silu_mul(g [M, I], u [M, I]) -> [M, I]        silu(g) cast to g.dtype, times u
    attention(q [M, nh, hd], k, v [P, S, nkv, hd], plane [M], pos [M], scale) -> [M, nh*hd]
                                                  row r reads keys 0..pos[r] of plane[r] (GQA)

CPU_PRIMS (here) implements them on the CPU; on CUDA `prims_for` takes kernels.invariant_triton.PRIMS.
A prims object may also offer `attention_parts(q [1, nh, hd], k, v, plane [1], pos [1], scale) ->
(scores [nh, pos+1] FP32, probs [nh, pos+1])` for the capture (CPU_PRIMS does).

Why CPU_PRIMS is invariant by construction: every value is built from IEEE operations that are
correctly rounded element by element (+, -, *, /, sqrt, casts, round-to-integer, integer bit
operations, max), so an element's bits depend only on its operands, never on whether torch treats it
in a vector body or a scalar tail, in which thread, or in a tensor of which size. Two things in torch
are not like that and are not used: (1) its reductions (sum, mean, matmul, softmax), whose blocking,
vector width and thread split change with the tensor's shape and the thread count; every reduction
here is our own pairwise tree `_tree`: pad the reduced axis to a power of two with -0.0 (the exact
additive identity: -0 + x = x for every x, +0 included, so the padding length changes nothing), then
halve, x[..., :n/2] + x[..., n/2:]; (2) its transcendental functions (exp, sigmoid, rsqrt), whose
vectorized (Sleef) and scalar forms may differ by an ULP, so that an element's bits could depend on
its place in the tensor; here exp is `_exp` (Cody-Waite reduction and a polynomial, from + and * only)
and 1/sqrt(x) is a sqrt and a division. Products of two bfloat16 values are exact in FP32; all
accumulation is FP32. Keys a row does not see are never read into its arithmetic: `torch.where`
puts -inf (scores) or -0.0 (terms of a sum) in their place, so the padding of a chunk to its
longest row is invisible. Rows are processed in chunks of at most CHUNK elements.
"""

from __future__ import annotations

import importlib
import types

import torch

from oracle.errors import OracleError

CHUNK = 1 << 22  # FP32 elements of one chunk's products (16 MiB)


def _tree(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis in a fixed pairwise order (module docstring). x: [..., n] FP32 -> [...]."""
    n = x.shape[-1]
    p2 = 1 << max(n - 1, 0).bit_length()
    if p2 != n:
        x = torch.cat([x, x.new_full((*x.shape[:-1], p2 - n), -0.0)], dim=-1)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def _exp(x: torch.Tensor) -> torch.Tensor:
    """exp of FP32 x from correctly rounded operations only (about 1 ULP; the Cephes expf method):
    x = k ln2 + r, |r| <= ln2/2, exp(r) by a degree-7 polynomial, times 2^k from the exponent bits.
    x is clamped to [-87, 88] (exp(-87) ~ 1.6e-38 stands for 0; callers mask what they must)."""
    x = x.clamp(-87.0, 88.0)
    k = torch.round(x * 1.44269504088896341)
    r = (x - k * 0.693359375) - k * -2.12194440e-4  # k * 0.693359375 is exact (9 + 8 bits)
    p = 1.9875691500e-4
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + c
    y = p * (r * r) + r + 1.0
    scale = ((k.to(torch.int32) + 127) << 23).view(torch.float32)  # 2^k, k in [-126, 127]
    return y * scale


def _rsqrt(x: torch.Tensor) -> torch.Tensor:
    """1 / sqrt(x): a correctly rounded square root, then a correctly rounded division."""
    return 1.0 / torch.sqrt(x)


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x: [M, K], w: [N, K] -> [M, N] in x.dtype: each output a _tree of its K FP32 products."""
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    rows = max(1, min(M, CHUNK // (N * K)))  # a chunk's rows and columns: products of at most CHUNK
    cols = N if N * K <= CHUNK else max(1, CHUNK // K)
    for r0 in range(0, M, rows):
        xf = x[r0 : r0 + rows].float()[:, None, :]  # [C, 1, K]
        for n0 in range(0, N, cols):
            out[r0 : r0 + rows, n0 : n0 + cols] = _tree(xf * w[n0 : n0 + cols].float()[None]).to(x.dtype)
    return out


def norm_scale(x: torch.Tensor, sumsq: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The rest of an RMSNorm once the FP32 sum of squares is known. x: [M, H], sumsq: [M]."""
    inv = _rsqrt(sumsq / x.shape[-1] + eps)  # [M]
    return ((x.float() * inv[:, None]).to(w.dtype).float() * w.float()).to(w.dtype)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [M, H] -> [M, H]: (x * rsqrt(mean(x^2) + eps)) cast to w.dtype, times w (kernels/model.py rms_norm)."""
    xf = x.float()
    return norm_scale(x, _tree(xf * xf), w, eps)


def silu_mul(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """g, u: [M, I] -> silu(g) (cast to g.dtype) * u, in g.dtype; silu(g) = g / (1 + exp(-g))."""
    gf = g.float()
    s = (gf / (1.0 + _exp(-gf))).to(g.dtype)
    return (s.float() * u.float()).to(g.dtype)


def scores(q, k, plane, pos, scale):
    """q: [C, nh, hd]; k: [P, S, nkv, hd] -> (scores [C, nkv, gq, S2] FP32 with -inf at keys a row
    does not see, visible [C, S2] bool, keys' gather index [C, S2]). S2: a power of two >= the
    chunk's longest row (its keys past S are masked)."""
    C, nh, hd = q.shape
    S, nkv = k.shape[1], k.shape[2]
    S2 = 1 << int(pos.max()).bit_length()  # > max pos
    j = torch.arange(S2, device=q.device)
    visible = j[None, :] <= pos[:, None]  # [C, S2]
    idx = plane[:, None] * S + j.clamp(max=S - 1)[None, :]  # [C, S2] into k.view(P*S, ...)
    kk = k.reshape(-1, nkv, hd).index_select(0, idx.reshape(-1)).view(C, S2, nkv, hd).float()
    qf = q.float().view(C, nkv, nh // nkv, 1, hd)
    s = _tree(qf * kk.permute(0, 2, 1, 3)[:, :, None]) * scale  # [C, nkv, gq, S2]
    return torch.where(visible[:, None, None, :], s, float("-inf")), visible, idx


def softmax(s: torch.Tensor, visible: torch.Tensor, dtype) -> torch.Tensor:
    """s: [C, nkv, gq, S2] (-inf where not visible) -> probabilities in dtype, -0.0 where not visible."""
    vis = visible[:, None, None, :]
    e = torch.where(vis, _exp(s - s.amax(-1, keepdim=True)), -0.0)  # max: exact in any order
    return torch.where(vis, e / _tree(e)[..., None], -0.0).to(dtype)


def weighted(p: torch.Tensor, v: torch.Tensor, idx: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """sum_j p[.., j] v[j] in FP32: p [C, nkv, gq, S2], v [P, S, nkv, hd] -> [C, nkv, gq, hd]."""
    C, nkv, gq, S2 = p.shape
    hd = v.shape[-1]
    vv = v.reshape(-1, nkv, hd).index_select(0, idx.reshape(-1)).view(C, S2, nkv, hd).float()
    terms = p.float()[..., None, :] * vv.permute(0, 2, 3, 1)[:, :, None]  # [C, nkv, gq, hd, S2]
    return _tree(torch.where(visible[:, None, None, None, :], terms, -0.0))


def attention(q, k, v, plane, pos, scale) -> torch.Tensor:
    """q: [M, nh, hd]; k, v: [P, S, nkv, hd] (one layer's planes) -> [M, nh*hd] in q.dtype."""
    M, nh, hd = q.shape
    out = torch.empty(M, nh * hd, dtype=q.dtype, device=q.device)
    S2 = 1 << int(pos.max()).bit_length()
    rows = max(1, CHUNK // (nh * hd * S2))
    for r0 in range(0, M, rows):
        sl = slice(r0, r0 + rows)
        s, visible, idx = scores(q[sl], k, plane[sl], pos[sl], scale)
        o = weighted(softmax(s, visible, q.dtype), v, idx, visible)
        out[sl] = o.reshape(-1, nh * hd).to(q.dtype)
    return out


def attention_parts(q, k, v, plane, pos, scale):
    """One row's scores (FP32) and probabilities (q.dtype) over its visible keys: [nh, pos+1] each."""
    s, visible, _ = scores(q, k, plane, pos, scale)
    n, nh = int(pos[0]) + 1, q.shape[1]
    return s.reshape(nh, -1)[:, :n], softmax(s, visible, q.dtype).reshape(nh, -1)[:, :n]


CPU_PRIMS = types.SimpleNamespace(
    linear=linear, rms_norm=rms_norm, silu_mul=silu_mul, attention=attention, attention_parts=attention_parts
)


def prims_for(device: torch.device):
    """The primitives of `device`: CPU_PRIMS, or on CUDA kernels/invariant_triton.py's PRIMS."""
    if device.type != "cuda":
        return CPU_PRIMS
    try:
        return importlib.import_module("kernels.invariant_triton").PRIMS
    except ModuleNotFoundError as e:
        if e.name not in ("kernels.invariant_triton", "triton"):
            raise
        raise OracleError(f"torch-cuda-inv needs kernels/invariant_triton.py and Triton ({e.name} not found)") from None
