import json
import subprocess
import sys

import numpy as np
import pytest

from oracle.checkpoint import load_checkpoint, save_checkpoint
from oracle.config import ModelConfig, preset
from oracle.errors import OracleError
from oracle.kv import KVCache
from oracle.model import LoopedModel, random_weights, weight_shapes


def fresh_kv(m, D=4):
    return KVCache(m.cfg.num_layers, D, m.cfg.num_kv_heads, m.cfg.head_dim)


def prefill(m, kv, rid, tokens, D):
    """Positions 0..n-1 of `tokens` at depths 0..D-1; returns the loop outputs per depth."""
    h, outs = m.embed(tokens), []
    for j in range(D):
        h = m.recurrent_call([(rid, p, j) for p in range(len(tokens))], h, kv, j)
        outs.append(h)
    return outs


def test_row_machinery_equals_full_forward(tiny):
    tokens = [3, 17, 5, 9, 22, 1, 63, 0]
    outs = prefill(tiny, fresh_kv(tiny), 0, tokens, 4)
    full = tiny.forward_full(tokens, 4)
    for j in range(4):
        got = tiny.head(outs[j])
        assert np.abs(got - full[j]).max() <= 1e-4 * np.abs(full[j]).max(), j


def test_batch_invariance_bitwise(tiny):
    """A row's hidden state, K, V and logits are identical whatever shares its call."""
    rng = np.random.default_rng(0)
    D = 3
    seqs = {r: list(map(int, rng.integers(0, 64, 6))) for r in range(5)}
    kv_alone = fresh_kv(tiny, D)
    alone = {r: prefill(tiny, kv_alone, r, seqs[r], D) for r in seqs}
    for trial in range(4):
        # all positions of all requests at one depth per call, in a random order
        kv = fresh_kv(tiny, D)
        h = {(r, p): tiny.embed([seqs[r][p]])[0] for r in seqs for p in range(6)}
        for j in range(D):
            rows = [(r, p, j) for r in seqs for p in range(6)]
            # positions of one request must be written in order; shuffle requests only
            order = rng.permutation(len(seqs))
            rows = [row for r in order for row in rows if row[0] == r]
            out = tiny.recurrent_call(rows, np.stack([h[(r, p)] for r, p, _ in rows]), kv, j)
            for (r, p, _), x in zip(rows, out):
                h[(r, p)] = x
                assert np.array_equal(x, alone[r][j][p])
        for w in kv.log:
            ref = next(
                x
                for x in kv_alone.log
                if (x.request, x.position, x.depth, x.layer) == (w.request, w.position, w.depth, w.layer)
            )
            assert np.array_equal(w.k, ref.k) and np.array_equal(w.v, ref.v)
        logits = tiny.head(np.stack([h[(r, p)] for r in seqs for p in range(6)]))
        ref = np.concatenate([tiny.head(alone[r][D - 1]) for r in seqs])
        assert np.array_equal(logits, ref)


@pytest.mark.parametrize("n", [1, 2, 5, 16, 80])
def test_rowwise_and_attend_give_each_row_its_one_row_bits(n):
    """model.rowwise's row r is `W @ x[r]` bit for bit, and attend's head hh is the per-head
    product of its K/V head, bit for bit (GQA), whatever n."""
    from oracle.model import attend, rowwise

    rng = np.random.default_rng(n)
    W = rng.standard_normal((96, 72), dtype=np.float32)
    x = rng.standard_normal((n, 72), dtype=np.float32)
    got = rowwise(W, x)
    assert got.view(np.uint32).tolist() == np.stack([W @ x[r] for r in range(n)]).view(np.uint32).tolist()
    nh, nkv, hd = 6, 2, 8
    q = rng.standard_normal((nh, hd), dtype=np.float32)
    K, V = (rng.standard_normal((n, nkv, hd), dtype=np.float32) for _ in range(2))
    s = np.stack([K[:, hh // 3] @ q[hh] for hh in range(nh)]) * np.float32(hd**-0.5)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    want = np.concatenate([p[hh] @ V[:, hh // 3] for hh in range(nh)])
    assert attend(q, K, V).view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_mixed_depth_call_equals_separate_calls(tiny):
    kv1, kv2 = fresh_kv(tiny), fresh_kv(tiny)
    a = prefill(tiny, kv1, 0, [1, 2, 3], 4)
    # request 1's row at depth 0 and request 0's next position at depth 0..; mixed call
    b = prefill(tiny, kv2, 0, [1, 2, 3], 4)
    h0 = tiny.embed([4, 9])
    rows = [(0, 3, 0), (1, 0, 0)]
    x = tiny.recurrent_call(rows, h0, kv1, 10)
    y0 = tiny.recurrent_call([(0, 3, 0)], h0[:1], kv2, 10)
    y1 = tiny.recurrent_call([(1, 0, 0)], h0[1:], kv2, 11)
    assert np.array_equal(x, np.concatenate([y0, y1]))
    x2 = tiny.recurrent_call([(0, 3, 1), (1, 0, 1)], x, kv1, 12)  # next depth
    assert np.array_equal(x2[0], tiny.recurrent_call([(0, 3, 1)], y0, kv2, 12)[0])
    del a, b


def test_checkpoint_round_trip(tmp_path, tiny):
    for shards in (1, 3):
        d = tmp_path / f"ck{shards}"
        save_checkpoint(d, tiny.cfg, tiny.weights, shards=shards)
        cfg, w = load_checkpoint(d)
        assert cfg == tiny.cfg
        assert w.keys() == tiny.weights.keys()
        assert all(np.array_equal(w[k], tiny.weights[k]) for k in w)
        assert (d / "config.json").exists()
        hf = json.loads((d / "config.json").read_text())
        assert hf["num_hidden_layers"] == tiny.cfg.num_layers and hf["total_ut_steps"] == 4


def test_checkpoint_errors(tmp_path, tiny):
    w = dict(tiny.weights)
    del w["model.layers.1.input_layernorm_2.weight"]
    save_checkpoint(tmp_path / "a", tiny.cfg, w)
    with pytest.raises(OracleError, match="missing tensor model.layers.1.input_layernorm_2.weight"):
        load_checkpoint(tmp_path / "a")
    w = dict(tiny.weights)
    w["lm_head.weight"] = w["lm_head.weight"][:, :-1].copy()
    save_checkpoint(tmp_path / "b", tiny.cfg, w)
    with pytest.raises(OracleError, match=r"lm_head.weight has shape \[64, 31\], expected \[64, 32\]"):
        load_checkpoint(tmp_path / "b")
    # the early-exit gate is optional; a checkpoint without it still loads
    w = {k: v for k, v in tiny.weights.items() if "early_exit" not in k}
    save_checkpoint(tmp_path / "c", tiny.cfg, w)
    load_checkpoint(tmp_path / "c")
    with pytest.raises(OracleError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")


def test_bf16_checkpoint_loads(tmp_path, tiny):
    import torch
    from safetensors.torch import save_file

    save_checkpoint(tmp_path, tiny.cfg, tiny.weights)
    save_file({k: torch.from_numpy(v).bfloat16() for k, v in tiny.weights.items()}, str(tmp_path / "model.safetensors"))
    cfg, w = load_checkpoint(tmp_path)
    assert w["lm_head.weight"].dtype == np.float32
    assert np.allclose(w["lm_head.weight"], tiny.weights["lm_head.weight"], rtol=1e-2, atol=1e-2)


def test_weight_shapes_full_preset():
    shapes = weight_shapes(preset("ouro-1.4b"))
    assert shapes["model.layers.23.self_attn.q_proj.weight"] == (2048, 2048)
    assert shapes["model.layers.0.mlp.gate_proj.weight"] == (5632, 2048)
    assert shapes["lm_head.weight"] == (49152, 2048)
    n = sum(int(np.prod(s)) for s in shapes.values())
    assert 1.3e9 < n < 1.8e9


def test_norm_weight_is_not_one_plus_w():
    cfg = ModelConfig(
        vocab_size=16, hidden_size=8, intermediate_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=4
    )
    w = random_weights(cfg, 1)
    m = LoopedModel(cfg, w)
    a = m.forward_full([1, 2], 1)[0]
    w2 = dict(w)
    w2["model.norm.weight"] = w["model.norm.weight"] * 2
    b = LoopedModel(cfg, w2).forward_full([1, 2], 1)[0]
    assert np.allclose(b, 2 * a, rtol=1e-5, atol=1e-5)  # head is linear in the norm weight


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "oracle", *args], capture_output=True, text=True)


def test_model_cli(tmp_path, tiny):
    r = run_cli("model", "--preset", "tiny", "--tokens", "1,2,3", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert [l["depth"] for l in j["loops"]] == [0, 1, 2, 3]
    full = tiny.forward_full([1, 2, 3], 4)
    assert np.allclose(j["loops"][3]["logits"], full[3][-1], rtol=1e-6, atol=1e-6)
    r = run_cli("model", "--preset", "tiny", "--tokens", "1,2,3", "--save", str(tmp_path / "ck"))
    assert r.returncode == 0 and "depth 3" in r.stdout
    r2 = run_cli("model", "--checkpoint", str(tmp_path / "ck"), "--tokens", "1,2,3", "--json")
    assert json.loads(r2.stdout) == j


@pytest.mark.parametrize(
    "args",
    [
        ["model", "--preset", "huge", "--tokens", "1"],
        ["model", "--preset", "tiny", "--tokens", "1,999"],
        ["model", "--checkpoint", "/nonexistent", "--tokens", "1"],
        ["schedule", "--counts", "5,3", "-d", "4", "-D", "4"],
        ["schedule", "--counts", "5,3", "-d", "0", "-D", "4"],
        ["schedule", "--counts", "", "-d", "1", "-D", "4"],
        ["schedule", "--counts", "5,-3"],
        ["check", "--preset", "nope"],
    ],
)
def test_bad_input_one_line_error(args):
    r = run_cli(*args)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:"), r.stderr


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_forward_full_with_past_equals_one_forward(tiny, cut):
    """The cache-free check forwards a prefix once and later tokens against its own K/V: the
    logits equal one forward of the whole sequence."""
    tokens = [3, 17, 5, 9, 22, 1, 63, 0, 4, 8]
    whole = tiny.forward_full(tokens, 3)
    first, kv = tiny.forward_full(tokens[:cut], 3, keep=True)
    rest = tiny.forward_full(tokens[cut:], 3, past=kv)
    assert len(kv) == 3 and kv[0][0][0].shape == (cut, tiny.cfg.num_kv_heads, tiny.cfg.head_dim)
    for j in range(3):
        got = np.concatenate([first[j], rest[j]])
        assert np.abs(got - whole[j]).max() <= 1e-5 * np.abs(whole[j]).max(), j


def test_cache_free_check_catches_a_late_round(tiny):
    """A logit wrong in round 5 of 6 only (the prefix K/V was extended four times) is caught."""
    from oracle.judge.comparison.cache_free import cache_free_check
    from oracle.judge.scenario import make_case
    from oracle.judge.runner import REFERENCE, run_scenario
    from oracle.sampling_params import SamplingParams as SP

    case = make_case("late", [{0: 3, 1: 2}] * 6, 2, 4, [SP(), SP(0.9, seed=1)])
    traces = run_scenario(REFERENCE, tiny, case, "loop").traces
    ok, n = cache_free_check(tiny, traces)
    assert ok.ok and n == sum(len(t.verify_logits) + len(t.draft_logits) for t in traces)
    key = next(k for k in traces[4].verify_logits if k[0] == 1)
    traces[4].verify_logits[key] = traces[4].verify_logits[key] * 1.001
    bad, _ = cache_free_check(tiny, traces)
    assert not bad.ok and "round 4" in bad.detail and "request 1" in bad.detail, bad.detail
