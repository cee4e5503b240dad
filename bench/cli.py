"""`python -m oracle bench c-table | rounds | sweep` on the torch backend (docs/DESIGN.md
section 10). c-table: c(M) of one recurrent call over M rows (graph replay, median).
rounds: paired block/loop generations. sweep: both, per C, with the predicted ratio from
the c-table measured in the same run.

oracle/cli/__init__.py loads this command by name (its COMMANDS registry, like the backends' NAMED),
so imports run one way: bench -> kernels and oracle, never the reverse."""

from __future__ import annotations

import json

from oracle.cli import limits
from oracle.cli.argtypes import (
    add_threads_option,
    command_parser,
    check_out_path,
    csv_ints,
    finite_float,
    int_at_least,
    write_out,
)
from .stats import paired_summary
from oracle.config import preset
from oracle.cli.environment import set_threads
from oracle.cli.step_options import (
    add_filter_options,
    add_processor_options,
    filter_fields,
    given_filter,
    processor_fields,
)
from oracle.errors import OracleError
from oracle.progress import add_quiet_option, progress, warn
from oracle.sampling import SamplingParams
from oracle.schedule import plan, validate


def _torch_bench():
    """bench.calls and bench.rounds (which import torch and kernels), imported on use: `--help`
    and the option checks need no torch."""
    try:
        from . import calls, rounds
    except ImportError as e:
        raise OracleError(f"bench needs torch and the kernels package ({e})") from None
    return calls, rounds


def device_name(text: str) -> str:
    """argparse type: cpu, cuda or cuda:N."""
    import argparse

    head, _, index = text.partition(":")
    if head not in ("cpu", "cuda") or (index and (head != "cuda" or not index.isdigit())):
        raise argparse.ArgumentTypeError(f"unknown device {text!r} (known: cpu, cuda, cuda:N)")
    return text


def _device(args) -> str:
    import torch

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise OracleError("bench: no CUDA device is available (use --device cpu for a small preset)")
        index = int(args.device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise OracleError(f"--device {args.device}: only {torch.cuda.device_count()} CUDA device(s)")
    return args.device


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


DEFAULT_ROWS = [1, 2, 3, 4, 5, 8, 10, 12, 16, 20, 24, 25, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 512, 640]
MAX_ROWS = 4096  # c-table row counts M
MAX_CONTEXT = 32768  # keys per row
MAX_TOKENS = 4096  # generated tokens per request in rounds/sweep
MAX_BATCH = 1024  # concurrency C in rounds/sweep
MAX_CPU_PARAMS = 50e6  # larger models are benchmarked on CUDA only


def check_bench_args(args) -> None:
    """Every option of bench c-table | rounds | sweep, and the LOOPSPEC_* variables (their owner's
    check_env), before torch does any work."""
    from kernels.options import check_env
    from oracle.config import preset

    check_env()

    cfg = preset(args.preset)
    if args.device == "cpu" and not args.allow_large and limits.params_per_row(cfg) > MAX_CPU_PARAMS:
        raise OracleError(
            f"bench on the CPU with preset {args.preset} ({limits.params_per_row(cfg) / 1e6:.0f}M "
            f"parameters per row) would take hours; use --device cuda, a smaller preset, or "
            f"{limits.ALLOW}"
        )
    if args.out is not None:
        check_out_path(args.out)
    if not args.allow_large and args.context > MAX_CONTEXT:
        limits.refuse("--context", args.context, MAX_CONTEXT)
    if args.bench_command == "c-table":
        if args.kv_capacity is not None and args.kv_capacity < args.context + 1:
            raise OracleError(
                f"--kv-capacity {args.kv_capacity}: a KV plane must hold the --context {args.context} "
                f"positions and the call's own, at least {args.context + 1}"
            )
        if args.kv_capacity is not None and not args.allow_large and args.kv_capacity > MAX_CONTEXT + 1:
            limits.refuse("--kv-capacity", args.kv_capacity, MAX_CONTEXT + 1)
        if args.rows is not None and min(args.rows) < 1:
            raise OracleError(f"--rows: row count {min(args.rows)} must be >= 1")
        if not args.allow_large and max(args.rows or DEFAULT_ROWS) > MAX_ROWS:
            limits.refuse("--rows: row count M", max(args.rows), MAX_ROWS)
    else:
        _common(args)
        if not args.allow_large and max(args.batch) > MAX_BATCH:
            limits.refuse("--batch: concurrency C", max(args.batch), MAX_BATCH)
        limits.check_counts([args.k + 1], args.target_loops, args.allow_large)
        given = given_filter(args)
        if args.temperature == 0 and given:
            raise OracleError(
                f"{given} filters sampled tokens; with --temperature 0 (the default) every "
                f"request is greedy and it has no effect: drop it or give a temperature > 0"
            )
        if args.target_loops > cfg.total_loops:
            warn(
                f"-D {args.target_loops} is beyond the {cfg.total_loops} loops {args.preset} was trained with "
                f"(total_ut_steps); the timing holds, its logits past depth {cfg.total_loops - 1} would be "
                f"extrapolation"
            )
        if not args.allow_large and args.tokens > MAX_TOKENS:
            limits.refuse("--tokens", args.tokens, MAX_TOKENS)
    _device(args)


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
            device=_device(args),
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
    calls, _ = _torch_bench()
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


def _params(args) -> SamplingParams:
    return SamplingParams(args.temperature, **filter_fields(args), **processor_fields(args))


def _arm_summary(stats: list[dict]) -> dict:
    import statistics

    med = lambda k: statistics.median(s[k] for s in stats)
    return {
        "ms_per_round": med("ms_per_round"),
        "tokens_per_s": med("tokens_per_s"),
        "acceptance": med("acceptance"),
        "host_ms": {k: statistics.median(s["host_ms"][k] for s in stats) for k in stats[0]["host_ms"]},
        "device_ms": None if stats[0]["device_ms"] is None else med("device_ms"),
        "rounds": med("rounds"),
        **{k: sum(s[k] for s in stats) for k in ("graph_captures", "graph_replays", "graph_fallbacks")},
    }


def paired(args, w, C) -> dict:
    _, br = _torch_bench()
    arms = br.paired_rounds(
        w,
        C,
        args.k,
        args.draft_loops,
        args.target_loops,
        args.tokens,
        args.repeats,
        args.context,
        _params(args),
        in_flight=args.in_flight,
        max_batch_size=args.cuda_graph_max_batch_size,
        max_graphs=args.cuda_graph_max_graphs,
    )
    out = {"batch": C, "block": _arm_summary(arms["block"]), "loop": _arm_summary(arms["loop"])}
    out |= paired_summary([s["ms_per_round"] for s in arms["block"]], [s["ms_per_round"] for s in arms["loop"]])
    out["fallbacks"] = out["block"]["graph_fallbacks"] + out["loop"]["graph_fallbacks"]
    return out


def _print_paired(r: dict, allow_fallback: bool) -> None:
    C = r["batch"]
    for arm in ("block", "loop"):
        a = r[arm]
        print(
            f"C={C:4d} {arm:5s}: {a['ms_per_round']:8.3f} ms/round  {a['tokens_per_s']:9.1f} tok/s  "
            f"acceptance {a['acceptance']:.3f}  graphs: {a['graph_captures']} captures, {a['graph_replays']} "
            f"replays, {a['graph_fallbacks']} fallbacks; host ms/round: "
            + ", ".join(f"{k} {v:.2f}" for k, v in a["host_ms"].items())
            + ("" if a["device_ms"] is None else f"; device {a['device_ms']:.2f} ms/round")
        )
    if r["fallbacks"] and not allow_fallback:
        print(
            f"C={C:4d} no comparison: {r['fallbacks']} graph fallbacks (eager calls) in the timed repeats; "
            f"raise --cuda-graph-max-batch-size/--cuda-graph-max-graphs or pass --allow-fallback"
        )
        return
    lo, hi = r["ratio_ci95"]
    q1, q3 = r["ratio_quartiles"]
    print(
        f"C={C:4d} block/loop ms-per-round ratio: median {r['ratio_median']:.4f}  95% CI [{lo:.4f}, {hi:.4f}] "
        f"(width {hi - lo:.4f})  quartiles [{q1:.4f}, {q3:.4f}]  (> 1: loop faster)"
    )


def acceptance_note(rows: list[dict]) -> str | None:
    """Why every arm accepted nothing, when it did not: bench runs seeded random weights."""
    if rows and all(r[arm]["acceptance"] == 0 for r in rows for arm in ("block", "loop")):
        return (
            "note: acceptance is 0 at every C: bench runs seeded random weights (bench/rounds.py "
            "random_weights), whose d-loop drafts rarely match the D-loop verification; each round "
            "still drafts K tokens and verifies K+1, so the times are a round's, at one token per round"
        )
    return None


def _common(args):
    validate([args.k + 1], args.draft_loops, args.target_loops)
    if min(args.batch, default=0) < 1:
        raise OracleError("--batch values must be >= 1")
    if args.repeats < 2:
        raise OracleError("--repeats must be >= 2 (a paired comparison needs repeats)")
    if args.tokens < 1 or args.context < 1:
        raise OracleError("--tokens and --context must be >= 1")
    if args.in_flight < 1:
        raise OracleError(f"--in-flight {args.in_flight}: at least one round must be in flight")
    _params(args)  # temperature and the filters


def cmd_rounds(args) -> int:
    _common(args)
    _, br = _torch_bench()
    threads = set_threads(args, preset(args.preset).hidden_size)
    w = br.random_weights(args.preset, _device(args))
    results = [paired(args, w, C) for C in progress(args.batch, "paired rounds per C", args.quiet)]
    if args.json:
        print(json.dumps({"rows": results, **threads}))
    else:
        for r in results:
            _print_paired(r, args.allow_fallback)
        if acceptance_note(results):
            print(acceptance_note(results))
    bad = [r for r in results if r["fallbacks"]] if not args.allow_fallback else []
    return 1 if bad else 0


def cmd_sweep(args) -> int:
    """c-table and head table measured in this run, then paired rounds per C; predicted vs measured."""
    from oracle.cost import compare_rounds, ctable_from_dict

    _common(args)
    calls, br = _torch_bench()
    threads = set_threads(args, preset(args.preset).hidden_size)
    dev = _device(args)
    rec_rows, head_rows, shared = needed_rows(args.batch, args.k, args.draft_loops, args.target_loops)
    # c(M) at the rounds' own KV capacity (at M >= 2 it moves c(M) on the H200: docs/results.md)
    ct = (
        measure_ctable(
            calls,
            args,
            rec_rows,
            args.repeats_ctable,
            shared,
            br.session_kv_capacity(args.context, args.tokens, args.k),
        )
        | threads
    )  # as bench c-table writes it (and the noise line names the threads)
    w = br.random_weights(args.preset, dev)
    ht = br.measure_head_table(w, head_rows, repeats=args.repeats_ctable)
    out = {
        "preset": args.preset,
        "K": args.k,
        "d": args.draft_loops,
        "D": args.target_loops,
        "context_len": args.context,
        "tokens": args.tokens,
        "repeats": args.repeats,
        "in_flight": args.in_flight,
        "ctable": ct,
        "head_table": ht,
        "rows": [],
        **threads,
    }
    if noise_problem(ct):
        ct["noisy"] = noise_problem(ct)
        warn(
            f"bench sweep: the c-table's repeats spread beyond the noise bound ({ct['noisy']}); its predictions "
            f"are marked noisy"
        )
    c, h = ctable_from_dict(ct), ctable_from_dict(ht)
    # the model before shared planes, for comparison: its c(M) is ct's, already warned about
    c_one = ctable_from_dict({"c_ms": ct["c_ms"]}, warn_drops=False)
    for C in progress(args.batch, "paired rounds per C", args.quiet):
        r = paired(args, w, C)
        pred = compare_rounds([args.k + 1] * C, args.draft_loops, args.target_loops, c, h)
        pred_nohead = compare_rounds([args.k + 1] * C, args.draft_loops, args.target_loops, c)
        pred_one = compare_rounds([args.k + 1] * C, args.draft_loops, args.target_loops, c_one, h)
        r |= {
            "predicted_ratio": pred["ratio"],
            "predicted_ratio_recurrent_only": pred_nohead["ratio"],
            "predicted_ratio_one_row_per_plane": pred_one["ratio"],
            "predicted_block_ms": pred["block_ms"],
            "predicted_loop_ms": pred["loop_ms"],
            "ratio_difference": r["ratio_median"] - pred["ratio"],
        }
        out["rows"].append(r)
        _print_paired(r, args.allow_fallback)
        print(
            f"C={C:4d} predicted block {pred['block_ms']:.3f} ms, loop {pred['loop_ms']:.3f} ms, ratio "
            f"{pred['ratio']:.4f} (recurrent only {pred_nohead['ratio']:.4f}, "
            f"one row per plane {pred_one['ratio']:.4f}); "
            f"measured - predicted = "
            f"{r['ratio_difference']:+.4f}",
            flush=True,
        )
    if acceptance_note(out["rows"]):
        print(acceptance_note(out["rows"]))
    if args.out:
        write_out(args.out, json.dumps(out, indent=1), f"sweep of {len(out['rows'])} concurrencies")
    return 0


def _model_args(p) -> None:
    p.add_argument("--preset", default="ouro-1.4b", help="model preset: tiny | small | ouro-1.4b")
    p.add_argument("--device", type=device_name, default="cuda", help="cpu | cuda | cuda:N")
    p.add_argument("--context", type=int_at_least(1), default=512, help="keys each row attends to (context length)")
    p.add_argument("--allow-large", action="store_true", help="lift the size limits (rows, context, tokens, batch)")
    add_threads_option(
        p,
        "torch intra-op threads (default: the free cores, usable cores - round(load average), "
        "or OMP_NUM_THREADS when set)",
    )
    add_quiet_option(p)


def _round_args(p) -> None:
    _model_args(p)
    p.add_argument("--batch", type=csv_ints, default=[1, 16, 64], help="concurrencies C, e.g. 1,4,16")
    p.add_argument("--k", type=int_at_least(0), default=4, help="drafts per round K")
    p.add_argument("--draft-loops", "-d", type=int_at_least(1), default=2, help="loops used to draft, 1 <= d < D")
    p.add_argument("--target-loops", "-D", type=int_at_least(1), default=4, help="loops used to verify")
    p.add_argument("--tokens", type=int_at_least(1), default=128, help="generated tokens per request")
    p.add_argument("--repeats", type=int_at_least(2), default=7, help="paired repeats (alternating block/loop)")
    p.add_argument("--temperature", type=finite_float, default=0.0, help="0 = greedy")
    add_filter_options(p)
    add_processor_options(p, leave_out=("min_tokens",))  # bench's requests have no stop tokens to mask
    p.add_argument(
        "--cuda-graph-max-batch-size",
        type=int_at_least(1),
        default=1024,
        help="largest row count captured as a CUDA graph",
    )
    p.add_argument("--cuda-graph-max-graphs", type=int_at_least(1), default=512, help="most CUDA graphs kept")
    p.add_argument("--allow-fallback", action="store_true", help="print a comparison even if an arm ran eagerly")
    p.add_argument(
        "--in-flight",
        type=int_at_least(1),
        default=1,
        help="rounds submitted before the oldest is collected (1: synchronous rounds; 2: the host "
        "plans round n+1 while the device runs round n)",
    )


def register(sub) -> None:
    # The argparse shape every command with subcommands has (cmd_trace.register too): a
    # parser, its subparsers, one parser per subcommand; deliberately not abstracted.
    p = command_parser(
        sub,
        "bench",
        "Measure c(M) tables and run paired block-vs-loop round benchmarks on the "
        "torch backend (CUDA graphs on a GPU).",
    )
    bsub = p.add_subparsers(dest="bench_command", metavar="c-table|rounds|sweep", required=True)
    c = bsub.add_parser(
        "c-table",
        help="measure c(M): one recurrent call over M rows, graph replay",
        description="Measure c(M), the median ms of one recurrent call over M rows (graph "
        "replay on CUDA), and print or write the c-table JSON.",
    )
    _model_args(c)
    c.add_argument(
        "--rows",
        type=csv_ints,
        default=None,
        metavar="M,...",
        help=f"row counts M (default: {','.join(map(str, DEFAULT_ROWS))})",
    )
    c.add_argument(
        "--rows-per-plane",
        type=csv_ints,
        default=[1],
        metavar="R,...",
        help="rows per KV plane besides 1 (c_ms: every row on its own plane, always measured): R > 1 "
        "adds c_ms_shared[R] at the row counts M that R divides, M/R planes of R rows each (a "
        "block round's verification call at T = R); default: 1",
    )
    c.add_argument(
        "--kv-capacity",
        type=int,
        default=None,
        metavar="N",
        help="positions per KV plane (default: --context + 1). An engine allocates more than the "
        "context it reads, and with our kernels c(M) at M >= 2 depends on it: measure at your "
        "engine's capacity (`bench sweep` measures at its sessions' own)",
    )
    c.add_argument("--repeats", type=int_at_least(1), default=50, help="timed replays per M")
    c.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="write the c-table JSON here and print one summary line (default: print the JSON)",
    )
    c.add_argument(
        "--force",
        action="store_true",
        help=f"write the table even if its repeats spread beyond the noise bound ((q3-q1)/median > "
        f'{NOISE_BOUND} at some M), marked "noisy"',
    )
    c.set_defaults(func=cmd_ctable, preflight=check_bench_args)
    r = bsub.add_parser(
        "rounds",
        help="paired block/loop round benchmark",
        description="Paired block/loop generations per C: median paired ratio with a "
        "bootstrap interval, ms/round, acceptance and graph counters.",
    )
    _round_args(r)
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.set_defaults(func=cmd_rounds, preflight=check_bench_args, out=None)
    s = bsub.add_parser(
        "sweep",
        help="c-table + paired rounds per C, predicted vs measured ratio",
        description="Measure the c-table and head table the rounds need, then paired rounds "
        "per C; print predicted against measured block/loop ratios.",
    )
    _round_args(s)
    s.add_argument("--repeats-ctable", type=int_at_least(1), default=50, help="timed replays per M of the tables")
    s.add_argument("--out", default=None, metavar="FILE", help="write the sweep JSON here (default: none)")
    s.set_defaults(func=cmd_sweep, preflight=check_bench_args)
