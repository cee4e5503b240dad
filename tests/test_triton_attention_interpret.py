"""The Triton decode attention (kernels/triton_attention.py) under the Triton interpreter on
CPU, against kernels.model.attend. Skipped where triton is not installed (CI); on CUDA the
same kernels are checked end to end by gpu_tests. The interpreter must be on before triton
is first imported, so the check runs in a fresh process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]


def check(max_len: int) -> None:
    import torch

    from tests import interpreter_speed

    interpreter_speed.install()

    from kernels import triton_attention as ta
    from kernels.kvplanes import KVPlanes
    from kernels.model import attend
    from oracle.config import preset

    cfg = preset("tiny")
    kv = KVPlanes(cfg, 2, 3, max_len, torch.device("cpu"), torch.float32)
    g = torch.Generator().manual_seed(max_len)
    kv.k.copy_(torch.randn(kv.k.shape, generator=g))
    kv.v.copy_(torch.randn(kv.v.shape, generator=g))
    edge = [p for p in (0, 1, ta.CHUNK - 1, ta.CHUNK, max_len - 1) if p < max_len]  # chunk boundaries
    pos = torch.tensor(edge + [int(x) for x in torch.randint(0, max_len, (4,), generator=g)])
    M = pos.shape[0]
    plane = torch.randint(0, kv.k.shape[1], (M,), generator=g)
    q = torch.randn(M, cfg.num_heads, cfg.head_dim, generator=g)
    for layer in (0, cfg.num_layers - 1):
        got = ta.decode_attention(q, kv, layer, plane, pos)
        K, V = kv.k[layer].index_select(0, plane), kv.v[layer].index_select(0, plane)
        masked = torch.arange(max_len)[None, None, :] > pos[:, None, None]
        want = attend(q[:, None], K, V, masked)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        # a grid over the positions only (span = max pos + 1 < capacity) gives the same values
        span = int(pos.max()) + 1
        torch.testing.assert_close(ta.decode_attention(q, kv, layer, plane, pos, span=span), got, rtol=0, atol=0)
        # chunks below the call's own keys on each plane loaded early (rows share planes): the same values
        early = ta.decode_attention(q, kv, layer, plane, pos, span=span, early_kv=True)
        torch.testing.assert_close(early, got, rtol=0, atol=0)


# 64 keys: two whole chunks, one partial block of SB = 16 chunks in _attn_merge's loop. 600 keys: 19
# chunks, the last one partial, so the loop takes two blocks (a whole one, then a partial one). Between
# them they cover what 150 (5 chunks, the last partial, one partial block) did. 1100 (three blocks) cost 44 CPU s of the
# interpreter against about 10 here (2026-12-05). Both sizes in one process: the interpreter's
# start is paid once.
def test_split_decode_attention_matches_attend():
    code = "import tests.test_triton_attention_interpret as t; t.check(64); t.check(600)"
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, TRITON_INTERPRET="1"),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
