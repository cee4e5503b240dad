"""The tensors of an Ouro checkpoint by HF name: their shapes for a config, seeded random
weights (the presets), and the check every loaded weight set passes (docs/DESIGN.md section 2).
Shared by oracle/model.py and oracle/checkpoint.py, which import it and not each other."""
from __future__ import annotations

import numpy as np

from .config import ModelConfig
from .errors import OracleError

F32 = np.float32


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of an Ouro checkpoint, by HF name (weights are [out, in])."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,),
              "lm_head.weight": (V, H),
              "model.early_exit_gate.weight": (1, H), "model.early_exit_gate.bias": (1,)}
    for l in range(cfg.num_layers):
        p = f"model.layers.{l}."
        shapes |= {p + "self_attn.q_proj.weight": (q, H), p + "self_attn.k_proj.weight": (kv, H),
                   p + "self_attn.v_proj.weight": (kv, H), p + "self_attn.o_proj.weight": (H, q),
                   p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                   p + "mlp.down_proj.weight": (H, I),
                   p + "input_layernorm.weight": (H,), p + "input_layernorm_2.weight": (H,),
                   p + "post_attention_layernorm.weight": (H,),
                   p + "post_attention_layernorm_2.weight": (H,)}
    return shapes


OPTIONAL = ("model.early_exit_gate.weight", "model.early_exit_gate.bias")  # rounds ignore the gate


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random weights with logits spread enough that sampling is not uniform."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(cfg).items():
        if name.endswith("layernorm_2.weight"):      # branch-output norms: small, so that
            w = 0.3 * (1.0 + 0.1 * rng.standard_normal(shape, dtype=F32))   # drafts often pass
        elif name.endswith("norm.weight") or "layernorm" in name:
            w = 1.0 + 0.1 * rng.standard_normal(shape, dtype=F32)
        elif name == "model.embed_tokens.weight":
            w = rng.standard_normal(shape, dtype=F32)
        elif name == "model.early_exit_gate.bias":
            w = np.zeros(shape, F32)
        elif name == "lm_head.weight":
            w = rng.standard_normal(shape, dtype=F32) * F32(2.0 / np.sqrt(shape[1]))
        else:
            w = rng.standard_normal(shape, dtype=F32) * F32(1.0 / np.sqrt(shape[1]))
        out[name] = np.ascontiguousarray(w, dtype=F32)
    return out


def check_weights(cfg: ModelConfig, weights: dict[str, np.ndarray]) -> None:
    for name, shape in weight_shapes(cfg).items():
        if name not in weights:
            if name in OPTIONAL:
                continue
            raise OracleError(f"checkpoint is missing tensor {name} (expected shape {list(shape)})")
        got = tuple(weights[name].shape)
        if got != shape:
            raise OracleError(f"tensor {name} has shape {list(got)}, expected {list(shape)}")
        if not np.all(np.isfinite(weights[name])):
            raise OracleError(f"tensor {name} holds NaN or inf values")
