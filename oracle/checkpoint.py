"""HF-style checkpoint folders: config.json + model.safetensors (or shards with
model.safetensors.index.json), HF tensor names (docs/DESIGN.md section 2).

Everything read from the folder is checked: config.json and the index are JSON objects of the
right shape, every shard is a readable safetensors file, every tensor the model uses is a
float tensor (F16, BF16, F32, F64) of the right shape; tensors the model does not use are
named in a warning on stderr (rotary buffers excepted), never silently dropped.
`build_model` is where a reference model comes from: a checkpoint folder, or a preset with
seeded random weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import ModelConfig, preset
from .errors import OracleError
from .atomic import replacing
from .files import check_regular, read_json
from .model import LoopedModel, check_weights, random_weights, weight_shapes

FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
IGNORED_QUIETLY = ("rotary_emb.inv_freq",)  # buffers some exporters save


def save_checkpoint(
    folder, cfg: ModelConfig, weights: dict[str, np.ndarray], shards: int = 1, overwrite: bool = False
) -> Path:
    """Write config.json and the weights. Refuses a file in the way, and existing checkpoint
    files unless overwrite."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OracleError(f"--save {folder}: exists and is not a folder")
    taken = [
        p.name
        for p in (folder / "config.json", folder / "model.safetensors", folder / "model.safetensors.index.json")
        if p.exists()
    ]
    if taken and not overwrite:
        raise OracleError(f"--save {folder}: already holds {', '.join(taken)}; choose a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    names = list(weights)
    parts = {"model.safetensors": names} if shards == 1 else {}
    for s in range(shards if shards > 1 else 0):
        parts[f"model-{s + 1:05d}-of-{shards:05d}.safetensors"] = names[s::shards]
    texts = {"config.json": json.dumps(cfg.to_hf(), indent=2) + "\n"}
    if shards > 1:
        weight_map = {n: fname for fname, part in parts.items() for n in part}
        texts["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2)
    files = [*parts, *texts]  # config.json last: a folder without it is no checkpoint
    with replacing(*(folder / f for f in files)) as temps:  # every file whole, or none (oracle/files.py)
        tmp = dict(zip(files, temps))
        for fname, part in parts.items():
            save_file({n: np.ascontiguousarray(weights[n]) for n in part}, tmp[fname])
        for fname, text in texts.items():
            Path(tmp[fname]).write_text(text)
    return folder


def _read_json_object(path: Path, what: str, kind: str) -> dict:
    """A JSON object read by oracle/files.py: a regular file, bounded in size and nesting."""
    data = read_json(path, f"checkpoint {what}", kind)
    if not isinstance(data, dict):
        raise OracleError(f"{path}: {what} must be a JSON object, got {type(data).__name__}")
    return data


def read_config(folder) -> ModelConfig:
    """The checkpoint's ModelConfig (config.json only; no tensors read)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise OracleError(
            f"checkpoint folder {folder} does not exist"
            if not folder.exists()
            else f"--checkpoint {folder}: not a folder (give the folder holding config.json)"
        )
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise OracleError(f"checkpoint {folder} has no config.json")
    hf = _read_json_object(cfg_path, "config.json", "config.json")
    try:
        return ModelConfig.from_hf(hf)
    except (TypeError, ValueError) as e:
        if isinstance(e, OracleError):
            raise
        raise OracleError(f"{cfg_path}: bad value ({e})") from None


def weight_files(folder) -> dict[str, list[str] | None]:
    """{file name: tensor names the index gives it (None without an index)}, checked to exist."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        data = _read_json_object(index, "index", "index")
        wmap = data.get("weight_map")
        if not isinstance(wmap, dict) or not wmap:
            raise OracleError(f'{index}: "weight_map" must be a non-empty object of tensor name -> file')
        files: dict[str, list[str] | None] = {}
        for name, fname in wmap.items():
            if not isinstance(fname, str) or not fname or "/" in fname or fname in (".", ".."):
                raise OracleError(f"{index}: tensor {name!r} maps to {fname!r}, not a file name in the folder")
            files.setdefault(fname, []).append(name)
    elif (folder / "model.safetensors").exists():
        files = {"model.safetensors": None}
    else:
        raise OracleError(f"checkpoint {folder} has neither model.safetensors nor model.safetensors.index.json")
    for fname in files:
        shard = folder / fname
        if not shard.exists():  # a missing file or a dangling link
            named = "named in the index " if index.exists() else ""
            raise OracleError(f"checkpoint shard {shard} {named}does not exist")
        check_regular(shard, "checkpoint shard", "safetensors")  # not a pipe or a device
    return files


def _read_shard(path: Path, listed, wanted: dict, weights: dict, unknown: list) -> None:
    from safetensors import safe_open

    check_regular(path, "checkpoint shard", "safetensors")  # what safe_open maps is a regular file
    try:
        with safe_open(str(path), framework="pt") as sf:  # torch reads BF16, numpy cannot
            names = list(sf.keys())
            for name in names:
                if name not in wanted:
                    if not name.endswith(IGNORED_QUIETLY):
                        unknown.append(name)
                    continue
                dtype = sf.get_slice(name).get_dtype()
                if dtype not in FLOAT_DTYPES:
                    raise OracleError(
                        f"{path}: tensor {name} has dtype {dtype}; weights must be one of {', '.join(FLOAT_DTYPES)}"
                    )
                value = sf.get_tensor(name).float().numpy()
                if name in weights and not np.array_equal(weights[name], value, equal_nan=True):
                    raise OracleError(
                        f"{path}: tensor {name} is also in another shard, with different values "
                        f"(which one is the checkpoint's?)"
                    )
                weights[name] = value
    except OracleError:
        raise
    except Exception as e:  # safetensors raises its own error types for truncated or garbage files
        raise OracleError(
            f"{path}: not a readable safetensors file ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else 'no detail'})"
        ) from None
    if listed is not None:
        missing = sorted(set(listed) - set(names))
        if missing:
            raise OracleError(
                f"{path}: the index names tensor {missing[0]} in this file, but the file does not hold it"
            )


def load_checkpoint(folder) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    from .progress import warn

    folder = Path(folder)
    cfg = read_config(folder)
    files = weight_files(folder)
    wanted = weight_shapes(cfg)
    weights: dict[str, np.ndarray] = {}
    unknown: list[str] = []
    for fname, listed in files.items():
        _read_shard(folder / fname, listed, wanted, weights, unknown)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        warn(f"checkpoint {folder}: {len(unknown)} tensor(s) the model does not use were ignored: {shown}")
    check_weights(cfg, weights)
    return cfg, weights


def build_model(preset_name: str | None = None, seed: int = 0, checkpoint: str | None = None) -> LoopedModel:
    """The reference model of a checkpoint folder, else of a preset (default "tiny") with
    random weights drawn from `seed`."""
    if checkpoint is not None:
        cfg, w = load_checkpoint(checkpoint)
        return LoopedModel(cfg, w)
    cfg = preset(preset_name or "tiny")
    return LoopedModel(cfg, random_weights(cfg, seed))
