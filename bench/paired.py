"""`bench rounds` (paired block/loop generations per C) and `bench sweep` (the same with the
c-table and head table measured in the run, and the predicted ratio beside the measured one)."""

from __future__ import annotations

import json

from oracle.cli.argtypes import write_out
from oracle.cli.environment import set_threads
from oracle.config import preset
from oracle.progress import progress, warn

from .checks import check_round_options, device_of, sampling_params, torch_bench
from .ctable import measure_ctable, needed_rows, noise_problem
from .stats import paired_summary


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
    _, br = torch_bench()
    arms = br.paired_rounds(
        w,
        C,
        args.k,
        args.draft_loops,
        args.target_loops,
        args.tokens,
        args.repeats,
        args.context,
        sampling_params(args),
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


def cmd_rounds(args) -> int:
    check_round_options(args)
    _, br = torch_bench()
    threads = set_threads(args, preset(args.preset).hidden_size)
    w = br.random_weights(args.preset, device_of(args))
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
    from oracle.cost import compare_rounds
    from oracle.ctable import ctable_from_dict

    check_round_options(args)
    calls, br = torch_bench()
    threads = set_threads(args, preset(args.preset).hidden_size)
    dev = device_of(args)
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
