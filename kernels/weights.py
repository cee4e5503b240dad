"""The reference model's FP32 numpy weights as torch tensors on a device, in the backend's
dtype, arranged the way the packed recurrent call uses them (q/k/v and gate/up fused)."""

from __future__ import annotations

import numpy as np
import torch

from oracle.config import ModelConfig
from oracle.errors import OracleError
from oracle.model import rope_cos_sin

from .rounding import round_bits


class LayerWeights:
    __slots__ = ("qkv", "o", "gate_up", "down", "n_in", "n_attn_out", "n_post", "n_mlp_out")


class TorchWeights:
    """cfg + per-layer tensors; `from_model` converts a reference LoopedModel, `random`
    builds random weights directly on the device (benchmarks of the full-size shape)."""

    def __init__(self, cfg: ModelConfig, tensors: dict[str, torch.Tensor], device, dtype):
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        self.attn_scale = cfg.head_dim**-0.5  # the softmax logit scale of every layer
        self.rope_theta = cfg.rope_theta
        self.precision_fault = ""  # "fp8_k" | "fp8_v" | "fp8_act": with_fault
        self.bits_fault = None  # ("k_bits" | "v_bits" | "attn_out_bits", layer or None, bits): with_fault
        t = tensors
        self.embed = t["model.embed_tokens.weight"]  # [V, H]
        self.norm = t["model.norm.weight"]  # [H]
        self.lm_head = t["lm_head.weight"]  # [V, H]
        self.layers = []
        for l in range(cfg.num_layers):
            p = f"model.layers.{l}."
            L = LayerWeights()
            L.qkv = torch.cat(
                [t[p + "self_attn.q_proj.weight"], t[p + "self_attn.k_proj.weight"], t[p + "self_attn.v_proj.weight"]]
            ).contiguous()  # [(nh+2nkv)*hd, H]
            L.o = t[p + "self_attn.o_proj.weight"]  # [H, nh*hd]
            L.gate_up = torch.cat([t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"]]).contiguous()
            L.down = t[p + "mlp.down_proj.weight"]  # [H, I]
            L.n_in, L.n_attn_out = t[p + "input_layernorm.weight"], t[p + "input_layernorm_2.weight"]
            L.n_post, L.n_mlp_out = t[p + "post_attention_layernorm.weight"], t[p + "post_attention_layernorm_2.weight"]
            self.layers.append(L)

    @staticmethod
    def from_model(model, device, dtype) -> "TorchWeights":
        # the early-exit gate is not used by fixed-depth rounds (DESIGN.md section 2)
        # copies: on CPU in FP32 a plain .to() would alias the reference model's arrays
        tensors = {
            k: torch.from_numpy(np.array(v, dtype=np.float32)).to(device=device, dtype=dtype)
            for k, v in model.weights.items()
            if "early_exit_gate" not in k
        }
        return TorchWeights(model.cfg, tensors, device, dtype)

    @staticmethod
    def random(cfg: ModelConfig, device, dtype, seed: int = 0) -> "TorchWeights":
        """Random weights made on the device (values only matter for timing)."""
        from oracle.model import weight_shapes

        g = torch.Generator(device=device).manual_seed(seed)
        tensors = {}
        for name, shape in weight_shapes(cfg).items():
            if "early_exit_gate" in name:
                continue
            if name.endswith("norm.weight") or "layernorm" in name:
                tensors[name] = torch.ones(shape, device=device, dtype=dtype)
            else:
                w = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
                tensors[name] = (w * shape[-1] ** -0.5).to(dtype)
        return TorchWeights(cfg, tensors, device, dtype)

    def with_fault(self, fault: str) -> "TorchWeights":
        """These weights with a deliberate fault (kernels/options.py FAULTS), applied in place."""
        from .options import parse_fault

        parsed = parse_fault(fault)
        if parsed is None:
            return self
        name, layer, f = parsed
        if layer is not None and layer >= self.cfg.num_layers:
            raise OracleError(f"kernel fault {fault!r}: the model has {self.cfg.num_layers} layers")
        if name == "fp8_gate_up":
            L = self.layers[layer]
            L.gate_up = L.gate_up.to(torch.float8_e4m3fn).to(self.dtype)
        elif name in ("fp8_k", "fp8_v", "fp8_act"):
            self.precision_fault = name  # applied by kernels/model.py
        elif name == "o_weight_bits":
            L = self.layers[layer]
            L.o = round_bits(L.o, f)
        elif name in ("k_bits", "v_bits", "attn_out_bits"):
            self.bits_fault = (name, layer, f)  # applied by kernels/model.py
        elif name == "attn_scale":
            self.attn_scale *= f
        elif name == "rope_theta":
            self.rope_theta *= f
        else:
            L = self.layers[layer]
            L.n_in = (L.n_in.float() * f).to(self.dtype)
        return self

    def rope_table(self, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin: [max_len, hd], computed in FP64 by the reference's function, then cast."""
        cos, sin = rope_cos_sin(np.arange(max_len), self.cfg.head_dim, self.rope_theta)
        return (torch.from_numpy(cos).to(self.device, self.dtype), torch.from_numpy(sin).to(self.device, self.dtype))
