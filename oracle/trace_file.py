"""A trace file read back (docs/cli_inputs.md, "Trace files"): `load_trace_file` reads FILE (JSON)
and FILE.npz through oracle/files.py (regular files of bounded size, JSON of bounded nesting)
and refuses, in one OracleError line, any departure from the schema: another format or
schema_version, no model identity or params, a missing NPZ or one whose SHA-256 differs, a
round with a key missing or of the wrong type, impossible per-request fields or inputs
(traces.request_problem), round numbers that do not increase, an unknown dtype. Writing is
oracle/traces.py's `save_traces`; the reference's modules never read a trace file, so this
reader sits above them."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from .errors import OracleError, printable
from .files import open_regular, read_json
from .traces import (
    ARRAY_ROWS,
    DTYPES,
    FORMAT,
    ROUND_KEYS,
    SCHEMA_VERSION,
    RoundTrace,
    npz_path,
    request_problem,
    sha256_of,
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
