"""The case the round options describe (`custom_case`) and the command line that reproduces a
run: the model's flags (`model_flags`), the round's (`round_flags`) and the PYTHONPATH a plug-in
needs (`plugin_prefix`)."""

from __future__ import annotations

import os

from . import case_json
from .catalogue import default_cases
from .round_args import DEFAULT_COUNTS, check_round_args, model_config
from .step_options import FILTER_OPTIONS, PROCESSOR_OPTIONS, filter_fields, flag, processor_fields
from ..errors import OracleError
from ..judge.scenario import command, make_case
from ..sampling_params import SamplingParams
from ..schedule import validate


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
