"""Imports run one way: kernels -> oracle and judge_jax -> oracle, never the reverse; bench/
(the `bench` command) may import oracle and kernels, and nothing imports it; no module of
oracle/, kernels/, judge_jax/ or bench/ imports itself back through others (no cycles).
Inside oracle/ the rooms are layered cli -> judge -> sampler -> runtime -> reference: oracle/cli/ may
import every other room, oracle/judge/ the sampler judge, the runtime and the reference, oracle/sampler/
(the sampler judge, which loads its plug-in through the runtime) the runtime and the reference,
oracle/runtime/ (the backend contract, the backends' loading, a plug-in's process, cancellation) the
reference only, and the reference (every other module of oracle/) none. Inside the judge its rooms are layered too:
shrinker -> plans -> probe -> comparison -> the judge's own modules (the runner, the scenario).
A constant is read from the module that defines it, never through one that imports it (each
constant has one name and one home).

The graph is read with `ast` from the source files, so imports inside functions count as
much as module-level ones, relative and absolute alike. Engines reach the oracle only by
name: oracle/runtime/backends.py (NAMED) and oracle/cli/__init__.py (COMMANDS) hold "module:attr" strings,
which are not imports; no other string of oracle/ names a module of kernels/ or judge_jax/ (an
`importlib.import_module("kernels.x")` would be an import the graph does not see); a run of the
CLI imports its own command's module only."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("oracle", "kernels", "judge_jax", "bench")
JUDGED = ("kernels", "judge_jax")  # what the oracle judges: it must not import them
TOP = {"bench"}  # what nothing of the four packages imports (reached by name)
ROOMS = ("reference", "runtime", "sampler", "judge", "cli")  # lowest first: a room imports only lower ones
JUDGE_ROOMS = ("judge", "comparison", "probe", "plans", "shrinker")  # the judge's, lowest first ("judge": its top)
ENTRY = {"oracle.__main__": "cli"}  # `python -m oracle` is the CLI's entry point


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def resolve(name: str, known) -> str | None:
    """The known module `name` is, or the longest known package holding it."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(mod: str, path: Path, known) -> set[str]:
    """Every module of the three packages that `mod` imports, anywhere in its source."""
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            # `from pkg import sub` imports the submodule when there is one
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
        else:
            continue
        out |= {t for t in (resolve(x, known) for x in targets) if t and t != mod}
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {mod: imports_of(mod, path, known) for mod, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "oracle.errors" in graph["kernels.session"]  # absolute, module level
    assert "oracle.atomic" in graph["oracle.trace_file"]  # relative, inside save_traces
    assert {"bench.calls", "bench.rounds"} <= graph["bench.checks"]  # `from . import a, b`
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_oracle_imports_nothing_it_judges():
    bad = sorted(
        f"{m} -> {t}"
        for m, ts in import_graph().items()
        if m.split(".")[0] == "oracle"
        for t in ts
        if t.split(".")[0] in JUDGED
    )
    assert not bad, "the oracle imports the engines it judges: " + ", ".join(bad)


def test_the_bench_package_is_imported_by_nothing_and_imports_oracle_and_kernels_only():
    graph = import_graph()
    bad = sorted(
        f"{m} -> {t}" for m, ts in graph.items() if m.split(".")[0] not in TOP for t in ts if t.split(".")[0] in TOP
    )
    assert not bad, "the bench package is imported (it is reached by name only): " + ", ".join(bad)
    bad = sorted(
        f"{m} -> {t}"
        for m, ts in graph.items()
        if m.split(".")[0] == "bench"
        for t in ts
        if t.split(".")[0] not in ("bench", "oracle", "kernels")
    )
    assert not bad, "the bench package imports beyond oracle and kernels: " + ", ".join(bad)
    assert any(t.startswith("kernels.") for t in graph["bench.calls"])  # the walk sees bench's imports


def test_engines_are_reached_by_name_only():
    """The registry strings name modules that exist (a typo would hide a command or backend)."""
    from oracle.runtime.backends import NAMED
    from oracle.cli import COMMANDS

    known = modules()
    for target in [*NAMED.values(), *COMMANDS.values()]:
        mod, _, attr = target.partition(":")
        assert mod in known and attr, target
        assert f"def {attr}(" in known[mod].read_text(), target


def loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nimport json; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


HEAVY = ("kernels", "judge_jax", "torch", "jax", "jaxlib")


def test_importing_the_cli_loads_no_engine_and_no_framework():
    loaded = loaded_after("import oracle.cli")
    assert [m for m in loaded if m in HEAVY] == []


@pytest.mark.parametrize(
    "argv", [["check", "--rounds", "1", "--counts", "2,1"], ["schedule", "--counts", "3,1"], ["--help"]]
)
def test_reference_commands_need_no_framework_and_no_test_tool(argv):
    """The reference's commands run on NumPy: torch, jax and the test/plot extras stay unloaded."""
    loaded = loaded_after(
        "import contextlib, io, oracle.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    oracle.cli.main({argv!r})"
    )
    assert [
        m for m in loaded if m in ("torch", "jax", "jaxlib", "judge_jax", "hypothesis", "pytest", "scipy", "matplotlib")
    ] == []


def modules_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_command_imports_its_own_module_only():
    """`python -m oracle check` builds the parser of `check` alone: no other command's module,
    no bench package, no kernels; `--help` still lists every command."""
    loaded = modules_after(
        "import contextlib, io, oracle.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    oracle.cli.main(['check', '--rounds', '1', '--counts', '2,1'])"
    )
    assert "oracle.cli.cmd_check" in loaded
    others = sorted(
        m
        for m in loaded
        if m.split(".")[0] in ("bench", "kernels") or m.startswith("oracle.cli.cmd_") and m != "oracle.cli.cmd_check"
    )
    assert others == []
    from oracle.cli import COMMANDS, HELP

    out = subprocess.run(
        [sys.executable, "-m", "oracle", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    text = " ".join(out.stdout.split())  # argparse wraps the help lines
    assert out.returncode == 0 and all(f"{name} {HELP[name]}" in text for name in COMMANDS)


def room(mod: str) -> str | None:
    """The room of a module of oracle/ (None outside oracle/)."""
    parts = mod.split(".")
    if parts[0] != "oracle":
        return None
    if mod in ENTRY:
        return ENTRY[mod]
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "reference"


def oracle_graph() -> dict[str, set[str]]:
    return {m: {t for t in ts if room(t)} for m, ts in import_graph().items() if room(m)}


def test_the_rooms_are_read_right():
    assert room("oracle.cli.cmd_check") == "cli" and room("oracle.cli") == "cli"
    assert room("oracle.judge.comparison.compare") == "judge" and room("oracle.reference_round") == "reference"
    assert room("oracle.__main__") == "cli" and room("kernels.session") is None
    assert room("oracle.runtime.contract") == "runtime" and room("oracle.judge.probe.drift") == "judge"
    assert judge_room("oracle.judge.runner") == "judge" and judge_room("oracle.judge.plans.kinds.probe") == "plans"


def test_the_rooms_import_downwards_only():
    """cli -> judge -> runtime -> reference: the reference never imports the runtime, the judge or
    the CLI, the runtime never the judge or the CLI, the judge never the CLI."""
    rank = {r: i for i, r in enumerate(ROOMS)}
    bad = sorted(
        f"{m} ({room(m)}) -> {t} ({room(t)})"
        for m, ts in oracle_graph().items()
        for t in ts
        if rank[room(t)] > rank[room(m)]
    )
    assert not bad, "a room imports a higher one: " + ", ".join(bad)


def judge_room(mod: str) -> str:
    """The room of a module of oracle/judge/ ("judge" for the judge's own top-level modules)."""
    parts = mod.split(".")
    return parts[2] if len(parts) > 3 and parts[2] in JUDGE_ROOMS else "judge"


def test_the_judge_rooms_import_downwards_only():
    """shrinker -> plans -> probe -> comparison -> the judge's top (runner, scenario): the comparison
    judges two runs without the probe, the probe without the plans, and only the shrinker reads the
    one verdict from outside it."""
    rank = {r: i for i, r in enumerate(JUDGE_ROOMS)}
    judged = {m: ts for m, ts in oracle_graph().items() if room(m) == "judge"}
    bad = sorted(
        f"{m} -> {t}"
        for m, ts in judged.items()
        for t in ts
        if room(t) == "judge" and rank[judge_room(t)] > rank[judge_room(m)]
    )
    assert not bad, "a room of the judge imports a higher one: " + ", ".join(bad)
    assert any(judge_room(t) == "probe" for t in judged["oracle.judge.plans.verdict"])  # the walk sees them


# The judge's face to the CLI: the one verdict, the scenario (a case and its reproduce line) and
# the runner (a scenario's rounds on one backend: `trace record`, the catalogue's plain runs).
# and the plan (what a verdict compares, and the executor: oracle/judge/plans/plan.py).
# and the shrinker (a failing verdict's smallest case, judged by the one verdict: issue 44),
# the report (a failure's record and its one text, `describe`, which every renderer reads: issue 61)
# and the calibration constants (their one home; `check` reads HOST_HIDDEN, `trace diff` SIGMA).
JUDGE_FACE = {
    "oracle.judge.comparison.report",
    "oracle.judge.probe.calibration",
    "oracle.judge.plans.verdict",
    "oracle.judge.scenario",
    "oracle.judge.runner",
    "oracle.judge.plans.plan",
    "oracle.judge.shrinker.shrink",
}


def test_the_cli_reaches_the_judge_through_its_face_only():
    """oracle/cli/ imports no part of the judge beyond JUDGE_FACE: the verdict is assembled in
    the judge, not in a command."""
    bad = sorted(
        f"{m} -> {t}"
        for m, ts in oracle_graph().items()
        if room(m) == "cli"
        for t in ts
        if room(t) == "judge" and t not in JUDGE_FACE and t != "oracle.judge"
    )
    assert not bad, "the CLI imports judge internals: " + ", ".join(bad)


def test_the_designated_files_stay_where_they_are():
    """The files the project's design names (DESIGN.md) keep their paths."""
    for name in ("reference_round.py", "loop_round.py", "rng_trace.py"):
        assert (ROOT / "oracle" / name).is_file(), name


def test_the_kernels_and_the_jax_judge_never_import_the_cli():
    """kernels/ and judge_jax/ are engines: they import the oracle's reference and judge parts, never
    its command-line layer (the LOOPSPEC_* schema lives in kernels/options.py, and oracle.cli reaches
    its check by name)."""
    known = modules()
    bad = sorted(
        f"{m} -> {t}"
        for m, path in known.items()
        if m.split(".")[0] in JUDGED
        for t in imports_of(m, path, known)
        if t == "oracle.cli" or t.startswith("oracle.cli.")
    )
    assert not bad, "an engine imports the CLI: " + ", ".join(bad)


JUDGED_NAME = re.compile(r"(kernels|judge_jax)(\.\w+)*")  # a module of what the oracle judges, by name


def docstrings(tree) -> set[int]:
    """id() of every docstring's node: prose, which may name any module."""
    holders = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, holders) and n.body and isinstance(n.body[0], ast.Expr)
        if isinstance(n.body[0].value, ast.Constant)
    }


def string_back_arrows(source: str, where: str) -> list[str]:
    """The strings of a file of oracle/ that name a module of kernels/ or judge_jax/ whole (what
    importlib.import_module or __import__ would take); a "module:attr" registry string is not one."""
    tree = ast.parse(source, where)
    prose = docstrings(tree)
    return [
        f"{where}:{n.lineno} {n.value!r}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose
        if JUDGED_NAME.fullmatch(n.value)
    ]


def test_the_oracle_names_no_judged_module_to_import_it():
    """No importlib back-arrow: oracle/ reaches kernels/ and judge_jax/ through the "module:attr"
    strings of its registries only."""
    probe = (
        '"""kernels.options, named in prose."""\n'
        'import importlib\nNAMED = {"x": "kernels.backend:make_torch_cpu"}\n'
        'importlib.import_module("kernels.options").check_env()\n'
    )
    assert string_back_arrows(probe, "probe.py") == ["probe.py:4 'kernels.options'"]
    bad = [
        hit
        for p in sorted((ROOT / "oracle").rglob("*.py"))
        for hit in string_back_arrows(p.read_text(), str(p.relative_to(ROOT)))
    ]
    assert not bad, "oracle/ names an engine's module (an import the graph does not see): " + ", ".join(bad)


def is_constant(name: str) -> bool:
    bare = name.lstrip("_")
    return len(bare) > 1 and bare.isupper()


def defined_here(path: Path) -> set[str]:
    """The names a module binds itself at its top level (assignments, functions, classes), also
    inside a top-level `if` or `try` (a block defined only where Triton imports), not those it
    imports."""
    out = set()
    body = list(ast.parse(path.read_text(), str(path)).body)
    while body:
        node = body.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            body += node.body + node.orelse + [s for h in getattr(node, "handlers", []) for s in h.body]
            continue
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for t in targets:
            out |= {e.id for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if isinstance(e, ast.Name)}
    return out


def constants_read_away_from_home(path: Path, known: dict, homes: dict) -> list[str]:
    """`from m import NAME` and `m.NAME` of an UPPERCASE NAME where module m imports NAME instead of
    defining it."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    alias, bad = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                stem = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                stem = node.module
            for a in node.names:
                if f"{stem}.{a.name}" in known:
                    alias[a.asname or a.name] = f"{stem}.{a.name}"
                elif stem in known and is_constant(a.name) and a.name not in homes[stem]:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} from {stem} import {a.name}")
        elif isinstance(node, ast.Import):
            alias |= {a.asname: a.name for a in node.names if a.asname and a.name in known}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in alias:
            mod_read = alias[node.value.id]
            if is_constant(node.attr) and node.attr not in homes[mod_read]:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {mod_read}.{node.attr}")
    return bad


def test_each_constant_has_one_home():
    """A constant (an UPPERCASE name) is read from the module that defines it, in the packages and
    in their tests and scripts: no module hands on a constant it imported (calibration.SIGMA, never
    noise.SIGMA or verdict.SIGMA)."""
    known = modules()
    homes = {m: defined_here(p) for m, p in known.items()}
    assert "SIGMA" in homes["oracle.judge.probe.calibration"] and "SIGMA" not in homes["oracle.judge.probe.noise"]
    dirs = (*PACKAGES, "tests", "property_tests", "meta_tests", "gpu_tests", "scripts", "examples")
    files = [p for d in dirs for p in sorted((ROOT / d).rglob("*.py"))]
    bad = [hit for p in files for hit in constants_read_away_from_home(p, known, homes)]
    assert not bad, "a constant read through a module that only imports it: " + ", ".join(bad)
