"""A round's trace (docs/DESIGN.md section 8) and its per-round JSON + NPZ form (`to_json`,
`arrays`, `from_json`); the trace of some of its requests (`restrict`); the depths a request ran
(`depths_of`) and what its logits saw (`seen_in`).

JSON holds everything but the arrays; the NPZ beside it holds KV writes and logits, so an
external engine can emit a trace and have it diffed. A trace file is written and read back,
checked, by oracle/trace_file.py; what makes a round impossible: oracle/trace_problems.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def depths_of(tr, rid) -> tuple[int, int]:
    """(d_i, D_i) of a request: per-request depths where the trace has them, else (d, D)."""
    per = getattr(tr, "depths", None) or {}
    return tuple(per[rid]) if rid in per else (tr.d, tr.D)


def seen_in(tr: RoundTrace, rid, o: int, drafts) -> Seen:
    """What request rid's logits at offset o saw in round trace tr, given the round's drafts
    (the tokens the round started from, then drafts 1..o; phases.seen)."""
    prefix, n = list(tr.prefix.get(rid, ())), tr.generated.get(rid, 0)
    return Seen(tuple(prefix[: len(prefix) - n]), tuple(prefix[len(prefix) - n :]) + tuple(drafts[:o]), o, len(drafts))
