"""kernels/invariant_triton.py under the Triton interpreter (CPU): each primitive gives a row the
same bits at M = 1, 2, 5, 16 and 80 (the row at another place in each call, the other rows
random) and agrees with torch in FP32; a whole recurrent call built from the four gives a row
the same bits alone and among 80 rows at mixed depths; and M-dependent variants of the kernels
(BLOCK_K, the attention split, the norm's block chosen from M) fail the same check."""

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest

# Triton (3.7) interprets a kernel where TRITON_INTERPRET=1 when it is decorated: here, where neither
# kernels/invariant_triton.py nor the helpers it shares (kernels/gemv_blocks.py) were imported yet
# (or those were imported interpreted, as tests/test_gemv_interpret.py does), else in a fresh process
_blocks = sys.modules.get("kernels.gemv_blocks")
FRESH = "kernels.invariant_triton" not in sys.modules and (
    _blocks is None or bool(getattr(getattr(_blocks, "_INTERPRETED", None), "value", False))
)
_was = os.environ.get("TRITON_INTERPRET")
if FRESH:
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

import torch
import torch.nn.functional as F
from triton.runtime.interpreter import InterpretedFunction

from kernels import invariant_triton as it, model as km
from kernels.kvplanes import KVPlanes
from kernels.weights import TorchWeights
from oracle.config import preset
from tests import interpreter_speed

if FRESH and _was is None:
    del os.environ["TRITON_INTERPRET"]  # kernels are decorated; the fixture sets it per test
INTERPRETED = isinstance(it._linear_kernel, InterpretedFunction)
interpreter_speed.install()

TINY = preset("tiny")  # hidden 32, intermediate 64, vocab 64, 4 heads of 8
EPS = TINY.rms_norm_eps
MS = (1, 2, 5, 16, 80)
BF16, FP32 = torch.bfloat16, torch.float32
# against float64 torch: FP32 sums; BF16 outputs within about one rounding of the model dtype
TOL = {FP32: dict(rtol=2e-5, atol=2e-5), BF16: dict(rtol=2**-7, atol=2e-3)}


@pytest.fixture(autouse=True)
def interpreted(request, monkeypatch):
    if request.node.name == "test_in_fresh_process":
        yield
        return
    if not INTERPRETED:
        pytest.skip("triton was imported without TRITON_INTERPRET=1; see test_in_fresh_process")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    yield


def test_in_fresh_process():
    if INTERPRETED:
        pytest.skip("already interpreted here")
    env = dict(os.environ, TRITON_INTERPRET="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({BF16: torch.int16, FP32: torch.int32}[t.dtype])


def same_bits(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """a and b equal bit for bit, else an AssertionError naming `what` and the first differing element."""
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
    diff = (bits(a) != bits(b)).nonzero()
    if len(diff):
        i = tuple(diff[0].tolist())
        raise AssertionError(f"{what}: {len(diff)} of {a.numel()} values differ, first at {i}: {a[i]} vs {b[i]}")


def rand(*shape, dtype=FP32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def assert_rows_invariant(fn, probe: list, draw, Ms=MS) -> torch.Tensor:
    """fn(*rows) -> [M, ...] for per-row inputs rows (each [M, ...]). The probe row (inputs [1, ...])
    is placed at (5 M) // 8 among draw(M) (random rows): its output must have the bits it has
    alone (M = 1). Returns that output, [1, ...]."""
    alone = fn(*probe)
    for M in Ms:
        rows, place = draw(M), 5 * M // 8
        for r, p in zip(rows, probe):
            r[place] = p[0]
        same_bits(fn(*rows)[place : place + 1], alone, f"the row at place {place} of M = {M} against M = 1")
    return alone


def rows_of(*specs, seed: int):
    """draw(M): random [M, *shape] tensors, one per (shape, dtype) spec, seeded by M."""
    return lambda M: [rand(M, *shape, dtype=dt, seed=seed + 7 * M + i) for i, (shape, dt) in enumerate(specs)]


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("N,K", [(96, 32), (32, 64), (64, 32), (50, 300), (40, 1100)])
def test_linear(dtype, N, K):
    """tiny's qkv, down and head, and larger K (partial last tiles in N and K)."""
    w = rand(N, K, dtype=dtype, seed=1, scale=K**-0.5)
    x = rand(1, K, dtype=dtype, seed=2)
    out = assert_rows_invariant(lambda x: it.linear(x, w), [x], rows_of(((K,), dtype), seed=3))
    torch.testing.assert_close(out.double(), x.double() @ w.double().T, **TOL[dtype])


def torch_rms_norm(x, w, eps):
    xd = x.double()
    return xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("H", [32, 1500])
def test_rms_norm(dtype, H):
    w = 1 + rand(H, dtype=dtype, seed=4, scale=0.3)
    x = rand(1, H, dtype=dtype, seed=5, scale=3.0)
    out = assert_rows_invariant(lambda x: it.rms_norm(x, w, EPS), [x], rows_of(((H,), dtype), seed=6))
    torch.testing.assert_close(out.double(), torch_rms_norm(x, w, EPS), **TOL[dtype])
    torch.testing.assert_close(out, km.rms_norm(x, w, EPS), rtol=0, atol=0 if dtype == BF16 else 1e-6)


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("I", [64, 3000])
def test_silu_mul(dtype, I):
    g, u = rand(1, I, dtype=dtype, seed=7, scale=3.0), rand(1, I, dtype=dtype, seed=8)
    out = assert_rows_invariant(it.silu_mul, [g, u], rows_of(((I,), dtype), ((I,), dtype), seed=9))
    torch.testing.assert_close(out.double(), F.silu(g.double()) * u.double(), **TOL[dtype])


P, S = 6, 80  # KV planes of the attention tests; S keys each: chunks of 32 at 0, 32 and 64 (partial)


def torch_attention(q, k, v, plane, pos, scale):
    """float64 softmax attention, row by row: keys 0..pos[r] of plane plane[r]; GQA by repeat."""
    M, nh, hd = q.shape
    group = nh // k.shape[2]
    out = []
    plane, pos = plane.tolist(), pos.tolist()
    for r in range(M):
        kk = k[plane[r], : pos[r] + 1].double().repeat_interleave(group, 1)  # [t, nh, hd]
        vv = v[plane[r], : pos[r] + 1].double().repeat_interleave(group, 1)
        s = torch.einsum("hd,thd->ht", q[r].double(), kk) * scale
        out.append(torch.einsum("ht,thd->hd", s.softmax(-1), vv).reshape(nh * hd))
    return torch.stack(out)


def attention_case(dtype, nkv, seed):
    """q, k, v, the probe row's (q, plane, pos) and draw(M) of other rows at random planes and positions."""
    nh, hd = TINY.num_heads, TINY.head_dim
    k, v = rand(P, S, nkv, hd, dtype=dtype, seed=seed), rand(P, S, nkv, hd, dtype=dtype, seed=seed + 1)
    probe = [rand(1, nh, hd, dtype=dtype, seed=seed + 2), torch.tensor([3]), torch.tensor([70])]

    def draw(M):
        g = torch.Generator().manual_seed(seed + M)
        q = rand(M, nh, hd, dtype=dtype, seed=seed + 3 + M)
        return [q, torch.randint(0, P, (M,), generator=g), torch.randint(0, S, (M,), generator=g)]

    return k, v, probe, draw


@pytest.mark.parametrize("dtype,nkv", [(BF16, 4), (FP32, 2)])
def test_attention(dtype, nkv):
    """tiny's heads (4 of 8; 2 KV heads: GQA), the probe at position 70 of plane 3 (three
    chunks, the last partial), the others at random planes and positions."""
    k, v, probe, draw = attention_case(dtype, nkv, seed=10)
    scale = TINY.head_dim**-0.5
    out = assert_rows_invariant(lambda q, pl, ps: it.attention(q, k, v, pl, ps, scale), probe, draw)
    q, pl, ps = probe
    torch.testing.assert_close(out.double(), torch_attention(q, k, v, pl, ps, scale), **TOL[dtype])
    # rows at the edges of chunks, each against torch
    pos = torch.tensor([0, 1, 31, 32, 33, 63, 64, S - 1])
    plane, q = torch.arange(len(pos)) % P, rand(len(pos), TINY.num_heads, TINY.head_dim, dtype=dtype, seed=11)
    got = it.attention(q, k, v, plane, pos, scale)
    torch.testing.assert_close(got.double(), torch_attention(q, k, v, plane, pos, scale), **TOL[dtype])


# M-dependent variants: each must fail assert_rows_invariant, so that check can fail
def linear_bk_by_m(x, w):
    bm, bn, bk, warps, stages = it.TILE
    return it._linear(x, w, (bm, bn, bk // 4 if x.shape[0] >= 16 else bk, warps, stages))


def test_an_m_dependent_block_k_is_caught():
    w, x = rand(64, 512, seed=1, scale=512**-0.5), rand(1, 512, seed=2)
    with pytest.raises(AssertionError, match=r"of M = 16 against M = 1: \d+ of 64 values differ"):
        assert_rows_invariant(lambda x: linear_bk_by_m(x, w), [x], rows_of(((512,), FP32), seed=3))
    assert_rows_invariant(lambda x: it.linear(x, w), [x], rows_of(((512,), FP32), seed=3))  # the same rows


def test_an_m_dependent_attention_split_is_caught():
    k, v, probe, draw = attention_case(FP32, 4, seed=20)
    fn = lambda q, pl, ps: it._attention(q, k, v, pl, ps, 0.35, 16 if q.shape[0] >= 5 else it.CHUNK)
    with pytest.raises(AssertionError, match=r"of M = 5 against M = 1"):
        assert_rows_invariant(fn, probe, draw, Ms=(2, 5))


def test_an_m_dependent_norm_block_is_caught():
    w, x = 1 + rand(1500, seed=4, scale=0.3), rand(1, 1500, seed=5, scale=3.0)
    fn = lambda x: it._rms_norm(x, w, EPS, 64 if x.shape[0] >= 16 else it.RMS_BLOCK)
    with pytest.raises(AssertionError, match=r"of M = 16 against M = 1"):
        assert_rows_invariant(fn, [x], rows_of(((1500,), FP32), seed=6), Ms=(2, 16))


class TorchPrims:
    """The four primitives in plain torch (FP32 products, float32 softmax), for the composition below."""

    linear = staticmethod(lambda x, w: (x.float() @ w.float().T).to(x.dtype))
    rms_norm = staticmethod(km.rms_norm)
    silu_mul = staticmethod(lambda g, u: F.silu(g) * u)

    @staticmethod
    def attention(q, k, v, plane, pos, scale):
        return torch_attention(q, k, v, plane, pos, scale).to(q.dtype)


def recurrent_call(prims, w, kv, h, pos, plane):
    """One loop of the stack and the final norm (kernels/model.py's math) from four primitives;
    RoPE, residual adds and KV writes are elementwise torch. h [M, H] -> [M, H]."""
    cfg, M = w.cfg, h.shape[0]
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    cos, sin = (t.index_select(0, pos) for t in w.rope_table(kv.max_len))  # [M, hd]
    write = plane * kv.max_len + pos
    for l, L in enumerate(w.layers):
        q, k, v = prims.linear(prims.rms_norm(h, L.n_in, EPS), L.qkv).split([nh * hd, nkv * hd, nkv * hd], -1)
        q, k = km.rope(q.reshape(M, nh, hd), cos, sin), km.rope(k.reshape(M, nkv, hd), cos, sin)
        kv.flat_view(kv.k, l).index_copy_(0, write, k)  # every write of the call before attention
        kv.flat_view(kv.v, l).index_copy_(0, write, v.reshape(M, nkv, hd))
        a = prims.attention(q, kv.k[l], kv.v[l], plane, pos, w.attn_scale)
        h = h + prims.rms_norm(prims.linear(a, L.o), L.n_attn_out, EPS)
        g, u = prims.linear(prims.rms_norm(h, L.n_post, EPS), L.gate_up).chunk(2, -1)
        h = h + prims.rms_norm(prims.linear(prims.silu_mul(g, u), L.down), L.n_mlp_out, EPS)
    return prims.rms_norm(h, w.norm, EPS)


def test_a_recurrent_call_gives_a_row_the_same_bits_alone_and_among_80():
    check_recurrent_call("cpu")


def check_recurrent_call(device) -> None:
    """tiny in BF16, 3 depths x 13 slots of 48 positions (earlier keys random): the probe row
    (depth 1, slot 2, position 37: two chunks of keys) alone, then at place 37 of 80 rows at
    mixed depths and positions (none writes a key the probe reads). Its output and its KV
    writes keep their bits; the output agrees with the same composition in plain torch."""
    w = TorchWeights.random(TINY, device, BF16, seed=0)
    for i, L in enumerate(w.layers):
        for j, name in enumerate(("n_in", "n_attn_out", "n_post", "n_mlp_out")):
            setattr(L, name, 1 + rand(TINY.hidden_size, dtype=BF16, seed=30 + 4 * i + j, scale=0.3).to(device))
    kv0 = KVPlanes(TINY, 3, 12, 48, device, BF16)
    kv0.k.copy_(rand(*kv0.k.shape, seed=40)), kv0.v.copy_(rand(*kv0.v.shape, seed=41))
    probe_plane, probe_pos = kv0.plane(2, 1), 37
    g = torch.Generator().manual_seed(42)
    pairs = {(probe_plane, probe_pos)}
    while len(pairs) < 80:  # other rows: never below the probe's position on its plane
        pl, ps = int(torch.randint(0, kv0.k.shape[1], (), generator=g)), int(torch.randint(0, 48, (), generator=g))
        if pl != probe_plane or ps > probe_pos:
            pairs.add((pl, ps))
    others = sorted(pairs - {(probe_plane, probe_pos)})
    pairs = others[:37] + [(probe_plane, probe_pos)] + others[37:]
    plane = torch.tensor([p for p, _ in pairs], device=device)
    pos = torch.tensor([t for _, t in pairs], device=device)
    h = rand(80, TINY.hidden_size, dtype=BF16, seed=43).to(device)
    runs = []
    for rows in (slice(37, 38), slice(0, 80)):
        kv = copy(kv0)
        out = recurrent_call(it.PRIMS, w, kv, h[rows], pos[rows], plane[rows])
        runs.append((out[37 - rows.start], kv.k[:, probe_plane, probe_pos], kv.v[:, probe_plane, probe_pos]))
    for what, a, b in zip(("output", "K writes", "V writes"), *runs):
        same_bits(b.cpu(), a.cpu(), f"the probe's {what} among 80 rows against alone")
    ref = recurrent_call(TorchPrims, w, copy(kv0), h[37:38], pos[37:38], plane[37:38])
    torch.testing.assert_close(runs[0][0][None].float(), ref.float(), rtol=0.05, atol=0.05)


def copy(kv: KVPlanes) -> KVPlanes:
    new = KVPlanes(TINY, kv.D, kv.n_slots - 1, kv.max_len, kv.k.device, kv.k.dtype)
    new.k.copy_(kv.k), new.v.copy_(kv.v)
    return new


def test_without_triton_a_primitive_names_the_missing_package(monkeypatch):
    from oracle.errors import OracleError

    monkeypatch.setattr(it, "triton", None)
    with pytest.raises(OracleError, match="need triton"):
        it.PRIMS.linear(torch.zeros(1, 4), torch.zeros(2, 4))


def test_the_primitives_have_the_signatures_of_the_invariant_call():
    """kernels/invariant.py calls PRIMS.linear(x, w), .rms_norm(x, w, eps), .silu_mul(g, u) and
    .attention(q, k, v, plane, pos, scale) on CUDA."""
    import inspect

    want = {
        "linear": ["x", "w"],
        "rms_norm": ["x", "w", "eps"],
        "silu_mul": ["g", "u"],
        "attention": ["q", "k", "v", "plane", "pos", "scale"],
    }
    assert {name: list(inspect.signature(getattr(it.PRIMS, name)).parameters) for name in want} == want
