"""HF checkpoint folders for the JAX judge, read with safetensors' NumPy API (independent of
oracle/checkpoint.py): config.json + model.safetensors, or shards listed in
model.safetensors.index.json. Tensors come back as FP32 NumPy arrays by HF name; BF16
tensors (NumPy has no bfloat16) are widened bit-exactly from their raw bytes. The optional
early-exit gate is accepted and ignored; a missing tensor is named.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from oracle.config import ModelConfig
from oracle.errors import OracleError

# the judge's per-layer parameter keys -> HF tensor names (host_params below)
HF_LAYER = {
    "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight",
    "wg": "mlp.gate_proj.weight",
    "wu": "mlp.up_proj.weight",
    "wd": "mlp.down_proj.weight",
    "n_in": "input_layernorm.weight",
    "n_attn_out": "input_layernorm_2.weight",
    "n_post": "post_attention_layernorm.weight",
    "n_mlp_out": "post_attention_layernorm_2.weight",
}


def required_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the rounds use, by HF name, with its [out, in] shape."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = {
        "wq": (q, H),
        "wk": (kv, H),
        "wv": (kv, H),
        "wo": (H, q),
        "wg": (I, H),
        "wu": (I, H),
        "wd": (H, I),
        "n_in": (H,),
        "n_attn_out": (H,),
        "n_post": (H,),
        "n_mlp_out": (H,),
    }
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
    for l in range(cfg.num_layers):
        shapes |= {f"model.layers.{l}.{HF_LAYER[k]}": s for k, s in per_layer.items()}
    return shapes


def _bf16_tensors(path: Path, names) -> dict[str, np.ndarray]:
    """BF16 tensors of one file: header = u64 length + JSON {name: {dtype, shape, data_offsets}}."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name in names:
            meta = header[name]
            start, end = meta["data_offsets"]
            f.seek(base + start)
            raw = np.frombuffer(f.read(end - start), dtype="<u2")
            out[name] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(meta["shape"])
    return out


def _read_file(path: Path, wanted: set) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    out, bf16 = {}, []
    with safe_open(str(path), framework="np") as sf:
        for name in sf.keys():
            if name not in wanted:
                continue  # the gate, rotary buffers, ...
            try:
                out[name] = np.asarray(sf.get_tensor(name), dtype=np.float32)
            except (TypeError, ValueError):  # bfloat16: no NumPy dtype
                bf16.append(name)
    return out | (_bf16_tensors(path, bf16) if bf16 else {})


def read_checkpoint(folder) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise OracleError(f"checkpoint {folder}: no config.json")
    try:
        cfg = ModelConfig.from_hf(json.loads((folder / "config.json").read_text()))
    except json.JSONDecodeError as e:
        raise OracleError(f"checkpoint {folder}: config.json is not valid JSON ({e})") from None
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise OracleError(f"checkpoint {folder}: neither model.safetensors nor model.safetensors.index.json")
    shapes = required_shapes(cfg)
    weights: dict[str, np.ndarray] = {}
    for f in files:
        if not (folder / f).is_file():
            raise OracleError(f"checkpoint {folder}: shard {f} named in the index is missing")
        weights |= _read_file(folder / f, set(shapes))
    for name, shape in shapes.items():
        if name not in weights:
            raise OracleError(f"checkpoint {folder}: missing tensor {name}")
        if weights[name].shape != shape:
            raise OracleError(
                f"checkpoint {folder}: tensor {name} has shape {list(weights[name].shape)}, expected {list(shape)}"
            )
    return cfg, weights


def host_params(cfg: ModelConfig, weights: dict) -> dict:
    """HF-named FP32 tensors -> the stacked layout: matrices [L, in, out], norms [L, H]."""

    def get(name):
        if name not in weights:
            raise OracleError(f"weights are missing tensor {name}")
        return np.asarray(weights[name], dtype=np.float32)

    stacked = {}
    for key, hf in HF_LAYER.items():
        per_layer = [get(f"model.layers.{l}.{hf}") for l in range(cfg.num_layers)]
        arr = np.stack(per_layer)
        stacked[key] = np.ascontiguousarray(arr.transpose(0, 2, 1)) if arr.ndim == 3 else arr
    return {
        "embed": get("model.embed_tokens.weight"),
        "norm": get("model.norm.weight"),
        "lm_head": np.ascontiguousarray(get("lm_head.weight").T),
        "layers": stacked,
    }
