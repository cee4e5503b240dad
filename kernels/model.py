"""The looped model on the device over packed rows at mixed depths (same math as
oracle/model.py): one GEMM per projection over all rows of a call, K/V of all rows
written into their depth planes before any row attends, each row masked to positions
<= its own. Rows' positions and planes arrive as device tensors; attention reads
each plane of a call once (rows grouped by plane, as a varlen attention kernel would).
In the invariant mode (KernelOptions.invariant) every call is `invariant_call` and every head a
product, on the batch-invariant primitives of kernels/invariant.py."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from . import gemv as gemv_kernels, invariant, invariant_faults, triton_attention
from .kvplanes import KVPlanes
from .options import PDL_MODES, KernelOptions
from .rounding import round_bits
from .weights import TorchWeights


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # statistic in FP32, cast to the model dtype, then times the weight (no 1 + w)
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(w.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [M, heads, hd]; cos, sin: [M, hd]; non-interleaved rotate_half
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def pre_attn(h, n_in, qkv, cos, sin, nh: int, nkv: int, hd: int, eps: float, *, rec=None):
    """Norm, fused q/k/v projection, RoPE. h: [M, H] -> q [M, nh, hd], k, v [M, nkv, hd].
    rec: None, or rec(op=tensor, ...) records the armed row's intermediates (kernels/tap.py)."""
    M = h.shape[0]
    n = rms_norm(h, n_in, eps)
    q, k, v = (n @ qkv.T).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
    q, k, v = rope(q.reshape(M, nh, hd), cos, sin), rope(k.reshape(M, nkv, hd), cos, sin), v.reshape(M, nkv, hd)
    if rec is not None:
        rec(norm_in=n, q=q, k=k, v=v)
    return q, k, v


def post_attn(h, a, o, n_attn_out, n_post, gate_up, down, n_mlp_out, eps: float, act_fp8: bool = False, *, rec=None):
    """Output projection, sandwich norms and the SwiGLU MLP. h, a: [M, H] -> [M, H].
    act_fp8: the "fp8_act" precision fault (the activation rounded through FP8 e4m3). rec: as pre_attn's."""
    y = a @ o.T
    ao = rms_norm(y, n_attn_out, eps)
    x = h + ao
    pn = rms_norm(x, n_post, eps)
    g, u = (pn @ gate_up.T).chunk(2, dim=-1)
    act = F.silu(g) * u
    if act_fp8:
        act = fp8(act)
    d = act @ down.T
    mo = rms_norm(d, n_mlp_out, eps)
    out = x + mo
    if rec is not None:
        rec(attn=a, o_proj=y, attn_out_norm=ao, residual_attn=x, post_norm=pn, gate=g, up=u, act=act, down=d)
        rec(mlp_out_norm=mo, residual_mlp=out)
    return out


def fp8(x: torch.Tensor) -> torch.Tensor:
    """x rounded through FP8 e4m3 and back (the precision faults of KernelOptions.fault)."""
    return x.to(torch.float8_e4m3fn).to(x.dtype)


def fp8_rows(flat: torch.Tensor, index: torch.Tensor) -> None:
    """The "fp8_k" / "fp8_v" faults: the rows just written at `index` of a flat KV plane, stored through FP8."""
    flat.index_copy_(0, index, fp8(flat.index_select(0, index)))


# compile_dynamic (KernelOptions):
# "rows": only the row count is symbolic (marked dynamic on the first call, so one compile
# serves every M >= 2); hidden sizes stay static and Inductor's norm reductions get static
# configs. "all": dynamic=True, every dimension symbolic; on the H200 its norm kernels took
# 27-50 us each at M = 2 (2.5 ms of a 4.4 ms call; the history table of docs/results/history_2026-12.md).
@functools.cache
def _fused(compile_dynamic: str = "rows"):
    """pre_attn/post_attn through torch.compile (Inductor fuses the norms, RoPE and SiLU
    into a few kernels around the GEMMs); compiled once per process and compile_dynamic."""
    assert compile_dynamic in ("rows", "all"), compile_dynamic
    dyn = True if compile_dynamic == "all" else None
    pre, post = torch.compile(pre_attn, dynamic=dyn), torch.compile(post_attn, dynamic=dyn)
    if compile_dynamic == "all":
        return pre, post

    def pre_rows(h, n_in, qkv, cos, sin, *rest):
        _rows_dynamic(h, cos, sin)
        return pre(h, n_in, qkv, cos, sin, *rest)

    def post_rows(h, a, *rest):
        _rows_dynamic(h, a)
        return post(h, a, *rest)

    return pre_rows, post_rows


def _rows_dynamic(*xs) -> None:
    """Mark dim 0 (rows) of these [M, ...] arguments dynamic (weights stay static)."""
    for x in xs:
        torch._dynamo.maybe_mark_dynamic(x, 0)


class PackedModel:
    def __init__(self, w: TorchWeights, kv: KVPlanes, options: KernelOptions | None = None):
        """options: the fast paths (default KernelOptions(): each on where available, i.e. on CUDA)."""
        self.w, self.kv, self.cfg = w, kv, w.cfg
        self.options = options = KernelOptions() if options is None else options
        self.gemv, self.fuse, self.triton_attn, pdl = options.resolve(w.device)
        self.pdl = PDL_MODES[options.pdl_trigger] if pdl else 0  # the kernels' PDL (gemv_blocks.pdl_enter)
        self.cos, self.sin = w.rope_table(kv.max_len)  # [max_len, hd] each
        self.eps = w.cfg.rms_norm_eps
        self.fault = w.precision_fault  # "" or a precision fault: "fp8_k" | "fp8_v" | "fp8_act"
        self.bits_fault = w.bits_fault  # None or (name, layer or None, bits): a coarser-rounding fault
        bits_store = self.bits_fault is not None and self.bits_fault[0] in ("k_bits", "v_bits")
        self.store_fault = self.fault in ("fp8_k", "fp8_v") or bits_store  # _stored has work to do
        self.invariant = options.invariant  # every call and head on kernels/invariant.py's primitives
        self.prims = invariant.prims_for(w.device) if options.invariant else None
        self.tap = None  # the armed row of a capture (kernels/tap.py), set by the engine

    def _stored(self, l: int, index: torch.Tensor) -> None:
        """Layer l's KV rows just written at flat `index`, through a deliberate store fault, if any.
        The GEMV path calls it only with one (self.store_fault): its `index` per layer is two torch
        launches between the path's dependent launches (docs/results/history_2026-12.md, c(M))."""
        kv = self.kv
        if self.fault in ("fp8_k", "fp8_v"):
            fp8_rows(kv.flat_view(kv.k if self.fault == "fp8_k" else kv.v, l), index)
        if self.bits_fault is not None and self.bits_fault[0] in ("k_bits", "v_bits"):
            name, at, bits = self.bits_fault
            if at is None or at == l:
                flat = kv.flat_view(kv.k if name == "k_bits" else kv.v, l)
                flat.index_copy_(0, index, round_bits(flat.index_select(0, index), bits))

    def _attended(self, l: int, a: torch.Tensor) -> torch.Tensor:
        """Layer l's attention output a: [M, nh*hd], through the "attn_out_bits" fault if it is there."""
        if self.bits_fault is not None and self.bits_fault[0] == "attn_out_bits" and self.bits_fault[1] == l:
            return round_bits(a, self.bits_fault[2])
        return a

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.w.embed.index_select(0, tokens)  # [M, H]

    def head(self, h: torch.Tensor) -> torch.Tensor:
        if self.invariant:
            return self.prims.linear(h, self.w.lm_head).float()
        return (h @ self.w.lm_head.T).float()  # logits: [M, V] FP32

    def recurrent_call(
        self,
        h: torch.Tensor,
        pos: torch.Tensor,
        plane: torch.Tensor,
        qidx: torch.Tensor,
        gplane: torch.Tensor,
        Qm: int,
        span: int | None = None,
    ) -> torch.Tensor:
        """One loop of the stack, then the final norm.
        h: [M, H] loop inputs; pos: [M] positions; plane: [M] KV planes (depth*n_slots+slot).
        Attention is grouped by plane: the call's G distinct planes are `gplane` [G], and row
        r is query slot qidx[r] = g*Qm + i of the padded [G, Qm] query grid, so a plane's keys
        are read once however many of the call's rows attend to it. Returns [M, H].
        span: every pos < span, a promise (attention reads keys 0..span-1; a graph captured
        with it must keep it). Default: the KV capacity on CUDA, pos.max() + 1 on the CPU.
        Calls of <= options.gemv_max_rows rows go through _gemv_call when self.gemv is on; every call
        through kernels/invariant.py in the invariant mode. With self.tap armed on one of the rows,
        its intermediates are recorded (kernels/tap.py): every operation on this eager path, the
        final norm only on the fused, Triton-attention and GEMV paths.
        (Over 80 lines: the eager, fused, Triton-attention and GEMV paths of one layer loop, one
        dispatch read top to bottom.)"""
        assert span is None or 1 <= span <= self.kv.max_len, (span, self.kv.max_len)
        if self.invariant:
            return invariant_call(self, self.prims, h, pos, plane)
        row = None if self.tap is None else self.tap.row(plane, pos, self.kv.n_slots)
        if self.gemv and 0 < h.shape[0] <= self.options.gemv_max_rows:
            out = self._gemv_call(h, pos, plane, span)
            if row is not None:
                self.tap.put("final_norm", self.cfg.num_layers, h.shape[0], out[row])
            return out
        cfg, kv, eps = self.cfg, self.kv, self.eps
        pad = self.fuse and h.shape[0] == 1  # torch.compile's M=1 graph is slow (docs/results/history_2026-12.md):
        if pad:  # add a dummy row at position 0 of the scratch plane
            scratch = torch.full_like(plane, kv.scratch)  # (depth 0 of the scratch slot)
            qidx = torch.cat([qidx, torch.full_like(qidx, gplane.shape[0] * Qm)])
            h, pos, plane, gplane = (
                torch.cat([h, torch.zeros_like(h)]),
                torch.cat([pos, torch.zeros_like(pos)]),
                torch.cat([plane, scratch]),
                torch.cat([gplane, scratch]),
            )
        G = gplane.shape[0]
        if span is None:  # no graphs on the CPU: keys up to the call's last position only
            span = int(pos.max()) + 1 if h.device.type == "cpu" else kv.max_len
        nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)  # [M, hd]
        write = plane * kv.max_len + pos  # [M] flat KV index
        if not self.triton_attn:
            qpos = pos.new_zeros(G * Qm).index_copy_(0, qidx, pos).view(G, Qm)  # padding: position 0
            masked = torch.arange(span, device=h.device)[None, None, :] > qpos[:, :, None]  # [G, Qm, span]
        pre, post = _fused(self.options.compile_dynamic) if self.fuse else (pre_attn, post_attn)
        eager = row is not None and not (self.fuse or self.triton_attn)  # every operation recorded
        M = h.shape[0]
        for l, L in enumerate(self.w.layers):
            rec = {"rec": recorder(self.tap, row, l, M)} if eager else {}
            q, k, v = pre(h, L.n_in, L.qkv, cos, sin, nh, nkv, hd, eps, **rec)  # [M, heads, hd]
            kv.flat_view(kv.k, l).index_copy_(0, write, k)  # all writes of the call first
            kv.flat_view(kv.v, l).index_copy_(0, write, v)
            self._stored(l, write)
            if self.triton_attn:  # reads only keys 0..pos per row
                a = triton_attention.decode_attention(
                    q.contiguous(), kv, l, plane, pos, span=span, scale=self.w.attn_scale
                )
            else:
                K = kv.k[l][:, :span].index_select(0, gplane)  # [G, span, nkv, hd]
                V = kv.v[l][:, :span].index_select(0, gplane)
                Q = q.new_zeros(G * Qm, nh, hd).index_copy_(0, qidx, q).view(G, Qm, nh, hd)
                parts = {"parts": {}} if eager else {}  # passed only when armed (band_faults.py patches attend)
                a = attend(Q, K, V, masked, self.w.attn_scale, **parts).index_select(0, qidx)  # [M, nh*hd]
                if eager:
                    self._record_parts(parts["parts"], int(qidx[row]), nh, int(pos[row]) + 1, rec["rec"])
            a = self._attended(l, a)
            h = post(
                h,
                a,
                L.o,
                L.n_attn_out,
                L.n_post,
                L.gate_up,
                L.down,
                L.n_mlp_out,
                eps,
                *((True,) if self.fault == "fp8_act" else ()),
                **rec,
            )
        out = rms_norm(h[:1] if pad else h, self.w.norm, eps)
        if row is not None:
            self.tap.put("final_norm", self.cfg.num_layers, M - pad, out[row])
        return out

    @staticmethod
    def _record_parts(parts: dict, slot: int, nh: int, n: int, rec) -> None:
        """The armed row's scores and probabilities over its n visible keys, from attend's `parts`
        ([G, nkv, Qm*gq, span] each); slot: its query slot g*Qm + i."""
        s, p = parts["scores"], parts["probs"]
        G, nkv, rows, span = s.shape
        gq = nh // nkv
        g, i = divmod(slot, rows // gq)
        heads = slice(i * gq, (i + 1) * gq)
        rec(scores=s[g, :, heads, :n].reshape(nh, n), probs=p[g, :, heads, :n].reshape(nh, n))

    def _gemv_call(self, h: torch.Tensor, pos: torch.Tensor, plane: torch.Tensor, span: int | None) -> torch.Tensor:
        """recurrent_call for M <= gemv.MAX_ROWS rows (no padding) through kernels/gemv.py: per layer one
        kernel each for norms+qkv+RoPE+KV writes, attention, o, norms+gate_up+SiLU, down."""
        cfg, kv, eps = self.cfg, self.kv, self.eps
        y2 = n_prev = None  # the previous layer's MLP output and its norm
        tiles, pdl = self.options.gemv_config, self.pdl  # pdl: each kernel launched as its predecessor's dependent
        for l, L in enumerate(self.w.layers):
            q, r = gemv_kernels.qkv_rope_kv(
                h,
                y2,
                n_prev,
                L.n_in,
                L.qkv,
                self.cos,
                self.sin,
                kv.k[l],
                kv.v[l],
                plane,
                pos,
                cfg.num_heads,
                cfg.num_kv_heads,
                cfg.head_dim,
                eps,
                tiles,
                pdl,
                self.options.program_norm_rows,
            )
            if self.store_fault:
                self._stored(l, plane * kv.max_len + pos)
            a = triton_attention.decode_attention(
                q, kv, l, plane, pos, pdl, span, self.w.attn_scale, q.shape[0] <= self.options.attn_early_rows
            )  # [M, nh*hd]
            a = self._attended(l, a)
            y = gemv_kernels.gemv(a, L.o, "o", tiles, pdl)  # [M, H]
            h, act = gemv_kernels.gate_up_silu(
                r, y, L.n_attn_out, L.n_post, L.gate_up, eps, tiles, pdl, self.options.program_norm_rows
            )  # [M, H], [M, I]
            act = fp8(act) if self.fault == "fp8_act" else act
            y2, n_prev = gemv_kernels.gemv(act, L.down, "down", tiles, pdl), L.n_mlp_out  # [M, H]
        return gemv_kernels.residual_norm(h, y2, n_prev, self.w.norm, eps, pdl)


def attend(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    masked: torch.Tensor,
    scale: float | None = None,
    parts: dict | None = None,
) -> torch.Tensor:
    """Q: [G, Qm, nh, hd]; K, V: [G, span, nkv, hd]; masked: [G, Qm, span] (True = not
    visible) -> [G*Qm, nh*hd]. Scores and softmax in FP32; scale: default hd ** -0.5.
    parts: a dict to receive "scores" (FP32) and "probs" (V.dtype), [G, nkv, Qm*gq, span] each."""
    G, Qm, nh, hd = Q.shape
    span, nkv = K.shape[1], K.shape[2]
    gq = nh // nkv  # query heads per KV head
    q = Q.reshape(G, Qm, nkv, gq, hd).permute(0, 2, 1, 3, 4).reshape(G, nkv, Qm * gq, hd)
    s = torch.matmul(q, K.permute(0, 2, 3, 1)).float() * (hd**-0.5 if scale is None else scale)  # [G, nkv, Qm*gq, span]
    m = masked[:, :, None, :].expand(G, Qm, gq, span).reshape(G, 1, Qm * gq, span)
    p = torch.softmax(s.masked_fill(m, float("-inf")), dim=-1).to(V.dtype)
    if parts is not None:
        parts |= {"scores": s, "probs": p}
    out = torch.matmul(p, V.permute(0, 2, 1, 3))  # [G, nkv, Qm*gq, hd]
    return out.reshape(G, nkv, Qm, gq, hd).permute(0, 2, 1, 3, 4).reshape(G * Qm, nh * hd)


def invariant_call(model, prims, h: torch.Tensor, pos: torch.Tensor, plane: torch.Tensor) -> torch.Tensor:
    """The invariant mode's recurrent call: one loop of the stack and the final norm on `prims`
    (kernels/invariant.py CPU_PRIMS, or CUDA's), PackedModel.recurrent_call's math with its store and
    attention-output faults. h: [M, H]; pos, plane: [M] -> [M, H]. K/V of every row are written before
    any row attends. With model.tap armed on a row of this call, that row's intermediates are recorded
    (oracle/capture.py); the invariance faults are kernels/invariant_faults.py."""
    w, kv, eps, cfg = model.w, model.kv, model.eps, model.cfg
    M, (nh, nkv, hd) = h.shape[0], (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
    ops = invariant_faults.ops(prims, model.options.fault, M)  # o_proj, attention, post_norm
    cos, sin = model.cos.index_select(0, pos), model.sin.index_select(0, pos)  # [M, hd]
    write = plane * kv.max_len + pos  # [M] flat KV index
    row = None if model.tap is None else model.tap.row(plane, pos, kv.n_slots)
    for l, L in enumerate(w.layers):
        rec = recorder(model.tap, row, l, M)
        n = prims.rms_norm(h, L.n_in, eps)
        q, k, v = prims.linear(n, L.qkv).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q, k, v = rope(q.reshape(M, nh, hd), cos, sin), rope(k.reshape(M, nkv, hd), cos, sin), v.reshape(M, nkv, hd)
        kv.flat_view(kv.k, l).index_copy_(0, write, k)  # all writes of the call first
        kv.flat_view(kv.v, l).index_copy_(0, write, v)
        model._stored(l, write)
        a = model._attended(l, ops.attention(q, kv.k[l], kv.v[l], plane, pos, w.attn_scale))  # [M, nh*hd]
        y = ops.o_proj(a, L.o)
        ao = prims.rms_norm(y, L.n_attn_out, eps)
        x = h + ao
        pn = ops.post_norm(x, L.n_post, eps)
        g, u = prims.linear(pn, L.gate_up).chunk(2, dim=-1)
        act = prims.silu_mul(g, u)
        act = fp8(act) if model.fault == "fp8_act" else act
        d = prims.linear(act, L.down)
        mo = prims.rms_norm(d, L.n_mlp_out, eps)
        h = x + mo
        if rec is not None:
            rec(norm_in=n, q=q, k=k, v=v)
            parts = getattr(prims, "attention_parts", None) if ops.probs else None
            if parts is not None:  # computed again for the row alone: the same bits, the prims being invariant
                one = slice(row, row + 1)
                sc, pr = parts(q[one], kv.k[l], kv.v[l], plane[one], pos[one], w.attn_scale)
                rec(scores=sc, probs=pr)
            rec(attn=a, o_proj=y, attn_out_norm=ao, residual_attn=x, post_norm=pn, gate=g, up=u, act=act, down=d)
            rec(mlp_out_norm=mo, residual_mlp=h)
    out = prims.rms_norm(h, w.norm, eps)
    if row is not None:
        model.tap.put("final_norm", cfg.num_layers, M, out[row])
    return out


def recorder(tap, row, layer: int, M: int):
    """rec(op=tensor, ...): records row `row` of each [M, ...] tensor (a [nh, n] part as it is); None if unarmed."""
    if row is None:
        return None

    def rec(**ops):
        for op, t in ops.items():
            tap.put(op, layer, M, t if op in ("scores", "probs") else t[row].reshape(-1))

    return rec
