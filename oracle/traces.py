"""A round's trace (docs/DESIGN.md section 8) and its JSON + NPZ form.

JSON holds everything but the arrays; the NPZ beside it holds KV writes and logits, so an
external engine can emit a trace and have it diffed. Written here (`save_traces`); read back,
checked, by oracle/trace_file.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .processors import Seen
from .rng_events import POLICIES, PURPOSES, events_from_json, events_to_json

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

    def restrict(self, rids, batch: bool = True) -> "RoundTrace":
        """The trace of some requests of the round (`rids`, kept in batch order): their per-request
        fields, KV writes, logits and RNG events; with batch, every call with only their rows
        (a call left without rows stays, so the KV writes' call ids still name theirs) and the
        stats recomputed over them where a stat is a count of their rows (COUNTED; the others
        left out); batch=False: no calls and no stats (what depends on how the batch ran)."""
        keep = [r for r in self.requests if r in set(rids)]
        counts = [self.token_counts[self.requests.index(r)] for r in keep]
        out = RoundTrace(self.mode, self.round, self.policy, self.d, self.D, keep, counts, dtype=self.dtype)
        for name in PER_REQUEST:
            setattr(out, name, {r: v for r, v in getattr(self, name).items() if r in keep})
        out.kv_writes = {k: v for k, v in self.kv_writes.items() if k[0] in keep}
        out.draft_logits = {k: v for k, v in self.draft_logits.items() if k[0] in keep}
        out.verify_logits = {k: v for k, v in self.verify_logits.items() if k[0] in keep}
        out.rng_events = [e for e in self.rng_events if e.request in keep]
        if not batch:
            return out
        out.calls = [
            {
                **c,
                "rows": [r for r in c["rows"] if r[0] in keep],
                "draft_head": [h for h in c["draft_head"] if h[0] in keep],
            }
            for c in self.calls
        ]
        rows = [len(c["rows"]) for c in out.calls if c["rows"]]
        own = {
            "drafted": sum(T - 1 for T in out.token_counts),
            "accepted": sum(out.accepted.values()),
            "recurrent_calls": len(rows),
            "rows_per_call": rows,
            "draft_head_calls": sum(1 for c in out.calls if c["draft_head"]),
            "draft_head_rows": sum(len(c["draft_head"]) for c in out.calls),
            "kv_writes": len(out.kv_writes),
        }
        out.stats = {k: own[k] for k in COUNTED if k in (self.stats or {})}
        return out

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


FINISH_REASONS = ("stop", "length")
DTYPES = ("float32", "bfloat16", "float16", "float64")  # a round's `dtype`: what its values were computed in
PER_REQUEST = ("prefix", "drafts", "accepted", "emitted", "committed", "generated", "finished", "params", "depths")
# the stats that count rows of requests (RoundTrace.restrict recomputes them over the kept ones)
COUNTED = (
    "drafted",
    "accepted",
    "recurrent_calls",
    "rows_per_call",
    "draft_head_calls",
    "draft_head_rows",
    "kv_writes",
)


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
    if not _count(t.round, 0):
        return f"round number {t.round!r} is not an integer >= 0"
    if t.policy not in POLICIES:
        return f"policy {t.policy!r} is not an RNG policy ({', '.join(POLICIES)})"
    if not all(_count(r, 0) for r in reqs) or len(set(reqs)) != len(reqs):
        return f"requests {reqs} are not distinct integer ids >= 0"
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
    problem = input_problem(t)
    if problem:
        return problem
    for r, kept in t.committed.items():
        if list(kept) != list(t.emitted.get(r, []))[: len(kept)]:
            return f"request {r}: committed {list(kept)} is not a prefix of emitted {t.emitted.get(r)}"
    for r, why in t.finished.items():
        if why not in FINISH_REASONS:
            return f"request {r}: finish reason {why!r} (known: {', '.join(FINISH_REASONS)})"
    return None


def _count(x, low: int) -> bool:
    """An integer >= low (not a bool)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= low


def _key_problem(key, n: int, counts: dict, depth_of: dict) -> str | None:
    """Why a row or key of a round is impossible, or None: n = 2 (request, offset), 3 (request,
    offset, depth: a call's row) or 4 (request, position, depth, layer: a KV write)."""
    if not isinstance(key, (list, tuple)) or len(key) != n or not all(_count(x, 0) for x in key[1:]):
        return f"is not {n} integers >= 0 after the request id"
    rid = key[0]
    if rid not in counts:
        return f"names request {rid!r}, not one of the round's requests"
    if n < 4 and key[1] >= counts[rid]:
        return f"has offset {key[1]}, outside request {rid}'s 0..{counts[rid] - 1}"
    if n >= 3 and key[2] >= depth_of[rid][1]:
        return f"has depth {key[2]}, outside request {rid}'s 0..{depth_of[rid][1] - 1}"
    return None


def input_problem(t: RoundTrace) -> str | None:
    """What in a round's inputs and keys is impossible, as the same value on the command line would
    be: tokens before the round that are not token ids >= 0, a generated count outside
    0..len(prefix), calls, logits and KV writes naming a request the round does not hold or an
    offset or depth outside the request's, and RNG events that are not events of this round (a
    request it holds, its round number, a known purpose, an offset below the request's token
    count, a uniform in [0, 1))."""
    counts = dict(zip(t.requests, t.token_counts))
    for r, toks in t.prefix.items():
        bad = [x for x in toks if not _count(x, 0)]
        if bad:
            return f"request {r}: prefix token {bad[0]!r} is not a token id >= 0"
    for r, n in t.generated.items():
        if not _count(n, 0) or n > len(t.prefix.get(r, ())):
            return f"request {r}: generated {n!r} is not a count in 0..{len(t.prefix.get(r, ()))} (its prefix)"
    depth_of = dict(zip(t.requests, t.request_depths()))
    for k, call in enumerate(t.calls):
        rows, heads = (call.get("rows"), call.get("draft_head")) if isinstance(call, dict) else (None, None)
        if not isinstance(rows, (list, tuple)) or not isinstance(heads, (list, tuple)):
            return f"call {k} is not an object of rows and draft_head lists"
        for row in rows:
            why = _key_problem(row, 3, counts, depth_of)
            if why:
                return f"call {k}: row {row!r} {why}"
        for row in heads:
            why = _key_problem(row, 2, counts, depth_of)
            if why:
                return f"call {k}: draft-head row {row!r} {why}"
    for name in ("draft_logits", "verify_logits"):
        for key in getattr(t, name):
            why = _key_problem(key, 2, counts, depth_of)
            if why:
                return f"{name} key {list(key)!r} {why}"
    for key in t.kv_writes:
        why = _key_problem(key, 4, counts, depth_of)
        if why:
            return f"KV write {list(key)!r} {why}"
    for k, e in enumerate(t.rng_events):
        what = f"RNG event {k}"
        if e.request not in counts:
            return f"{what} names request {e.request!r}, not one of the round's requests {t.requests}"
        if e.round != t.round or isinstance(e.round, bool):
            return f"{what}: round {e.round!r} in round {t.round}"
        if not _count(e.seq, 0):
            return f"{what}: seq {e.seq!r} is not an integer >= 0"
        if e.purpose not in PURPOSES:
            return f"{what}: purpose {e.purpose!r} is not one of {', '.join(PURPOSES)}"
        if not _count(e.offset, 0) or e.offset >= counts[e.request]:
            return f"{what}: offset {e.offset!r} is outside 0..{counts[e.request] - 1} (request {e.request}'s offsets)"
        v = e.value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            return f"{what}: value {v!r} is not a uniform in [0, 1)"
        if not isinstance(e.used, bool):
            return f"{what}: used {e.used!r} is not true or false"
    return None
