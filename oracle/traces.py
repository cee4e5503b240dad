"""A round's trace (docs/DESIGN.md section 8) and its JSON + NPZ form.

JSON holds everything but the arrays; the NPZ beside it holds KV writes and logits, so an
external engine can emit a trace and have it diffed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .processors import Seen
from .rng_events import events_from_json, events_to_json

KVKey = tuple  # (request, position, depth, layer)


@dataclass(slots=True)
class RoundTrace:
    mode: str  # "block" | "loop" | a backend's name
    round: int
    policy: str
    d: int | None  # draft loops every request shares (None: ragged depths)
    D: int | None  # target loops every request shares (None: ragged depths)
    requests: list  # request ids, in batch order
    token_counts: list[int]
    prefix: dict = field(default_factory=dict)  # rid -> committed tokens before the round
    calls: list = field(default_factory=list)  # [{"rows": [[rid, offset, depth]], "draft_head": [[rid, offset]]}]
    kv_writes: dict = field(default_factory=dict)  # (rid, pos, depth, layer) -> (call, k, v)
    draft_logits: dict = field(default_factory=dict)  # (rid, offset) -> [V]
    verify_logits: dict = field(default_factory=dict)  # (rid, offset) -> [V]
    rng_events: list = field(default_factory=list)  # [RngEvent]
    drafts: dict = field(default_factory=dict)  # rid -> draft tokens of offsets 1..K
    accepted: dict = field(default_factory=dict)  # rid -> accepted drafts
    emitted: dict = field(default_factory=dict)  # rid -> emitted tokens: the a+1 decisions
    stats: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)  # rid -> SamplingParams.to_json()
    dtype: str = "float32"
    depths: dict = field(default_factory=dict)  # rid -> [d_i, D_i] (empty: every request (d, D))
    committed: dict = field(default_factory=dict)  # rid -> tokens kept: emitted cut after a stop
    # token or at max_tokens (missing: all emitted)
    generated: dict = field(default_factory=dict)  # rid -> tokens generated before the round
    finished: dict = field(default_factory=dict)  # rid -> "stop" | "length": left the batch

    @classmethod
    def begin(cls, mode: str, round_idx: int, policy: str, d, D, reqs, counts, depths, full: bool = True):
        """The trace of a round about to run: reqs hold rid, params and tokens (committed before
        the round), depths (d_i, D_i) per request. full=False: no params or prefixes (a
        benchmark's traces). Both trace builders start here (oracle/phases.py, kernels/collect.py)."""
        tr = cls(
            mode,
            round_idx,
            policy,
            d,
            D,
            [r.rid for r in reqs],
            list(counts),
            depths={r.rid: list(dp) for r, dp in zip(reqs, depths)},
        )
        if full:
            tr.prefix = {r.rid: list(r.tokens) for r in reqs}
            tr.params = {r.rid: r.params.to_json() for r in reqs}
        return tr

    def record(
        self,
        rid,
        drafts: list,
        accepted: int,
        emitted: list,
        kept: int,
        generated: int,
        finished: str | None,
        events: list,
    ) -> None:
        """One request's outcome: its drafts, accepted count, the a+1 emitted tokens of which
        the first `kept` are committed, tokens generated before the round, why it finished (or
        None), and its RNG events of the round (appended in batch order)."""
        self.drafts[rid], self.accepted[rid], self.emitted[rid] = drafts, accepted, emitted
        self.committed[rid], self.generated[rid] = emitted[:kept], generated
        if finished:
            self.finished[rid] = finished
        self.rng_events.extend(events)

    def kept(self, rid) -> list:
        """The tokens the round committed for rid."""
        return self.committed.get(rid, self.emitted.get(rid, []))

    def request_depths(self) -> list[tuple[int, int]]:
        """(d_i, D_i) per request in batch order."""
        return [tuple(self.depths[r]) if r in self.depths else (self.d, self.D) for r in self.requests]

    # ---- serialization ----
    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "round": self.round,
            "policy": self.policy,
            "d": self.d,
            "D": self.D,
            "dtype": self.dtype,
            "requests": list(self.requests),
            "token_counts": list(self.token_counts),
            "prefix": [[r, list(t)] for r, t in self.prefix.items()],
            "calls": self.calls,
            "kv_writes": [[list(k), int(c)] for k, (c, _, _) in self.kv_writes.items()],
            "draft_logits": [list(k) for k in self.draft_logits],
            "verify_logits": [list(k) for k in self.verify_logits],
            "rng_events": events_to_json(self.rng_events),
            "drafts": [[r, list(t)] for r, t in self.drafts.items()],
            "accepted": [[r, int(a)] for r, a in self.accepted.items()],
            "emitted": [[r, list(t)] for r, t in self.emitted.items()],
            "stats": self.stats,
            "params": [[r, p] for r, p in self.params.items()],
            "depths": [[r, list(x)] for r, x in self.depths.items()],
            "committed": [[r, list(t)] for r, t in self.committed.items()],
            "generated": [[r, int(n)] for r, n in self.generated.items()],
            "finished": [[r, why] for r, why in self.finished.items()],
        }

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        out = {}
        if self.kv_writes:
            out[prefix + "kv_k"] = np.stack([k for _, k, _ in self.kv_writes.values()])
            out[prefix + "kv_v"] = np.stack([v for _, _, v in self.kv_writes.values()])
        if self.draft_logits:
            out[prefix + "draft_logits"] = np.stack(list(self.draft_logits.values()))
        if self.verify_logits:
            out[prefix + "verify_logits"] = np.stack(list(self.verify_logits.values()))
        return out

    @staticmethod
    def from_json(j: dict, arrays: dict, prefix: str) -> "RoundTrace":
        t = RoundTrace(j["mode"], j["round"], j["policy"], j["d"], j["D"], j["requests"], j["token_counts"])
        t.dtype = j.get("dtype", "float32")
        t.prefix = {r: list(x) for r, x in j["prefix"]}
        t.calls = j["calls"]
        kk, vv = arrays.get(prefix + "kv_k"), arrays.get(prefix + "kv_v")
        t.kv_writes = {tuple(key): (call, kk[n], vv[n]) for n, (key, call) in enumerate(j["kv_writes"])}
        dl, vl = arrays.get(prefix + "draft_logits"), arrays.get(prefix + "verify_logits")
        t.draft_logits = {tuple(k): dl[n] for n, k in enumerate(j["draft_logits"])}
        t.verify_logits = {tuple(k): vl[n] for n, k in enumerate(j["verify_logits"])}
        t.rng_events = events_from_json(j["rng_events"])
        t.drafts = {r: list(x) for r, x in j["drafts"]}
        t.accepted = {r: a for r, a in j["accepted"]}
        t.emitted = {r: list(x) for r, x in j["emitted"]}
        t.stats = j["stats"]
        t.params = {r: p for r, p in j.get("params", [])}
        t.depths = {r: list(x) for r, x in j.get("depths", [])}
        t.committed = {r: list(x) for r, x in j.get("committed", [])}
        t.generated = {r: n for r, n in j.get("generated", [])}
        t.finished = {r: why for r, why in j.get("finished", [])}
        return t


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


def depths_of(tr, rid) -> tuple[int, int]:
    """(d_i, D_i) of a request: per-request depths where the trace has them, else (d, D)."""
    per = getattr(tr, "depths", None) or {}
    return tuple(per[rid]) if rid in per else (tr.d, tr.D)


def npz_path(path) -> Path:
    return Path(str(path) + ".npz")


def sha256_of(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    from .errors import OracleError

    path = Path(path)
    if not isinstance(model, dict) or "config" not in model or "weights_sha256" not in model:
        raise OracleError(
            "save_traces: give model=oracle.traces.model_identity(model, preset, seed | checkpoint): "
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
    with open(npz, "wb") as f:  # np.savez would append .npz to a str path
        np.savez_compressed(f, **arrays)
    path.write_text(
        json.dumps(
            {
                "format": FORMAT,
                "schema_version": SCHEMA_VERSION,
                "model": model,
                "params": [[r, p] for r, p in params.items()],
                "npz": {"file": npz.name, "sha256": sha256_of(npz)},
                "meta": meta or {},
                "rounds": [t.to_json() for t in traces],
            }
        )
        + "\n"
    )


def _check_round(path, n: int, r, arrays: dict) -> None:
    from .errors import OracleError

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


FINISH_REASONS = ("stop", "length")
PER_REQUEST = ("prefix", "drafts", "accepted", "emitted", "committed", "generated", "finished", "params", "depths")


def seen_in(tr: RoundTrace, rid, o: int, drafts) -> Seen:
    """What request rid's logits at offset o saw in round trace tr, given the round's drafts
    (the tokens the round started from, then drafts 1..o; phases.seen)."""
    prefix, n = list(tr.prefix.get(rid, ())), tr.generated.get(rid, 0)
    return Seen(tuple(prefix[: len(prefix) - n]), tuple(prefix[len(prefix) - n :]) + tuple(drafts[:o]), o, len(drafts))


def request_problem(t: RoundTrace) -> str | None:
    """What makes a round's per-request fields impossible, or None: duplicate or non-integer
    request ids, token counts that are not one positive integer per request, depths outside
    1 <= d < D, a field naming a request the round does not hold, committed tokens that are
    not a prefix of the emitted ones, an unknown finish reason."""
    reqs = t.requests
    if any(isinstance(r, bool) or not isinstance(r, int) for r in reqs) or len(set(reqs)) != len(reqs):
        return f"requests {reqs} are not distinct integer ids"
    if len(t.token_counts) != len(reqs) or any(
        isinstance(T, bool) or not isinstance(T, int) or T < 1 for T in t.token_counts
    ):
        return f"token_counts {t.token_counts} are not one integer >= 1 per request {reqs}"
    for name in PER_REQUEST:
        extra = [r for r in getattr(t, name) if r not in reqs]
        if extra:
            return f"{name} names request {extra[0]!r}, which is not one of the round's requests {reqs}"
    pairs = [("d, D", (t.d, t.D))] if t.d is not None or t.D is not None else []
    pairs += [(f"depths of request {r}", tuple(x)) for r, x in t.depths.items()]
    for what, pair in pairs:
        if (
            len(pair) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) for x in pair)
            or not 1 <= pair[0] < pair[1]
        ):
            return f"{what} {list(pair)}: expected integers 1 <= d < D"
    if t.d is None and any(r not in t.depths for r in reqs):
        return "d and D are null but not every request has its own depths"
    for r, kept in t.committed.items():
        if list(kept) != list(t.emitted.get(r, []))[: len(kept)]:
            return f"request {r}: committed {list(kept)} is not a prefix of emitted {t.emitted.get(r)}"
    for r, why in t.finished.items():
        if why not in FINISH_REASONS:
            return f"request {r}: finish reason {why!r} (known: {', '.join(FINISH_REASONS)})"
    return None


class TraceFile(NamedTuple):
    traces: list  # RoundTrace per round
    meta: dict  # the recording's settings (reproduce line, backend, tolerance row, ...)
    model: dict  # model_identity(): preset and seed or checkpoint, config, weights_sha256
    params: dict  # rid -> SamplingParams JSON: each request's sampling parameters


def _check_schema(path, j: dict) -> None:
    """format `loopspec-trace/N` and an integer schema_version, the one this oracle reads."""
    from .errors import OracleError

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
    from .errors import OracleError

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
    from .errors import OracleError

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


def load_traces(path) -> tuple[list[RoundTrace], dict]:
    """(traces, meta) of load_trace_file."""
    f = load_trace_file(path)
    return f.traces, f.meta


def load_trace_file(path) -> TraceFile:
    """Reads PATH and PATH.npz; any departure from the schema (another format or
    schema_version, no model identity or params), a missing NPZ or one whose SHA-256 differs
    from the JSON's, and a trace without rounds, raise OracleError."""
    from .errors import OracleError

    path = Path(path)
    if not path.exists():
        raise OracleError(f"trace file {path} does not exist")
    if path.is_dir():
        raise OracleError(f"trace file {path} is a directory")
    try:
        j = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OracleError(f"trace file {path} is not valid JSON ({e})") from None
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
    if not npz.is_file():
        raise OracleError(f"trace file {path}: its arrays file {npz} is missing")
    if sha256_of(npz) != npz_info["sha256"]:
        raise OracleError(f"trace file {path}: {npz} is not the NPZ recorded with it (sha256 differs)")
    try:
        with np.load(npz, allow_pickle=False) as z:
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
        if problem:
            raise OracleError(f"trace file {path}: round {n} is malformed: {problem}")
        for r, p in traces[-1].params.items():
            if r in params and p != params[r]:
                raise OracleError(
                    f"trace file {path}: round {n} is malformed: request {r} ran with sampling "
                    f"parameters {p}, the file's params say {params[r]}"
                )
    return TraceFile(traces, meta, j["model"], params)
