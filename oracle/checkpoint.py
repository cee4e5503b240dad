"""HF-style checkpoint folders: config.json + model.safetensors (or shards with
model.safetensors.index.json), HF tensor names (shared/DESIGN.md section 2)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import ModelConfig
from .errors import OracleError
from .model import check_weights, weight_shapes


def save_checkpoint(folder, cfg: ModelConfig, weights: dict[str, np.ndarray], shards: int = 1) -> Path:
    from safetensors.numpy import save_file
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg.to_hf(), indent=2) + "\n")
    names = list(weights)
    if shards == 1:
        save_file({n: np.ascontiguousarray(weights[n]) for n in names}, str(folder / "model.safetensors"))
        return folder
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        save_file({n: np.ascontiguousarray(weights[n]) for n in part}, str(folder / fname))
        weight_map |= {n: fname for n in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    return folder


def load_checkpoint(folder) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    from safetensors import safe_open
    folder = Path(folder)
    if not folder.is_dir():
        raise OracleError(f"checkpoint folder {folder} does not exist")
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise OracleError(f"checkpoint {folder} has no config.json")
    try:
        cfg = ModelConfig.from_hf(json.loads(cfg_path.read_text()))
    except json.JSONDecodeError as e:
        raise OracleError(f"{cfg_path}: not valid JSON ({e})") from None
    index = folder / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (folder / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise OracleError(f"checkpoint {folder} has neither model.safetensors nor model.safetensors.index.json")
    wanted = weight_shapes(cfg)
    weights = {}
    for f in files:
        if not (folder / f).exists():
            raise OracleError(f"checkpoint shard {folder / f} named in the index does not exist")
        with safe_open(str(folder / f), framework="pt") as sf:   # torch reads BF16, numpy cannot
            for name in sf.keys():
                if name in wanted:    # unknown extras (e.g. rotary buffers) are ignored
                    weights[name] = sf.get_tensor(name).float().numpy()
    check_weights(cfg, weights)
    return cfg, weights
