"""A trace file (docs/cli_inputs.md, "Trace files"): FILE (JSON) and FILE.npz beside it, the
NPZ's SHA-256 in the JSON; the file names its model and its requests' sampling parameters.

Written by `save_traces`. Read back by `load_trace_file`, which reads FILE and FILE.npz through
oracle/files.py (regular files of bounded size, JSON of bounded nesting) and refuses, in one
OracleError line, any departure from the schema: another format or schema_version, no model
identity or params, a missing NPZ or one whose SHA-256 differs, a round with a key missing or of
the wrong type, impossible per-request fields or inputs (trace_problems.request_problem), round
numbers that do not increase, an unknown dtype. The reference's modules never read a trace file,
so this reader sits above them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .errors import OracleError, printable
from .files import open_regular, read_json
from .trace_problems import request_problem
from .traces import DTYPES, RoundTrace

SCHEMA_VERSION = 3  # 3: the file names its model (`model`) and its requests' sampling parameters (`params`)
FORMAT = f"loopspec-trace/{SCHEMA_VERSION}"  # JSON + NPZ, the NPZ's SHA-256 in the JSON
ROUND_KEYS = {
    "mode": str,
    "round": int,
    "policy": str,
    "d": int,
    "D": int,
    "requests": list,
    "token_counts": list,
    "prefix": list,
    "calls": list,
    "kv_writes": list,
    "draft_logits": list,
    "verify_logits": list,
    "rng_events": list,
    "drafts": list,
    "accepted": list,
    "emitted": list,
    "stats": dict,
}
# NPZ array -> the JSON list its rows belong to
ARRAY_ROWS = {
    "kv_k": "kv_writes",
    "kv_v": "kv_writes",
    "draft_logits": "draft_logits",
    "verify_logits": "verify_logits",
}


def npz_path(path) -> Path:
    return Path(str(path) + ".npz")


def sha256_of(source) -> str:
    """SHA-256 of a file: a path, or a binary file object read from where it stands."""
    if hasattr(source, "read"):
        h = hashlib.sha256()
        for block in iter(lambda: source.read(1 << 20), b""):
            h.update(block)
        return h.hexdigest()
    with open(source, "rb") as f:
        return sha256_of(f)


# ---- a trace file's identity: its model and its requests' sampling parameters ----


def weights_sha256(weights: dict) -> str:
    """SHA-256 of a model's weights as the reference computes with them (FP32, by HF name, in
    name order, each name and shape included): the same for a preset and a checkpoint saved
    from it, whatever the checkpoint's shards or storage dtype."""
    h = hashlib.sha256()
    for name in sorted(weights):
        a = np.ascontiguousarray(weights[name], dtype=np.float32)
        h.update(f"{name}:{list(a.shape)};".encode())
        h.update(a.data)
    return h.hexdigest()


def model_identity(model, preset: str | None = None, seed: int | None = None, checkpoint=None) -> dict:
    """The `model` object of a trace file: {preset, seed} or {checkpoint} (the folder, as
    given), plus `config` (ModelConfig fields) and `weights_sha256` (the weights' content)."""
    out = {"checkpoint": str(checkpoint)} if checkpoint is not None else {"preset": preset, "seed": seed}
    return out | {"config": model.cfg.to_dict(), "weights_sha256": weights_sha256(model.weights)}


def params_json(params) -> dict:
    """{rid: SamplingParams.to_json()} from a list (index = rid) or dict of SamplingParams or
    their JSON."""
    items = params.items() if isinstance(params, dict) else enumerate(params)
    return {r: (p if isinstance(p, dict) else p.to_json()) for r, p in items}


def save_traces(
    path, traces: list[RoundTrace], meta: dict | None = None, model: dict | None = None, params=None
) -> None:
    """Writes PATH.npz (arrays), then PATH (JSON) holding the NPZ's SHA-256. `model`: the
    model's identity (`model_identity`), required; `params`: each request's SamplingParams (a
    list by request id, or a dict), default: the first a round records for each request."""
    path = Path(path)
    if not isinstance(model, dict) or "config" not in model or "weights_sha256" not in model:
        raise OracleError(
            "save_traces: give model=oracle.trace_file.model_identity(model, preset, seed | checkpoint): "
            "a trace file names the model it ran"
        )
    if params is None:
        params = {}
        for t in traces:
            for r, p in t.params.items():
                params.setdefault(r, p)
    params = params_json(params)
    if path.is_dir():
        raise OracleError(f"trace file {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise OracleError(f"trace file {path}: folder {path.parent} does not exist")
    arrays = {}
    for n, t in enumerate(traces):
        arrays |= t.arrays(f"r{n}_")
    npz = npz_path(path)
    from .atomic import replacing

    with replacing(npz, path) as (npz_tmp, json_tmp):  # both whole, or neither (a failed write leaves nothing)
        with open(npz_tmp, "wb") as f:  # np.savez would append .npz to a str path
            np.savez_compressed(f, **arrays)
        npz_info = {"file": npz.name, "sha256": sha256_of(npz_tmp)}
        Path(json_tmp).write_text(_trace_json(model, params, npz_info, meta, traces))


def _trace_json(model: dict, params: dict, npz: dict, meta, traces) -> str:
    """A trace file's JSON text; npz: its NPZ's name and SHA-256."""
    return (
        json.dumps(
            {
                "format": FORMAT,
                "schema_version": SCHEMA_VERSION,
                "model": model,
                "params": [[r, p] for r, p in params.items()],
                "npz": npz,
                "meta": meta or {},
                "rounds": [t.to_json() for t in traces],
            }
        )
        + "\n"
    )


def _check_round(path, n: int, r, arrays: dict) -> None:
    if not isinstance(r, dict):
        raise OracleError(f"trace file {path}: round {n} is a {type(r).__name__}, not an object")
    for key, kind in ROUND_KEYS.items():
        if key not in r:
            raise OracleError(f"trace file {path}: round {n} has no {key!r}")
        if key in ("d", "D") and r[key] is None and r.get("depths"):  # ragged depths: per request
            continue
        if not isinstance(r[key], kind) or (kind is int and isinstance(r[key], bool)):
            raise OracleError(f"trace file {path}: round {n} {key!r} must be a JSON {kind.__name__}")
    for name, listed in ARRAY_ROWS.items():
        a = arrays.get(f"r{n}_{name}")
        want = len(r[listed])
        got = 0 if a is None else (a.shape[0] if a.ndim else -1)
        if got != want:
            raise OracleError(
                f"trace file {path}: round {n} lists {want} {listed} but its NPZ holds {got} rows of {name}"
            )


class TraceFile(NamedTuple):
    traces: list  # RoundTrace per round
    meta: dict  # the recording's settings (reproduce line, backend, tolerance row, ...)
    model: dict  # model_identity(): preset and seed or checkpoint, config, weights_sha256
    params: dict  # rid -> SamplingParams JSON: each request's sampling parameters


def _check_schema(path, j: dict) -> None:
    """format `loopspec-trace/N` and an integer schema_version, the one this oracle reads."""
    fmt, version = j.get("format"), j.get("schema_version")
    if not (isinstance(fmt, str) and fmt.startswith("loopspec-trace/")):
        raise OracleError(
            f"trace file {path}: format {fmt!r}, expected {FORMAT!r} "
            f"(re-record it with `python -m oracle trace record`)"
        )
    if isinstance(version, bool) or not isinstance(version, int):
        raise OracleError(
            f"trace file {path}: schema_version {version!r} is not an integer "
            f"(this oracle reads schema_version {SCHEMA_VERSION})"
        )
    if version != SCHEMA_VERSION:
        raise OracleError(
            f"trace file {path}: schema_version {version} is not supported (this oracle reads "
            f"schema_version {SCHEMA_VERSION}; re-record it with `python -m oracle trace record`)"
        )
    if fmt != FORMAT:
        raise OracleError(
            f"trace file {path}: format {fmt!r} does not match schema_version {version} (expected {FORMAT!r})"
        )


def _check_model(path, m) -> None:
    """The `model` object's shape (its config's values are checked by the CLI's ModelConfig)."""
    what = "(the model it ran: preset and seed, or checkpoint; config; weights_sha256)"
    if not isinstance(m, dict):
        raise OracleError(f'trace file {path}: malformed: "model" must be an object {what}')
    if not isinstance(m.get("config"), dict):
        raise OracleError(f"trace file {path}: malformed: model.config must be an object (the model's config)")
    sha = m.get("weights_sha256")
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        raise OracleError(f"trace file {path}: malformed: model.weights_sha256 {sha!r} is not 64 hex digits")
    if "checkpoint" in m:
        if not isinstance(m["checkpoint"], str):
            raise OracleError(f"trace file {path}: malformed: model.checkpoint {m['checkpoint']!r} is not a path")
        return
    seed = m.get("seed")
    if not isinstance(m.get("preset"), str) or isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise OracleError(
            f"trace file {path}: malformed: model needs a preset name and an integer seed >= 0, "
            f"or a checkpoint {what}; got preset {m.get('preset')!r}, seed {seed!r}"
        )


def _check_params(path, params) -> dict:
    """The file's `params`: a list of [request id, object] with distinct integer ids."""
    ok = isinstance(params, list) and all(
        isinstance(x, list)
        and len(x) == 2
        and isinstance(x[0], int)
        and not isinstance(x[0], bool)
        and isinstance(x[1], dict)
        for x in params
    )
    if not ok or len({x[0] for x in params}) != len(params):
        raise OracleError(
            f'trace file {path}: malformed: "params" must list [request id, sampling parameters '
            f"object] once per request"
        )
    return {r: p for r, p in params}


def load_trace_file(path) -> TraceFile:
    """Reads PATH and PATH.npz; any departure from the schema (another format or
    schema_version, no model identity or params), a missing NPZ or one whose SHA-256 differs
    from the JSON's, and a trace without rounds, raise OracleError."""
    path = Path(path)
    j = read_json(path, "trace file", "trace")  # a regular file, bounded in size and nesting
    if not isinstance(j, dict):
        raise OracleError(f"trace file {path} holds a JSON {type(j).__name__}, not a trace object")
    _check_schema(path, j)
    _check_model(path, j.get("model"))
    params = _check_params(path, j.get("params"))
    rounds, meta, npz_info = j.get("rounds"), j.get("meta"), j.get("npz")
    if not isinstance(rounds, list):
        raise OracleError(f'trace file {path} has no "rounds" list')
    if not rounds:
        raise OracleError(f"trace file {path} has zero rounds: nothing to compare")
    if not isinstance(meta, dict):
        raise OracleError(
            f'trace file {path}: malformed: "meta" must be an object (the recording\'s settings; {{}} if none)'
        )
    if not isinstance(npz_info, dict) or not isinstance(npz_info.get("sha256"), str):
        raise OracleError(f"trace file {path} does not record its NPZ's sha256")
    npz = npz_path(path)
    if not npz.exists():
        raise OracleError(f"trace file {path}: its arrays file {npz} is missing")
    with open_regular(npz, f"trace file {path}: its arrays file", "trace arrays") as f:
        if sha256_of(f) != npz_info["sha256"]:
            raise OracleError(f"trace file {path}: {npz} is not the NPZ recorded with it (sha256 differs)")
        f.seek(0)
        try:
            with np.load(f, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception as e:  # zipfile, pickle and format errors of a damaged NPZ
            raise OracleError(f"trace file {path}: {npz} is not a readable NPZ ({type(e).__name__})") from None
    traces = []
    for n, r in enumerate(rounds):
        _check_round(path, n, r, arrays)
        try:
            traces.append(RoundTrace.from_json(r, arrays, f"r{n}_"))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise OracleError(f"trace file {path}: round {n} is malformed ({type(e).__name__}: {e})") from None
        problem = request_problem(traces[-1])
        if not problem and n and traces[-1].round <= traces[-2].round:
            problem = f"round number {traces[-1].round} follows round {traces[-2].round} (they increase)"
        if not problem and traces[-1].dtype not in DTYPES:
            problem = f"dtype {traces[-1].dtype!r} is not one of {', '.join(DTYPES)}"
        if problem:
            raise OracleError(f"trace file {path}: round {n} is malformed: {printable(problem)}")
        for r, p in traces[-1].params.items():
            if r in params and p != params[r]:
                raise OracleError(
                    f"trace file {path}: round {n} is malformed: request {r} ran with sampling "
                    f"parameters {p}, the file's params say {params[r]}"
                )
    return TraceFile(traces, meta, j["model"], params)
