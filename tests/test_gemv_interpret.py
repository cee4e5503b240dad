"""kernels/gemv.py under the Triton interpreter (CPU) against the torch pieces of
kernels/model.py: each kernel, then whole recurrent calls (FP32 and BF16).
Small shapes whose tiles do not divide N or K evenly."""

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest

# Triton picks interpreted or compiled kernels when it is imported and when a kernel is
# decorated: the variable must be set before the first `import triton` of the process
FRESH = "triton" not in sys.modules
if FRESH:
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

import torch
import torch.nn.functional as F
from triton.runtime.interpreter import InterpretedFunction

from kernels import gemv as G, model as km
from kernels.kvplanes import KVPlanes
from kernels.options import KernelOptions
from kernels.weights import TorchWeights
from oracle.config import ModelConfig
from tests import interpreter_speed

if FRESH:
    del os.environ["TRITON_INTERPRET"]  # kernels are decorated; set again per test (lazy imports)
INTERPRETED = isinstance(G._gemv_kernel, InterpretedFunction)
interpreter_speed.install()  # the same values, half the interpreter's CPU time

CFG = ModelConfig(
    vocab_size=32, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=16
)
EPS = CFG.rms_norm_eps
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
# (BLOCK_N, BLOCK_K, warps): partial last tiles in N (qkv: 96 column pairs, gate_up: 96,
# o at N=50) and in K (down: K=96)
TILES = {
    "qkv": (64, 32, 4),
    "o": (32, 32, 4),
    "down": (32, 64, 4),
    "gate_up": (64, 32, 4),
    # the small-M path (2..16 rows, tensor-core products): 16 in every dimension at least
    "qkv/16": (16, 32, 4),
    "o/16": (16, 32, 4),
    "down/16": (32, 64, 4),
    "gate_up/16": (32, 32, 4),
}
# split-K (BLOCK_N, BLOCK_K, warps, stages, peel, split) of every product (qkv, o and gate_up at
# K=64, down at K=96) in the recurrent calls, with and without the peel, one and more tiles per
# split (one-row qkv asks for 3 of its 4 K tiles: 2 parts); qkv's and gate_up's epilogues run in
# each column block's last program to arrive (gemv_blocks._arrive)
SPLIT = TILES | {
    "o": (32, 16, 4, 3, 1, 2),
    "down": (32, 32, 4, 3, 0, 3),
    "o/16": (16, 16, 4, 3, 1, 4),
    "down/16": (32, 16, 4, 3, 1, 2),
    "qkv": (64, 16, 4, 3, 0, 3),
    "gate_up": (64, 32, 4, 3, 1, 2),
    "qkv/16": (16, 16, 4, 3, 1, 4),
    "gate_up/16": (32, 16, 4, 3, 0, 2),
}


def rows(M: int, n_pos: int, n_planes: int, pos0=(5, 0, 11, 7), plane0=(1, 4, 1, 7)):
    """M distinct (plane, position) pairs: the first four fixed, then generated."""
    pairs = list(zip(plane0, pos0))[:M]
    free = ((pl, (3 * pl + j) % n_pos) for j in range(2, n_pos) for pl in range(n_planes))
    pairs += [p for p in free if p not in pairs][: M - len(pairs)]
    assert len(set(pairs)) == M
    return torch.tensor([p for _, p in pairs]), torch.tensor([pl for pl, _ in pairs])


@pytest.fixture(autouse=True)
def interpreted(request, monkeypatch):
    """The interpreter for every test (each passes the small TILES); where triton was
    imported (compiled) before this module,
    the tests run in a fresh interpreter instead (test_in_fresh_process)."""
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
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def rand(*shape, dtype, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def weights(dtype, seed=0):
    w = TorchWeights.random(CFG, "cpu", dtype, seed)
    for i, L in enumerate(w.layers):  # non-trivial norm weights
        for j, name in enumerate(("n_in", "n_attn_out", "n_post", "n_mlp_out")):
            setattr(L, name, 1 + rand(CFG.hidden_size, dtype=dtype, seed=100 + 4 * i + j, scale=0.3))
    w.norm = 1 + rand(CFG.hidden_size, dtype=dtype, seed=99, scale=0.3)
    return w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 3, 4, 16])
@pytest.mark.parametrize("name,N,K", [("o", 64, 64), ("down", 64, 96), ("o", 50, 80)])
def test_gemv(dtype, M, name, N, K):
    x, w = rand(M, K, dtype=dtype, seed=1), rand(N, K, dtype=dtype, seed=2, scale=K**-0.5)
    assert rel(G.gemv(x, w, name, TILES), x @ w.T) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 4, 16])
@pytest.mark.parametrize(
    "name,N,K,BK,S", [("o", 64, 64, 16, 2), ("down", 64, 96, 32, 3), ("o", 50, 80, 32, 3), ("o", 50, 80, 16, 5)]
)
def test_gemv_split_k(dtype, M, name, N, K, BK, S):
    """Split-K: FP32 partial sums over disjoint K ranges (o at K=80, BLOCK_K 32: a partial last tile)."""
    x, w = rand(M, K, dtype=dtype, seed=1), rand(N, K, dtype=dtype, seed=2, scale=K**-0.5)
    key = name if M == 1 else name + "/16"
    parts = G.gemv(x, w, name, {key: (32 if M == 1 else 16, BK, 4, 3, M % 2, S)})
    assert parts.shape == (M, S, N) and parts.dtype == torch.float32
    want = x.float() @ w.float().T
    assert rel(parts.sum(1), want) < 1e-5
    ks = -(-K // BK) // S * BK  # K columns per split
    for s in range(S):
        assert rel(parts[:, s], x[:, s * ks : (s + 1) * ks].float() @ w[:, s * ks : (s + 1) * ks].float().T) < 1e-5


def test_split_k_takes_the_largest_divisor_of_the_k_tiles():
    x, w = torch.ones(4, 96), torch.ones(8, 96)  # 3 K tiles of 32
    for asked, taken in ((2, 1), (3, 3), (5, 3)):
        parts = G.gemv(x, w, "o", {"o/16": (16, 32, 4, 3, 1, asked)})
        assert parts.shape == ((4, 8) if taken == 1 else (4, taken, 8))
        assert torch.equal(parts if taken == 1 else parts.sum(1), x @ w.T)
    # the seventh entry, an L2 prefetch (a hint; skipped by the interpreter): the same products
    assert torch.equal(G.gemv(x, w, "o", {"o/16": (16, 32, 4, 3, 1, 3, 64)}).sum(1), x @ w.T)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 2, 4, 11, 16])
@pytest.mark.parametrize("first", [True, False])
def test_qkv_rope_kv(dtype, M, first):
    w = weights(dtype)
    L, Lp = w.layers[1], w.layers[0]
    nh, nkv, hd, H = CFG.num_heads, CFG.num_kv_heads, CFG.head_dim, CFG.hidden_size
    kv = KVPlanes(CFG, 2, 3, 12, "cpu", dtype)
    cos, sin = w.rope_table(kv.max_len)
    h, y = rand(M, H, dtype=dtype, seed=3), rand(M, H, dtype=dtype, seed=4)
    pos, plane = rows(M, kv.max_len, kv.k.shape[1])
    q, r = G.qkv_rope_kv(
        h,
        None if first else y,
        None if first else Lp.n_mlp_out,
        L.n_in,
        L.qkv,
        cos,
        sin,
        kv.k[1],
        kv.v[1],
        plane,
        pos,
        nh,
        nkv,
        hd,
        EPS,
        TILES,
    )
    r_ref = h if first else h + km.rms_norm(y, Lp.n_mlp_out, EPS)
    q_ref, k_ref, v_ref = km.pre_attn(r_ref, L.n_in, L.qkv, cos[pos], sin[pos], nh, nkv, hd, EPS)
    assert rel(r, r_ref) < TOL[dtype] / 10
    assert rel(q, q_ref) < TOL[dtype]
    flat = plane * kv.max_len + pos
    assert rel(kv.flat_view(kv.k, 1)[flat], k_ref) < TOL[dtype]
    assert rel(kv.flat_view(kv.v, 1)[flat], v_ref) < TOL[dtype]
    written = torch.zeros(kv.k.shape[:3], dtype=torch.bool)
    written[1].view(-1)[flat] = True
    assert not kv.k[~written].any() and not kv.v[~written].any()  # nothing else written


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 2, 4, 16])
def test_gate_up_silu(dtype, M):
    L = weights(dtype).layers[0]
    r, y = rand(M, CFG.hidden_size, dtype=dtype, seed=5), rand(M, CFG.hidden_size, dtype=dtype, seed=6)
    r2, act = G.gate_up_silu(r, y, L.n_attn_out, L.n_post, L.gate_up, EPS, TILES)
    r2_ref = r + km.rms_norm(y, L.n_attn_out, EPS)
    g, u = (km.rms_norm(r2_ref, L.n_post, EPS) @ L.gate_up.T).chunk(2, dim=-1)
    assert rel(r2, r2_ref) < TOL[dtype] / 10
    assert rel(act, F.silu(g) * u) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 4, 16])
def test_residual_norm(dtype, M):
    w = weights(dtype)
    h, y = rand(M, CFG.hidden_size, dtype=dtype, seed=7), rand(M, CFG.hidden_size, dtype=dtype, seed=8)
    ref = km.rms_norm(h + km.rms_norm(y, w.layers[0].n_mlp_out, EPS), w.norm, EPS)
    assert rel(G.residual_norm(h, y, w.layers[0].n_mlp_out, w.norm, EPS), ref) < TOL[dtype]


@pytest.mark.parametrize("M", [1, 3, 16])
def test_split_k_partials_read_as_their_rounded_sum(M):
    """Every kernel that takes y takes it as split-K partials [M, S, H] too: the same results as
    y = (the partials' sum, rounded to BF16), bit for bit."""
    w, H, dt = weights(torch.bfloat16), CFG.hidden_size, torch.bfloat16
    L, Lp = w.layers[1], w.layers[0]
    h = rand(M, H, dtype=dt, seed=11)
    parts = rand(M, 3, H, dtype=torch.float32, seed=12)
    y = (parts[:, 0] + parts[:, 1] + parts[:, 2]).to(dt)  # FP32 sums in the partials' order, then BF16
    a, b = (G.residual_norm(h, yy, Lp.n_mlp_out, w.norm, EPS) for yy in (parts, y))
    assert torch.equal(a, b)
    r2s = [G.gate_up_silu(h, yy, L.n_attn_out, L.n_post, L.gate_up, EPS, TILES) for yy in (parts, y)]
    assert all(torch.equal(a, b) for a, b in zip(*r2s))
    outs = []
    for yy in (parts, y):
        kv = KVPlanes(CFG, 2, 3, 12, "cpu", dt)
        cos, sin = w.rope_table(kv.max_len)
        pos, plane = rows(M, kv.max_len, kv.k.shape[1])
        q, r = G.qkv_rope_kv(
            h, yy, Lp.n_mlp_out, L.n_in, L.qkv, cos, sin, kv.k[1], kv.v[1], plane, pos, 4, 4, 16, EPS, TILES
        )
        outs.append((q, r, kv.k.clone(), kv.v.clone()))
    assert all(torch.equal(a, b) for a, b in zip(*outs))


def torch_decode_attention(q, kv, layer, plane, pos, pdl=False, span=None, scale=None, early_kv=False):
    """kernels.triton_attention.decode_attention through kernels.model.attend (its loop
    bound `range(0, pos + 1, ...)` does not run in the interpreter under numpy 2); early_kv changes
    only when keys are loaded (tests/test_triton_attention_interpret.py)."""
    span = kv.max_len if span is None else span
    K, V = (
        kv.k[layer][:, :span].index_select(0, plane),
        kv.v[layer][:, :span].index_select(0, plane),
    )  # [M, span, nkv, hd]
    masked = torch.arange(span)[None, None, :] > pos[:, None, None]  # [M, 1, span]
    return km.attend(q[:, None], K, V, masked, scale)  # [M, nh*hd]


# M: the M = 1 kernels, an odd count and the largest of the small-M path (2..16); the kernels alone
# are checked at 4 rows too, qkv and gate_up at 2 (the tests above)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 3, 16])
@pytest.mark.parametrize("tiles", ["small", "default", "split"])
def test_recurrent_call(dtype, M, tiles, monkeypatch):
    """The gemv path's whole call (both layers, attention over earlier keys) against the
    unfused torch path; K/V written by both must agree too."""
    monkeypatch.setattr(km.triton_attention, "decode_attention", torch_decode_attention)
    w = weights(dtype)
    outs, kvs = [], []
    for gemv in (True, False):
        kv = KVPlanes(CFG, 2, 9, 16, "cpu", dtype)  # 20 planes
        g = torch.Generator().manual_seed(9)  # same earlier keys for both paths
        kv.k.copy_(torch.randn(kv.k.shape, generator=g))
        kv.v.copy_(torch.randn(kv.v.shape, generator=g))
        m = km.PackedModel(
            w,
            kv,
            KernelOptions(
                fuse=False,
                triton_attn=False,
                gemv=gemv,
                gemv_max_rows=16,
                gemv_config={"small": TILES, "default": {}, "split": SPLIT}[tiles],
            ),
        )
        h = rand(M, CFG.hidden_size, dtype=dtype, seed=10)
        plane = torch.tensor([2, 5, 0, 7, *range(8, 20)][:M])  # distinct planes: Qm = 1
        pos = torch.tensor([9, 3, 15, 0, *(3 * i % 16 for i in range(8, 20))][:M])
        # recurrent_call dispatches M <= gemv_max_rows to the gemv path when gemv is on
        outs.append(m.recurrent_call(h, pos, plane, torch.arange(M), plane, 1))
        if gemv:  # attention over keys 0..span-1 only, span just past the last position
            short = m.recurrent_call(h, pos, plane, torch.arange(M), plane, 1, span=int(pos.max()) + 1)
            assert rel(short, outs[0]) < TOL[dtype] / 10
        kvs.append((kv.k.clone(), kv.v.clone()))
    assert outs[0].shape == (M, CFG.hidden_size) and outs[0].dtype == dtype
    assert rel(outs[0], outs[1]) < TOL[dtype]
    if tiles == "split":  # qkv's and gate_up's arrival counters were used, and left at zero
        assert G._COUNTS and not any(bool(b.any()) for b in G._COUNTS.values())
    for a, b in zip(kvs[0], kvs[1]):
        assert rel(a, b) < TOL[dtype] / 10


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 4])
def test_calls_norm_in_every_program_or_in_one_kernel(dtype, M, monkeypatch):
    """KernelOptions.program_norm_rows: a call of up to that many rows norms qkv's and gate_up's
    input in every program, a larger one in one _prenorm_kernel launch each; the same call either
    way, within the rounding of the norms' FP32 sums, and the same KV writes."""
    monkeypatch.setattr(km.triton_attention, "decode_attention", torch_decode_attention)
    w = weights(dtype)
    outs, kvs = [], []
    for norm_rows in (0, 16):
        kv = KVPlanes(CFG, 2, 9, 16, "cpu", dtype)
        g = torch.Generator().manual_seed(9)
        kv.k.copy_(torch.randn(kv.k.shape, generator=g))
        kv.v.copy_(torch.randn(kv.v.shape, generator=g))
        opts = KernelOptions(fuse=False, triton_attn=False, gemv=True, gemv_config=TILES, program_norm_rows=norm_rows)
        m = km.PackedModel(w, kv, opts)
        h = rand(M, CFG.hidden_size, dtype=dtype, seed=10)
        plane, pos = torch.tensor([5, 2, 0, 7][:M]), torch.tensor([9, 3, 15, 0][:M])
        outs.append(m.recurrent_call(h, pos, plane, torch.arange(M), plane, 1))
        kvs.append((kv.k.clone(), kv.v.clone()))
    assert rel(outs[0], outs[1]) < TOL[dtype] / 10
    for a, b in zip(kvs[0], kvs[1]):
        assert rel(a, b) < TOL[dtype] / 10


def test_rows_limit():
    x = torch.zeros(G.MAX_ROWS + 1, 8)
    with pytest.raises(AssertionError):
        G.gemv(x, torch.zeros(4, 8))
