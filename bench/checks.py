"""bench's option checks before any work (`check_bench_args`, the commands' preflight), its
--device, and the torch-side modules (bench.calls, bench.rounds), imported on use."""

from __future__ import annotations

from oracle.cli import limits
from oracle.cli.argtypes import check_out_path
from oracle.cli.step_options import filter_fields, given_filter, processor_fields
from oracle.errors import OracleError
from oracle.progress import warn
from oracle.sampling_params import SamplingParams
from oracle.schedule import validate


def torch_bench():
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


def device_of(args) -> str:
    import torch

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise OracleError("bench: no CUDA device is available (use --device cpu for a small preset)")
        index = int(args.device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise OracleError(f"--device {args.device}: only {torch.cuda.device_count()} CUDA device(s)")
    return args.device


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
        check_round_options(args)
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
    device_of(args)


def sampling_params(args) -> SamplingParams:
    return SamplingParams(args.temperature, **filter_fields(args), **processor_fields(args))


def check_round_options(args):
    validate([args.k + 1], args.draft_loops, args.target_loops)
    if min(args.batch, default=0) < 1:
        raise OracleError("--batch values must be >= 1")
    if args.repeats < 2:
        raise OracleError("--repeats must be >= 2 (a paired comparison needs repeats)")
    if args.tokens < 1 or args.context < 1:
        raise OracleError("--tokens and --context must be >= 1")
    if args.in_flight < 1:
        raise OracleError(f"--in-flight {args.in_flight}: at least one round must be in flight")
    sampling_params(args)  # temperature and the filters
