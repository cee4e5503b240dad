"""The knobs of the drift model (docs/DESIGN.md, "Reduced precision"): the parameters whose scales
oracle/judge/probe/drift_model.py turns and the drift verdict estimates (`params`: per layer, then
the global ones), each named in a kernel engineer's terms (`label`), and the directions the verdict
tests over them (`directions`; `coarse_directions`, the JAX judge's at a large shape). The NumPy
model (drift_model.forward), the drift fit (drift.py) and the JAX judge's jvp (judge_jax/drift.py)
take their order from here.
"""

from __future__ import annotations

import numpy as np

# Per-layer parameters, in HF terms. "attn_scale" is the softmax logit scale head_dim**-0.5; a
# q_proj output scale is the same direction (q enters only the logits), so it is not listed apart.
LAYER_PARAMS = (
    "attn_scale",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "input_layernorm",
    "input_layernorm_2",
    "post_attention_layernorm",
    "post_attention_layernorm_2",
)
GLOBAL_PARAMS = ("rope_theta", "embed_tokens", "norm", "lm_head")


def params(num_layers: int) -> list[tuple[str, int | None]]:
    """Every knob: (name, layer) per layer, then (name, None) for the global ones."""
    return [(p, l) for l in range(num_layers) for p in LAYER_PARAMS] + [(p, None) for p in GLOBAL_PARAMS]


# Each knob's name in a kernel engineer's terms (the drift verdict's estimates and failures).
LABEL = {
    "attn_scale": "attention logit scale (= q_proj output scale)",
    "k_proj": "k_proj output scale",
    "v_proj": "v_proj output scale",
    "o_proj": "o_proj output scale",
    "gate_proj": "gate_proj output scale",
    "up_proj": "up_proj output scale",
    "down_proj": "down_proj output scale",
    "input_layernorm": "input_layernorm weight scale",
    "input_layernorm_2": "input_layernorm_2 weight scale",
    "post_attention_layernorm": "post_attention_layernorm weight scale",
    "post_attention_layernorm_2": "post_attention_layernorm_2 weight scale",
    "rope_theta": "RoPE base (rope_theta)",
    "embed_tokens": "embed_tokens scale",
    "norm": "model.norm weight scale",
    "lm_head": "lm_head output scale",
}


def label(name: str, layer) -> str:
    return LABEL[name] if layer is None else f"layer {layer} {LABEL[name]}"


def directions(num_layers: int) -> list[tuple[str, np.ndarray]]:
    """(label, c) over params(num_layers): one per knob, plus the attention logit scale of all
    layers together (the directions the drift verdict tests by default)."""
    names = params(num_layers)
    out = []
    for i, (n, l) in enumerate(names):
        c = np.zeros(len(names))
        c[i] = 1.0
        out.append((label(n, l), c))
    c = np.array([1.0 if n == "attn_scale" else 0.0 for n, _ in names])
    out.append(("attention logit scale (all layers)", c))
    return out


def coarse_directions(num_layers: int) -> list[tuple[str, np.ndarray]]:
    """Each per-layer knob over all layers together, and the global ones: the directions the
    JAX judge fits at a large shape (one jvp each instead of one per layer and parameter)."""
    names = params(num_layers)
    out = []
    for p in LAYER_PARAMS + GLOBAL_PARAMS:
        c = np.array([1.0 if n == p else 0.0 for n, _ in names])
        out.append((LABEL[p] + ("" if p in GLOBAL_PARAMS else " (all layers)"), c))
    return out
