"""`python -m oracle bench c-table | rounds | sweep` on the torch backend (docs/DESIGN.md
section 10): the parsers. c-table: c(M) of one recurrent call over M rows (graph replay,
median; bench/ctable.py). rounds: paired block/loop generations. sweep: both, per C, with the
predicted ratio from the c-table measured in the same run (bench/paired.py). The options'
checks: bench/checks.py.

oracle/cli/__init__.py loads this command by name (its COMMANDS registry, like the backends' NAMED),
so imports run one way: bench -> kernels and oracle, never the reverse."""

from __future__ import annotations

from oracle.cli.argtypes import add_threads_option, csv_ints, finite_float, int_at_least, subcommand, subcommand_parsers
from oracle.cli.step_options import add_filter_options, add_processor_options
from oracle.progress import add_quiet_option

from .checks import DEFAULT_ROWS, check_bench_args, device_name
from .ctable import NOISE_BOUND, cmd_ctable
from .paired import cmd_rounds, cmd_sweep


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
    bsub = subcommand_parsers(
        sub,
        "bench",
        "Measure c(M) tables and run paired block-vs-loop round benchmarks on the "
        "torch backend (CUDA graphs on a GPU).",
        "c-table|rounds|sweep",
    )
    c = subcommand(
        bsub,
        "c-table",
        help="measure c(M): one recurrent call over M rows, graph replay",
        description="Measure c(M), the median ms of one recurrent call over M rows (graph "
        "replay on CUDA), and print or write the c-table JSON.",
        func=cmd_ctable,
        preflight=check_bench_args,
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
    r = subcommand(
        bsub,
        "rounds",
        help="paired block/loop round benchmark",
        description="Paired block/loop generations per C: median paired ratio with a "
        "bootstrap interval, ms/round, acceptance and graph counters.",
        func=cmd_rounds,
        preflight=check_bench_args,
        out=None,
    )
    _round_args(r)
    r.add_argument("--json", action="store_true", help="print one JSON object")
    s = subcommand(
        bsub,
        "sweep",
        help="c-table + paired rounds per C, predicted vs measured ratio",
        description="Measure the c-table and head table the rounds need, then paired rounds "
        "per C; print predicted against measured block/loop ratios.",
        func=cmd_sweep,
        preflight=check_bench_args,
    )
    _round_args(s)
    s.add_argument("--repeats-ctable", type=int_at_least(1), default=50, help="timed replays per M of the tables")
    s.add_argument("--out", default=None, metavar="FILE", help="write the sweep JSON here (default: none)")
