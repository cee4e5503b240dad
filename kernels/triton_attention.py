"""Decode-style attention straight from the KV planes (CUDA, Triton): one program per
(row, query head) walks its plane's keys 0..pos with an online softmax in FP32. No
gather of whole planes, no padded query grid: a row reads only the pos+1 keys it sees.
Checked against kernels.model.attend (and so against the reference) in gpu_tests."""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU installs: the torch path is used
    triton = None

if triton is not None:
    @triton.jit
    def _decode_attn(Q, Kc, Vc, Out, plane_ptr, pos_ptr, layer_off, stride_plane, stride_t, scale,
                     NH: tl.constexpr, GROUP: tl.constexpr, HD: tl.constexpr, BLOCK_N: tl.constexpr):
        r = tl.program_id(0)
        h = tl.program_id(1)
        plane = tl.load(plane_ptr + r).to(tl.int64)
        pos = tl.load(pos_ptr + r)
        d = tl.arange(0, HD)
        q = tl.load(Q + r * NH * HD + h * HD + d).to(tl.float32)
        base = layer_off + plane * stride_plane + (h // GROUP) * HD
        m_i = tl.zeros([], tl.float32) - float("inf")
        l_i = tl.zeros([], tl.float32)
        acc = tl.zeros([HD], tl.float32)
        for start in range(0, pos + 1, BLOCK_N):
            t = start + tl.arange(0, BLOCK_N)
            mask = t <= pos
            off = base + t[:, None].to(tl.int64) * stride_t + d[None, :]
            k = tl.load(Kc + off, mask=mask[:, None], other=0.0).to(tl.float32)
            s = tl.where(mask, tl.sum(k * q[None, :], 1) * scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 0))
            p = tl.exp(s - m_new)
            alpha = tl.exp(m_i - m_new)
            v = tl.load(Vc + off, mask=mask[:, None], other=0.0).to(tl.float32)
            l_i = l_i * alpha + tl.sum(p, 0)
            acc = acc * alpha + tl.sum(p[:, None] * v, 0)
            m_i = m_new
        tl.store(Out + r * NH * HD + h * HD + d, (acc / l_i).to(Out.dtype.element_ty))


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def decode_attention(q: torch.Tensor, kv, layer: int, plane: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """q: [M, nh, hd] (RoPE applied); plane, pos: [M]. Keys/values of plane `plane[r]` at
    positions 0..pos[r] of `layer` (already written). Returns [M, nh*hd]."""
    M, nh, hd = q.shape
    K, V = kv.k, kv.v                                   # [L, P, max_len, nkv, hd]
    assert K.is_contiguous() and V.is_contiguous() and q.is_contiguous()
    L, P, T, nkv, _ = K.shape
    out = torch.empty(M, nh * hd, device=q.device, dtype=q.dtype)
    if M:
        _decode_attn[(M, nh)](q, K, V, out, plane, pos, layer * P * T * nkv * hd, T * nkv * hd, nkv * hd,
                              hd ** -0.5, NH=nh, GROUP=nh // nkv, HD=hd, BLOCK_N=64)
    return out
