"""What a backend's capture records: one row's intermediates, operation by operation, in the order
the model computes them (the localizer, oracle/judge/plans/localize.py, names the first operation whose
bits differ between two runs of one row). A session that offers capture (oracle/runtime/contract.py,
OPTIONAL_SESSION "capture") returns `Captured` records from `captured()`.

The operations of one loop, in order (per layer l):

    norm_in        input_layernorm(h)                                 [H]
    q, k, v        the projections, q and k after RoPE                [heads * head_dim]
    scores         q.k * scale over the row's visible keys 0..pos     [heads, pos + 1]
    probs          softmax(scores)                                    [heads, pos + 1]
    attn           probs @ V                                          [heads * head_dim]
    o_proj         attn @ o.T                                         [H]
    attn_out_norm  input_layernorm_2(o_proj)                          [H]
    residual_attn  h + attn_out_norm                                  [H]
    post_norm      post_attention_layernorm(residual_attn)            [H]
    gate, up       the gate_up projection's halves                    [I]
    act            silu(gate) * up                                    [I]
    down           act @ down.T                                       [H]
    mlp_out_norm   post_attention_layernorm_2(down)                   [H]
    residual_mlp   residual_attn + mlp_out_norm                       [H]

then after the last layer `final_norm` (model.norm, layer = num_layers), and for a row a head ran
on, `head` (its logits, layer = num_layers). A backend may record a subset (a fused kernel has no
scores of its own): the localizer compares the operations both runs recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LAYER_OPS = (
    "norm_in",
    "q",
    "k",
    "v",
    "scores",
    "probs",
    "attn",
    "o_proj",
    "attn_out_norm",
    "residual_attn",
    "post_norm",
    "gate",
    "up",
    "act",
    "down",
    "mlp_out_norm",
    "residual_mlp",
)
END_OPS = ("final_norm", "head")
OPS = LAYER_OPS + END_OPS


@dataclass(frozen=True, slots=True)
class Captured:
    """One intermediate of the armed row: its operation, layer, the row count of the call that
    computed it (M) and its value as stored (any dtype; compared by its bits)."""

    op: str
    layer: int
    rows: int
    value: np.ndarray

    def __post_init__(self):
        assert self.op in OPS, f"capture op {self.op!r}, expected one of {OPS}"


def order_key(c: Captured) -> tuple:
    """Where an operation comes in one loop: by layer, then by its place in OPS."""
    return (c.layer, OPS.index(c.op))
