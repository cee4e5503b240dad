"""`bench c-table`: c(M) of one recurrent call over M rows, one M at a time, with the noise
bound its repeats' spread is held to; and the row counts a sweep's rounds need."""

from __future__ import annotations

import json

from oracle.cli.argtypes import write_out
from oracle.cli.environment import set_threads
from oracle.config import preset
from oracle.errors import OracleError
from oracle.progress import progress, warn
from oracle.schedule import plan

from .checks import DEFAULT_ROWS, device_of, torch_bench


def needed_rows(batches, K, d, D) -> tuple[list[int], list[int], dict[int, list[int]]]:
    """Recurrent-call and head-call row counts of uniform rounds at each C (for the tables),
    and the row counts of calls whose rows share KV planes, {rows per plane r: [M, ...]}
    (measured at one row per plane too, for the prediction that ignores the sharing)."""
    from oracle.cost import planes

    rec, head, shared = set(), set(), {}
    for C in batches:
        for mode in ("block", "loop"):
            s = plan(mode, [K + 1] * C, d, D)
            for c in s.calls:
                M, P = len(c.rows), planes(c)
                rec.add(M)  # c_ms at every row count (the one-row-per-plane prediction)
                if M != P:  # uniform rounds: M is a multiple of P
                    shared.setdefault(M // P, set()).add(M)
            head |= {n for n in s.draft_head_counts() if n} | {len(s.verify_head)}
    return sorted(rec), sorted(head), {r: sorted(m) for r, m in sorted(shared.items())}


def measure_ctable(calls, args, rows, repeats: int, shared: dict | None = None, kv_capacity: int | None = None) -> dict:
    """bench.calls.measure_c_table one M at a time, so a progress bar shows; the same table.
    shared {r: [M, ...]}: also c(M) with r rows per KV plane, under "c_ms_shared"[r].
    kv_capacity: positions per KV plane (default --context + 1)."""
    jobs = [(1, M) for M in sorted(set(rows))] + [(r, M) for r, ms in sorted((shared or {}).items()) for M in ms]
    table, out = None, {}
    spread = {}
    for r, M in progress(jobs, "c(M)", args.quiet):
        t = calls.measure_c_table(
            args.preset,
            [M],
            args.context,
            device=device_of(args),
            repeats=repeats,
            rows_per_plane=r,
            kv_capacity=kv_capacity,
        )
        out.setdefault(r, {}).update(t["c_ms"])
        key = str(M) if r == 1 else f"{M}@{M // r}"
        spread[key] = t["spread"][str(M)]
        path = {**(table or {}).get("path", {}), key: t["path"][str(M)]}
        table = {**t, "path": path}
    table["spread"] = spread
    table["c_ms"] = out.pop(1, {})
    if out:
        table["c_ms_shared"] = {str(r): ms for r, ms in out.items()}
    table.pop("rows_per_plane", None)
    return table


# A c-table whose repeats spread beyond this, (q3 - q1) / median at any M, measured a busy
# machine, not the kernels (144 ms medians instead of 1 ms on a loaded 2-core CPU)
NOISE_BOUND = 0.10


def noise_problem(table: dict) -> str | None:
    """'(q3-q1)/median 0.43 at M=8 > 0.10' for the widest spread beyond NOISE_BOUND, else None."""
    spread = table.get("spread") or {}
    if not spread:
        return None
    key = max(spread, key=spread.get)
    if spread[key] <= NOISE_BOUND:
        return None
    n = table.get("threads")
    return f"(q3-q1)/median {spread[key]:.2f} at M={key} > {NOISE_BOUND:.2f}, {n} thread{'' if n == 1 else 's'}"


def cmd_ctable(args) -> int:
    calls, _ = torch_bench()
    threads = set_threads(args, preset(args.preset).hidden_size)
    rows = sorted(set(args.rows or DEFAULT_ROWS))
    rpp = sorted(set(args.rows_per_plane))
    if min(rpp) < 1:
        raise OracleError(f"--rows-per-plane {min(rpp)}: at least one row per KV plane")
    shared = {r: [M for M in rows if M % r == 0] for r in rpp if r > 1}  # each plane holds r rows
    empty = [r for r, ms in shared.items() if not ms]
    if empty:
        raise OracleError(f"--rows-per-plane {empty[0]}: no row count in --rows is a multiple of it")
    if max(rpp) > args.context + 1:
        raise OracleError(f"--rows-per-plane {max(rpp)}: more rows per plane than --context + 1 positions")
    table = measure_ctable(calls, args, rows, args.repeats, shared, args.kv_capacity) | threads
    noisy = noise_problem(table)
    if noisy and args.out and not args.force:
        raise OracleError(
            f"bench c-table: the repeats spread beyond the noise bound ({noisy}): the machine "
            f'is busy; rerun on an idle one, or pass --force to write it marked "noisy" '
            f"(`cost` then refuses it unless --force)"
        )
    if noisy:
        table["noisy"] = noisy
        if not args.out:  # printed, not written: shown with its spread flagged
            warn(
                f"bench c-table: the repeats spread beyond the noise bound ({noisy}): the table is marked "
                f'"noisy"; `cost` refuses it unless --force, and --out writes it only with --force'
            )
    text = json.dumps(table, indent=1)
    if args.out:
        write_out(args.out, text, f"c(M) for {len(rows)} row counts M={rows[0]}..{rows[-1]} on {table['device']}")
    else:
        print(text)
    return 0
