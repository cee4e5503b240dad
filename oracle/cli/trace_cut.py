"""`python -m oracle trace cut A --round R [--request I] --out C` (issue 44): the smallest trace that
can still be paired, for a bug report: one round of A (its `round` field R), cut to one request I.
Two cuts of the same round and request (of A and of B) diff as the originals did at that place:

    python -m oracle trace cut a.json --round 0 --request 1 --out a.cut.json
    python -m oracle trace cut b.json --round 0 --request 1 --out b.cut.json
    python -m oracle trace diff a.cut.json b.cut.json

The cut keeps the file's model identity and the request's params, the request's prefix, drafts,
decisions, KV writes, logits and RNG events, each call's rows and draft-head rows of that request
(every call kept, so the KV writes' call ids still name theirs; a call left without rows stays, empty),
and the round's stats recomputed over the cut where a stat is a count of its rows (drafted,
accepted, recurrent_calls, rows_per_call, draft_head_calls, draft_head_rows, kv_writes; the others
are left out). `meta` is A's, plus `cut` {from, round, request} and a `reproduce` line that records A
again into a new file and cuts it. `trace diff`'s failure output names the two cut commands of its
first differing round and request (`cut_lines`).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from .argtypes import check_out_path, int_at_least, subcommand
from ..errors import OracleError, printable
from ..judge.scenario import command
from ..trace_file import save_traces
from ..traces import RoundTrace


def register(tsub, load) -> None:
    """The `cut` subcommand; load(path): the checked trace file (cmd_trace.checked_file)."""
    c = subcommand(
        tsub,
        "cut",
        help="cut a trace file to one round and one request (the smallest trace a diff pairs)",
        description="Write one round of a trace file, cut to one request, with its model identity and "
        "params: the smallest trace file that still pairs with the same cut of another (trace diff), "
        "to attach to a bug report. Exit 0 written, 2 bad input.",
        func=lambda args: cut(args, load),
    )
    c.add_argument("a", metavar="A", help="the trace file to cut (JSON, with A.npz beside it)")
    c.add_argument("--round", type=int_at_least(0), required=True, metavar="R", help="the round (its `round` field)")
    c.add_argument(
        "--request",
        type=int_at_least(0),
        default=None,
        metavar="I",
        help="the request id to keep (default: every request of the round)",
    )
    c.add_argument("--out", required=True, metavar="C", help="the cut trace file (JSON); arrays go to C.npz")


def cut_round(t: RoundTrace, rid) -> RoundTrace:
    """Round trace t with request rid only (rid None: t as it is)."""
    if rid is None:
        return t
    if rid not in t.requests:
        raise OracleError(f"round {t.round} holds requests {list(t.requests)}, not request {rid}")
    return t.restrict([rid])


def cut(args, load) -> int:
    check_out_path(args.out, "--out", inputs=[args.a, args.a + ".npz"], also=[args.out + ".npz"])
    f = load(args.a)
    rounds = [t for t in f.traces if t.round == args.round]
    if not rounds:
        raise OracleError(
            f"trace file {args.a} has no round {args.round} (its rounds: {', '.join(str(t.round) for t in f.traces)})"
        )
    t = cut_round(rounds[0], args.request)
    params = f.params if args.request is None else {args.request: f.params[args.request]}
    line = cut_command(args.a, args.round, args.request, args.out)
    meta = dict(f.meta)
    meta["cut"] = {"from": str(args.a), "round": args.round, "request": args.request}
    meta["reproduce"] = _rerun(f.meta.get("reproduce", ""), line, args.a)
    save_traces(args.out, [t], meta, model=f.model, params=params)
    what = f"round {args.round}" + (f", request {args.request}" if args.request is not None else "")
    print(printable(f"cut {args.a} to {what} ({sum(t.token_counts)} tokens, {len(t.kv_writes)} KV writes): {args.out}"))
    return 0


def cut_command(a, r: int, i, out) -> str:
    return command(
        [
            "trace",
            "cut",
            str(a),
            "--round",
            str(r),
            *(["--request", str(i)] if i is not None else []),
            "--out",
            str(out),
        ]
    )


def _rerun(record: str, cut_line: str, a) -> str:
    """A's `trace record` line into a new file, then the cut of that file (ending `--out C`, as
    trace diff's reproduce line needs); '' where A has no record line."""
    try:
        words = shlex.split(record)
    except ValueError:
        return ""
    if len(words) < 2 or words[-2] != "--out" or "record" not in words:
        return ""
    fresh = str(Path(str(a)).with_suffix("")) + ".full.json"
    rec = record[: -len(shlex.quote(words[-1]))] + shlex.quote(fresh)
    return rec + " && " + cut_line.replace(shlex.quote(str(a)), shlex.quote(fresh), 1)


def cut_path(path, r: int, i) -> str:
    stem = str(Path(path).with_suffix("")) if Path(path).suffix == ".json" else str(path)
    return f"{stem}.round{r}" + (f".request{i}" if i is not None else "") + ".json"


def first_place(v) -> tuple | None:
    """(round, request or None) of the diff verdict's first failed check that names a round."""
    for c in v.failed:
        f = c.get("failure") or {}
        if f.get("round") is not None:
            return int(f["round"]), f.get("request")
    return None


def cut_lines(v, a, b, traces=()) -> list[str]:
    """trace diff's failure lines naming the cut commands of its first differing round and request
    (none where A's traces, `traces`, are one round of one request already)."""
    place = first_place(v)
    if place is None or (len(traces) == 1 and len(traces[0].requests) == 1):
        return []
    r, i = place
    if len(traces) == 1 and i is None:
        return []
    ca, cb = cut_path(a, r, i), cut_path(b, r, i)
    what = f"round {r}" + (f" request {i}" if i is not None else "")
    return [
        f"smallest pair for a bug report ({what}): {cut_command(a, r, i, ca)} && {cut_command(b, r, i, cb)} && "
        + command(["trace", "diff", ca, cb])
    ]
