"""Round options shared by `check` and `trace record` (parsed by oracle/cli/round_options.py):
their defaults and their checks before any work (`check_round_args`), and the sampling
parameters they give. The case they describe and its reproduce line: oracle/cli/round_case.py.

`check_round_args(args)` runs in cli.main before the command (argparse `preflight` default):
it resolves defaults, refuses bad or contradictory values and sizes beyond oracle.cli.limits,
and warns about values that are legal but suspicious.
"""

from __future__ import annotations

from . import case_json, limits
from .catalogue import default_cases
from .step_options import FILTER_OPTIONS, PROCESSOR_OPTIONS, filter_fields, flag, given_filter, processor_fields
from ..config import ModelConfig, preset
from ..errors import OracleError
from ..progress import warn
from ..rng_trace import check_policy
from ..filters import TEMPERATURE_RANGE
from ..sampling_params import CHAIN, SamplingParams
from ..schedule import validate


# option dest -> default; None in the parser so an explicit value can be told apart
DEFAULTS = {"draft_loops": 2, "target_loops": 4, "rounds": 4, "policy": "sequential"}
ROUND_SHAPE = (
    "counts",
    "temperature",
    *(dest for dest, *_ in FILTER_OPTIONS),
    "prompt_len",
    "draft_loops",
    "target_loops",
    "rounds",
    "policy",
    "depths",
    "stop_tokens",
    "max_tokens",
    "banned_tokens",
    *(dest for dest, *_ in PROCESSOR_OPTIONS),
)
DEFAULT_COUNTS = [5, 3, 1]


def model_config(args) -> ModelConfig:
    """The config of --checkpoint (config.json only) or of --preset."""
    if args.checkpoint is not None:
        from ..checkpoint import read_config, weight_files

        cfg = read_config(args.checkpoint)
        weight_files(args.checkpoint)  # index and shards present before any work
        return cfg
    return preset(args.preset)


def check_round_args(args) -> None:
    """Resolve and check the round options in place (idempotent)."""
    if getattr(args, "round_args_checked", False):
        return
    if args.checkpoint is not None and args.preset is not None:
        raise OracleError("give --preset NAME or --checkpoint DIR, not both (a checkpoint has its own shape)")
    explicit = [k for k in ROUND_SHAPE if getattr(args, k) is not None]
    if args.depths is not None and (args.draft_loops is not None or args.target_loops is not None):
        raise OracleError("--depths gives every request its own d_i:D_i; do not combine it with -d/-D")
    if args.case is not None and explicit:
        raise OracleError(
            f"--case {args.case} runs a built-in case as it is; do not combine it with "
            f"--{explicit[0].replace('_', '-')}"
        )
    if args.checkpoint is None and args.preset is None:
        args.preset = "tiny"
    if getattr(args, "case_json", None) is not None:  # check --case-json: the whole case (issue 44)
        case_json.check_args(args, explicit, model_config(args), check_penalty)
        args.round_args_checked = True
        return
    for k, v in DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    cfg = model_config(args)
    recording = hasattr(args, "mode")  # trace record: one mode, no cache-free recompute
    if args.case is not None or not explicit:  # built-in cases: one named, or all of them (check)
        cases = default_cases(cfg.vocab_size)
        if args.case is not None:
            if args.case not in [c.name for c in cases]:
                raise OracleError(f"--case {args.case!r}: unknown (known: {'; '.join(c.name for c in cases)})")
            cases = [c for c in cases if c.name == args.case]
        if args.case is not None or not recording:
            limits.check_cases_work(
                cfg, cases, args.allow_large, check=not recording, reference=getattr(args, "reference", None)
            )
            args.round_args_checked = True
            return
    check_custom_round(args, cfg, recording)
    args.round_args_checked = True


def check_custom_round(args, cfg: ModelConfig, recording: bool) -> None:
    """check_round_args for a custom case (the round options given): values, masks, refusals and sizes."""
    check_policy(args.policy)
    counts = DEFAULT_COUNTS if args.counts is None else args.counts
    if args.depths is not None:
        if len(args.depths) != len(counts):
            raise OracleError(f"--depths gives {len(args.depths)} pairs for {len(counts)} requests (one d_i:D_i each)")
        validate(counts, [a for a, _ in args.depths], [b for _, b in args.depths])
        args.draft_loops, args.target_loops = min(a for a, _ in args.depths), max(b for _, b in args.depths)
    limits.check_counts(counts, args.target_loops, args.allow_large)
    validate(counts, args.draft_loops, args.target_loops)
    for name, ids in (("--stop-tokens", args.stop_tokens), ("--banned-tokens", args.banned_tokens)):
        bad = [t for t in ids or () if not 0 <= t < cfg.vocab_size]
        if bad:
            raise OracleError(f"{name}: token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})")
    if args.temperature is not None and args.temperature < 0:
        raise OracleError(f"--temperature {args.temperature}: must be >= 0 (0 = greedy)")
    if args.temperature and not TEMPERATURE_RANGE[0] <= args.temperature <= TEMPERATURE_RANGE[1]:  # issue 62
        raise OracleError(
            f"--temperature {args.temperature:g}: must be 0 (greedy) or in [{TEMPERATURE_RANGE[0]:g}, "
            f"{TEMPERATURE_RANGE[1]:g}]: the logits divided by it would overflow float32 (max 3.4e38) or vanish"
        )
    if len(set(args.banned_tokens or ())) >= cfg.vocab_size:
        raise OracleError(
            f"--banned-tokens masks all {cfg.vocab_size} tokens of the vocabulary: no token is left to draft or verify"
        )
    processor_params(args).check_vocab(cfg.vocab_size, "the round options")  # ranges and ids, one line
    if args.repetition_penalty is not None:
        check_penalty(args.repetition_penalty)
    check_masks(args, cfg.vocab_size)
    refuse_dropped(args, cfg.vocab_size)
    if args.target_loops > cfg.total_loops:
        warn(
            f"-D {args.target_loops} is beyond the {cfg.total_loops} loops the model was trained with "
            f"(total_ut_steps); its logits past depth {cfg.total_loops - 1} are extrapolation"
        )
    plen = args.prompt_len if args.prompt_len is not None else 8
    limits.check_work(
        cfg,
        counts,
        args.target_loops,
        args.rounds,
        plen,
        args.allow_large,
        check=not recording,
        reference=getattr(args, "reference", None),
        d=args.draft_loops,
    )


# --repetition-penalty R divides positive logits by R and multiplies negative ones by R: within
# these bounds a logit up to 3e8 in size stays a finite float32 (max 3.4e38) and a nonzero one
# stays nonzero (smallest normal 1.2e-38)
REPETITION_PENALTY_RANGE = (1e-30, 1e30)


def check_penalty(value: float, who: str = "--repetition-penalty") -> None:
    """A repetition penalty whose products stay finite, nonzero float32 (REPETITION_PENALTY_RANGE)."""
    lo, hi = REPETITION_PENALTY_RANGE
    if not lo <= value <= hi:
        raise OracleError(
            f"{who} {value:g}: must be in [{lo:g}, {hi:g}] (1 = off): the logits it multiplies "
            f"or divides would overflow float32 (max 3.4e38) or vanish beyond that"
        )


def check_masks(args, vocab: int) -> None:
    """Masks that leave no token to emit: --banned-tokens and one-token --bad-words (masked
    always) covering the vocabulary; with --min-tokens, those and the stop tokens (masked until
    min_tokens tokens are generated)."""
    banned = set(args.banned_tokens or ())
    always = banned | {w[0] for w in args.bad_words or () if len(w) == 1}
    if len(always) >= vocab and len(banned) < vocab:
        raise OracleError(
            f"--bad-words (one-token words) with --banned-tokens mask all {vocab} tokens of the "
            f"vocabulary: no token is left to draft or verify"
        )
    if args.min_tokens and len(always | set(args.stop_tokens or ())) >= vocab:
        raise OracleError(
            f"--min-tokens {args.min_tokens} masks the stop tokens, and with --banned-tokens and "
            f"--bad-words they cover all {vocab} tokens: no token is left before {args.min_tokens} "
            f"are generated"
        )


def refuse_dropped(args, vocab: int) -> None:
    """Round options that would have no effect (docs/cli_inputs.md: refused, never dropped)."""
    if args.min_tokens and not args.stop_tokens:
        raise OracleError(
            f"--min-tokens {args.min_tokens} masks the stop tokens until {args.min_tokens} tokens are "
            f"generated; without --stop-tokens it has no effect: drop it or give --stop-tokens"
        )
    if args.temperature == 0:
        given = given_filter(args)
        if given:
            raise OracleError(
                f"{given} filters sampled tokens; with --temperature 0 every request is greedy and "
                f"it has no effect: drop it or give a temperature > 0"
            )
        if args.policy == "fixed":
            raise OracleError(
                "--policy fixed lays out the uniforms of sampled requests; with --temperature 0 every "
                "request is greedy and draws none: drop it or give a temperature > 0"
            )
    for f in CHAIN.inert(SamplingParams(1.0, **filter_fields(args)), vocab):
        raise OracleError(
            f"{flag(f)} {getattr(args, f)} keeps every token of the {vocab}-token vocabulary: it has no "
            f"effect; give a value that drops tokens or drop it"
        )


def is_custom(args) -> bool:
    """Whether the (resolved) options describe a custom case rather than the built-in ones."""
    if getattr(args, "case_json", None) is not None:  # check --case-json (issue 44)
        return True
    return any(getattr(args, k) is not None for k in ROUND_SHAPE if k not in DEFAULTS) or any(
        getattr(args, k) != v for k, v in DEFAULTS.items()
    )


def processor_params(args) -> SamplingParams:
    """The processors the options give (checked by SamplingParams: one error line for a bad value)."""
    return SamplingParams(
        stop_token_ids=tuple(args.stop_tokens or ()), max_tokens=args.max_tokens, **processor_fields(args)
    )
