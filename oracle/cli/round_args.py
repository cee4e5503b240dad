"""Round options shared by commands. `check` and `trace record` take `add_round_options`:
their defaults, their checks before any work (`check_round_args`), the case they describe
(`custom_case`) and the command line that reproduces a run (`model_flags`, `round_flags`).
`schedule` and `cost` take `add_schedule_options` (-d/-D or --depths of one planned round).

`check_round_args(args)` runs in cli.main before the command (argparse `preflight` default):
it resolves defaults, refuses bad or contradictory values and sizes beyond oracle.cli.limits,
and warns about values that are legal but suspicious.
"""

from __future__ import annotations

import os

from . import case_json, limits
from .argtypes import csv_ints, depth_pairs, finite_float, int_at_least, probability, token_biases, token_words
from .catalogue import default_cases
from ..judge.scenario import command, make_case
from ..config import ModelConfig, preset
from ..errors import OracleError
from ..progress import warn
from ..rng_trace import check_policy
from ..sampling import CHAIN, TEMPERATURE_RANGE, SamplingParams
from ..schedule import validate


# the kinds of value a chain step's option takes (oracle.sampling.Step.options): its argparse
# type and how round_flags writes it back
ARG_TYPES = {
    "number": (finite_float, repr),
    "count": (int_at_least(0), repr),
    "biases": (token_biases, lambda v: ",".join(f"{t}:{b!r}" for t, b in v.items())),
    "words": (token_words, lambda v: "/".join(",".join(map(str, w)) for w in v)),
    "probability": (probability, repr),
    "positive": (int_at_least(1), repr),
}


def step_options(kind: str) -> tuple:
    """(dest, type, metavar, help, format) of the options of the chain steps of one kind, in
    oracle.sampling.CHAIN's order."""
    return tuple(
        (dest, ARG_TYPES[k][0], metavar, text, ARG_TYPES[k][1])
        for step in CHAIN.named(kind)
        for dest, k, metavar, text in step.options
    )


PROCESSOR_OPTIONS = step_options("processor")  # oracle/processors.py
FILTER_OPTIONS = step_options("filter")  # oracle/filters.py (temperature has its own option)


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def add_filter_options(p) -> None:
    """The filters' options (`check`, `trace record`, `bench rounds|sweep`); their values are
    SamplingParams fields of the same names, for sampled requests only."""
    for dest, kind, metavar, text, _ in FILTER_OPTIONS:
        p.add_argument(flag(dest), type=kind, default=None, metavar=metavar, help=text)


def filter_fields(args) -> dict:
    """The SamplingParams fields the filter options give (those given only)."""
    return {dest: getattr(args, dest) for dest, *_ in FILTER_OPTIONS if getattr(args, dest, None) is not None}


def given_filter(args) -> str | None:
    """The first filter option given, as its flag, or None."""
    return next((flag(dest) for dest in filter_fields(args)), None)


def add_processor_options(p, leave_out=()) -> None:
    """The processor options (`check`, `trace record`, `bench rounds|sweep`); their values are
    SamplingParams fields of the same names. leave_out: fields a command cannot use (bench's
    requests have no stop tokens for `min_tokens` to mask), not offered at all."""
    for dest, kind, metavar, text, _ in PROCESSOR_OPTIONS:
        if dest in leave_out:
            continue
        p.add_argument(flag(dest), type=kind, default=None, metavar=metavar, help=text)


def processor_fields(args) -> dict:
    """The SamplingParams fields the processor options give (those given only)."""
    return {dest: getattr(args, dest) for dest, *_ in PROCESSOR_OPTIONS if getattr(args, dest, None) is not None}


def add_depth_options(p) -> None:
    """-d/--draft-loops and -D/--target-loops (None: the command's default, 2 and 4)."""
    for short, long, meta, text in (
        ("-d", "--draft-loops", "d", "loops used to draft, 1 <= d < D (default: 2)"),
        ("-D", "--target-loops", "D", "loops used to verify (default: 4)"),
    ):
        p.add_argument(long, short, type=int_at_least(1), default=None, metavar=meta, help=text)


def add_round_options(p) -> None:
    """Options shared by `check` and `trace record`; check_round_args checks them before any work."""
    p.add_argument(
        "--preset",
        default=None,
        help="model preset: tiny | small | ouro-1.4b (default: tiny unless --checkpoint is given)",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="HF-style checkpoint folder instead of a preset (default: none)",
    )
    p.add_argument(
        "--seed",
        type=int_at_least(0),
        default=0,
        help="weights seed (presets) and base request seed (request i uses seed+i)",
    )
    p.add_argument(
        "--counts",
        type=csv_ints,
        default=None,
        metavar="T0,T1,...",
        help="token counts T_i = K_i + 1 per request per round, e.g. 5,3,1 "
        "(default: the built-in cases; with other round options 5,3,1)",
    )
    add_depth_options(p)
    p.add_argument(
        "--temperature",
        type=finite_float,
        default=None,
        help="0 = greedy (default: a mixed batch, even requests greedy and odd ones at 1.0)",
    )
    add_filter_options(p)
    p.add_argument("--rounds", type=int_at_least(1), default=None, help="rounds of generation (default: 4)")
    p.add_argument("--policy", default=None, choices=("sequential", "fixed"), help="RNG policy (default: sequential)")
    p.add_argument(
        "--depths",
        type=depth_pairs,
        default=None,
        metavar="d0:D0,...",
        help="per-request draft:target loops, one pair per request (replaces -d/-D; default: none)",
    )
    p.add_argument(
        "--stop-tokens",
        type=csv_ints,
        default=None,
        metavar="ID,...",
        help="stop token ids of every request; emission ends after the first, kept (default: none)",
    )
    p.add_argument(
        "--max-tokens",
        type=int_at_least(1),
        default=None,
        help="tokens each request may generate in all (default: unlimited)",
    )
    p.add_argument(
        "--banned-tokens",
        type=csv_ints,
        default=None,
        metavar="ID,...",
        help="token ids masked to -inf in draft and verification logits (default: none)",
    )
    add_processor_options(p)
    p.add_argument(
        "--prompt-len",
        type=int_at_least(1),
        default=None,
        help="prompt length of every request (default: random 1..8 drawn from the seed)",
    )
    p.add_argument(
        "--case",
        default=None,
        metavar="NAME",
        help="run one built-in case by name (see the reproduce lines; default: all of them)",
    )
    p.add_argument(
        "--allow-large",
        action="store_true",
        help="lift the size limits of oracle/cli/limits.py (runs may then take minutes or hours)",
    )
    p.set_defaults(preflight=check_round_args)
    if not p.description:  # `check` (its register() gives none)
        p.description = (
            "Run the block and loop rounds on the FP32 reference, for the built-in cases or the "
            "case the round options describe, and compare them bit for bit. Exit 0 all equal, "
            "1 a check failed, 2 bad usage or input, 3 internal error."
        )


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
    args.round_args_checked = True


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


def model_flags(args) -> list[str]:
    """--checkpoint ABSPATH or --preset NAME, then --seed."""
    where = (
        ["--checkpoint", os.path.abspath(args.checkpoint)]
        if args.checkpoint is not None
        else ["--preset", args.preset or "tiny"]
    )
    return where + ["--seed", str(args.seed)]


def _found_elsewhere(top: str, skip: set) -> bool:
    """Whether a fresh `python` would import the top-level module `top` without the folders in
    `skip` on its path (an installed package, the standard library)."""
    import importlib.machinery
    import sys
    from pathlib import Path

    path = [p for p in sys.path if p and Path(p).resolve() not in skip]
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder:
            spec = finder.find_spec(top, path)
        else:  # builtin, frozen, an editable install's finder
            find = getattr(finder, "find_spec", None)
            spec = find(top, None) if find else None
        if spec is not None:
            return True
    return False


def plugin_prefix(*specs, files: dict | None = None) -> str:
    """'PYTHONPATH=DIR ' for reproduce lines whose plug-in (`module:factory`) was found through the
    current folder or $PYTHONPATH, which a shell in another folder does not have (`examples.`,
    `meta_tests.` run from the repository); '' for named backends and installed modules. Call it
    once the backends are loaded; files: module -> file of plug-ins imported in another process."""
    import shlex
    import sys
    from pathlib import Path

    skip = {Path(p or ".").resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    skip.add(Path.cwd().resolve())
    dirs: list[str] = []
    for spec in specs:
        if not spec or ":" not in spec:  # a named backend (torch-cpu, jax, ...)
            continue
        name = spec.partition(":")[0]
        file = getattr(sys.modules.get(name), "__file__", None) or (files or {}).get(name)
        if not file:
            continue
        root = Path(file).resolve().parent
        for _ in range(name.count(".") + (Path(file).name == "__init__.py")):
            root = root.parent
        if root in skip and str(root) not in dirs and not _found_elsewhere(name.split(".")[0], skip):
            dirs.append(str(root))
    return f"PYTHONPATH={shlex.quote(os.pathsep.join(dirs))} " if dirs else ""


def round_flags(args, counts) -> list[str]:
    """Every option that shapes a custom case, in a fixed order."""
    out = ["--counts", ",".join(map(str, counts))]
    out += (
        ["--depths", ",".join(f"{a}:{b}" for a, b in args.depths)]
        if args.depths is not None
        else ["-d", str(args.draft_loops), "-D", str(args.target_loops)]
    )
    out += ["--rounds", str(args.rounds), "--policy", args.policy]
    for name, value in (
        ("--prompt-len", args.prompt_len),
        ("--temperature", args.temperature),
        ("--max-tokens", args.max_tokens),
    ):
        if value is not None:
            out += [name, repr(value)]
    for dest, _, _, _, fmt in FILTER_OPTIONS + PROCESSOR_OPTIONS:
        if getattr(args, dest) is not None:
            out += [flag(dest), fmt(getattr(args, dest))]
    for name, ids in (("--stop-tokens", args.stop_tokens), ("--banned-tokens", args.banned_tokens)):
        if ids:
            out += [name, ",".join(map(str, ids))]
    if args.allow_large:
        out.append("--allow-large")
    return out


def custom_case(args):
    """The case described by --counts and friends, or the built-in case named by --case; its
    reproduce line is the exact command that regenerates it."""
    check_round_args(args)
    if getattr(args, "case_json", None) is not None:
        return case_json.case_of(args, model_flags(args))
    cfg = model_config(args)
    if args.case is not None:
        return next(c for c in default_cases(cfg.vocab_size, model_flags(args)) if c.name == args.case)
    counts = args.counts or DEFAULT_COUNTS
    depths = args.depths
    if depths is not None:  # the session's (d, D): KV planes for max D_i
        if len(depths) != len(counts):
            raise OracleError(f"--depths gives {len(depths)} pairs for {len(counts)} requests (one d_i:D_i each)")
        validate(counts, [a for a, _ in depths], [b for _, b in depths])
        args.draft_loops, args.target_loops = min(a for a, _ in depths), max(b for _, b in depths)
    stops = {
        "stop_token_ids": tuple(args.stop_tokens or ()),
        "max_tokens": args.max_tokens,
        "banned_token_ids": tuple(args.banned_tokens or ()),
        **processor_fields(args),
    }
    filters = filter_fields(args)  # sampled requests only
    if args.temperature is None:  # a mixed batch
        params = [
            SamplingParams(seed=args.seed + i, **stops)
            if i % 2 == 0
            else SamplingParams(1.0, seed=args.seed + i, **stops, **filters)
            for i in range(len(counts))
        ]
    else:
        params = [
            SamplingParams(args.temperature, seed=args.seed + i, **stops, **(filters if args.temperature else {}))
            for i in range(len(counts))
        ]
    rounds = [{i: t for i, t in enumerate(counts)}] * args.rounds
    plen = (args.prompt_len, args.prompt_len) if args.prompt_len else (1, 8)
    repro = command(["check", *model_flags(args), *round_flags(args, counts)])
    name = (
        f"counts {tuple(counts)} "
        + (
            f"d={args.draft_loops} D={args.target_loops}"
            if depths is None
            else "depths " + ",".join(f"{a}:{b}" for a, b in depths)
        )
        + f" x{args.rounds} round{'s' if args.rounds != 1 else ''}"
    )
    return make_case(
        name,
        rounds,
        args.draft_loops,
        args.target_loops,
        params,
        seed=args.seed,
        policy=args.policy,
        prompt_len=plen,
        reproduce=repro,
        vocab=cfg.vocab_size,
        depths=depths,
    )


# ---- `schedule` and `cost`: one planned round ----


def add_schedule_options(p) -> None:
    """-d/-D, --depths and --allow-large of `schedule` and `cost` (one round, planned only)."""
    add_depth_options(p)
    p.add_argument(
        "--allow-large", action="store_true", help="lift the size limits on requests, token counts, D and schedule rows"
    )
    p.add_argument(
        "--depths",
        type=depth_pairs,
        default=None,
        metavar="d0:D0,d1:D1,...",
        help="per-request draft and target loops, one pair per request (replaces -d/-D)",
    )


def resolve_schedule_depths(args) -> None:
    """-d/-D defaults (2, 4) in place; -d/-D together with --depths is refused (idempotent)."""
    if args.depths is not None and (args.draft_loops is not None or args.target_loops is not None):
        raise OracleError("--depths gives every request its own d_i:D_i; do not combine it with -d/-D")
    if args.depths is None:
        args.draft_loops = 2 if args.draft_loops is None else args.draft_loops
        args.target_loops = 4 if args.target_loops is None else args.target_loops


def round_depths(args, counts) -> tuple:
    """(d, D) for the planner: two ints from -d/-D, or per-request lists from --depths."""
    resolve_schedule_depths(args)
    if args.depths is None:
        return args.draft_loops, args.target_loops
    if len(args.depths) != len(counts):
        raise OracleError(f"--depths gives {len(args.depths)} pairs for {len(counts)} requests (one d_i:D_i each)")
    return [d for d, _ in args.depths], [D for _, D in args.depths]


def max_depths(d, D) -> tuple[int, int]:
    """The largest d and D of a round (ints, or per-request lists from --depths)."""
    return (max(d) if isinstance(d, list) else d), (max(D) if isinstance(D, list) else D)
