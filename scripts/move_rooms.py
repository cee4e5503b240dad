"""Move oracle/'s modules into their rooms (issue 61) and rewrite every name of them in the repository.

    python scripts/move_rooms.py            # move, rewrite, print what changed
    python scripts/move_rooms.py --dry-run  # print what it would move and rewrite, change nothing

The rooms (ROOMS): oracle/runtime/ (the backend runtime) and, inside the judge, comparison/, probe/,
plans/ (with kinds/) and shrinker/. Each module of MOVES is `git mv`ed into its room; a room's
__init__.py is written where missing (a one-line docstring, no re-exports). Then every file of TREES
is rewritten:

    Python, by its syntax tree: each `from .x import ...` / `from .. import x` is resolved to the
    module it names (from where the file was) and written again relative to where the file is now,
    split where its names went to different rooms; `from oracle.judge import drift, verdict` alike;
    every file, as text: each dotted name (oracle.judge.drift, "oracle.isolated", ...:make_x) and each
    path (oracle/judge/drift.py, oracle/judge/kinds/) of a moved module is given its room.

Re-runnable: the names it rewrites are read from the rooms on disk as well as from MOVES, so a second
run changes nothing, and a run on a tree where branches added references to the old places (or new
modules beside moved ones) brings them in. A new module of oracle/ or oracle/judge/ that is neither
in MOVES nor in STAY follows a moved module whose name begins its own (shrink_steps.py follows
shrink.py), else the one room all its importers are in; else it stays and is listed. Lines longer
than 120 characters that a rewrite made are listed (a docstring to wrap by hand); `ruff format` is
run on the changed Python files where ruff is on PATH. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve()

# room package -> (the package its modules left, its __init__ docstring)
ROOMS = {
    "oracle.runtime": (
        "oracle",
        "The backend runtime: the contract, the backends' loading, a plug-in's own process and cancellation.",
    ),
    "oracle.judge.comparison": ("oracle.judge", "The comparison: the one judge of two runs, its decisions and report."),
    "oracle.judge.probe": ("oracle.judge", "The probe: the noise twin, the drift and precision verdicts, calibration."),
    "oracle.judge.plans": ("oracle.judge", "The plans and their executor, the one verdict, and each kind's work."),
    "oracle.judge.shrinker": ("oracle.judge", "The shrinker: a failing verdict's smallest case."),
}
# room -> the modules (or packages) it takes from its parent
MOVES = {
    "oracle.runtime": ("contract", "backends", "isolated", "plugin_output", "cancel"),
    "oracle.judge.comparison": ("compare", "decisions", "report", "malformed", "cache_free"),
    "oracle.judge.probe": (
        "noise",
        "forwards",
        "drift_model",
        "drift",
        "precision",
        "calibration",
        "drift_stats",
        "observations",
    ),
    "oracle.judge.plans": ("plan", "verdict", "kinds", "cases", "worker", "invariance", "localize"),
    "oracle.judge.shrinker": ("shrink",),
}
# the modules of oracle/ and oracle/judge/ that stay where they are (a module in neither list is new)
STAY = {
    "oracle": (
        "__init__ __main__ atomic capture checkpoint cli config cost data errors files filters judge kv loop_round "
        "model phases processors progress reference_backend reference_round rng_events rng_trace sampler "
        "sampling schedule session tolerances trace_file traces runtime ctable roofline"
    ).split(),
    "oracle.judge": "__init__ runner scenario comparison probe plans shrinker".split(),
}
TREES = "oracle kernels bench judge_jax tests property_tests meta_tests scripts gpu_tests examples docs".split()
TOP_FILES = ("README.md", "DEVELOPERS.md", "Makefile", "pyproject.toml", "conftest.py")
SUFFIXES = {".py", ".md", ".toml", ".sh", ".cfg", ".ini", ".yml", ".yaml", ".txt"}


def path_of(module: str) -> Path:
    return ROOT.joinpath(*module.split("."))


def exists(module: str) -> bool:
    p = path_of(module)
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def present(module: str) -> bool:
    """A module or package to move: also a package folder that holds modules but no __init__.py (a
    branch's new file in a folder that moved, oracle/judge/kinds/x.py)."""
    p = path_of(module)
    return exists(module) or p.is_dir() and any(p.rglob("*.py"))


def children(package: str) -> list[str]:
    """The modules and packages directly inside a package folder on disk."""
    d = path_of(package)
    if not d.is_dir():
        return []
    out = [p.stem for p in d.glob("*.py") if p.stem != "__init__"]
    out += [p.name for p in d.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    return sorted(out)


def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True)


# ---- where each module goes ----


def imported_by(tree_root: Path, target: str, mapping: dict[str, str]) -> set[str]:
    """The (mapped) modules of oracle/ whose source imports `target` (an old name)."""
    out = set()
    for p in sorted(tree_root.rglob("*.py")):
        mod = module_of(p)
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom):
                stem = absolute_stem(node, package_of(p.name == "__init__.py", mod))
                names = {f"{stem}.{a.name}" for a in node.names} | {stem}
            elif isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            else:
                continue
            if target in names:
                out.add(rename(mod, mapping))
    return out


def placement() -> tuple[dict[str, str], list[str]]:
    """old module -> new module for every module to move now, and the new modules left unplaced."""
    plan, unplaced = {}, []
    for room, names in MOVES.items():
        parent = ROOMS[room][0]
        plan |= {f"{parent}.{n}": f"{room}.{n}" for n in names if present(f"{parent}.{n}")}
    for parent, stay in STAY.items():
        for name in children(parent):
            old = f"{parent}.{name}"
            if name in stay or old in plan:
                continue
            stems = [(n, r) for r, ns in MOVES.items() if ROOMS[r][0] == parent for n in ns]
            follow = [r for n, r in sorted(stems, key=lambda s: -len(s[0])) if name.startswith(n + "_")]
            if follow:
                plan[old] = f"{follow[0]}.{name}"
                continue
            users = imported_by(ROOT / "oracle", old, plan)
            rooms = {next((r for r in ROOMS if m.startswith(r + ".")), None) for m in users}
            if len(rooms) == 1 and None not in rooms and ROOMS[next(iter(rooms))][0] == parent:
                plan[old] = f"{next(iter(rooms))}.{name}"
            else:
                unplaced.append(old)
    return plan, unplaced


def renames() -> dict[str, str]:
    """old name -> new name of every module in a room, moved now or before (read from disk and MOVES)."""
    out = {}
    for room, (parent, _) in ROOMS.items():
        for name in set(children(room)) | set(MOVES[room]):
            if not exists(f"{parent}.{name}"):
                out[f"{parent}.{name}"] = f"{room}.{name}"
    return out


def rename(module: str, mapping: dict[str, str]) -> str:
    """A module's new name: the longest moved prefix replaced."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in mapping:
            return ".".join([mapping[head], *parts[i:]])
    return module


# ---- moving ----


def move(src: Path, dst: Path, dry: bool, log: list[str]) -> None:
    """git mv src dst; a folder onto an existing folder moves its files one by one."""
    if src.is_dir() and dst.is_dir():
        for child in sorted(src.iterdir()):
            if child.name != "__pycache__":
                move(child, dst / child.name, dry, log)
        if not dry:
            shutil.rmtree(src / "__pycache__", ignore_errors=True)
            if src.is_dir() and not any(src.iterdir()):
                src.rmdir()
        return
    if dst.exists():
        log.append(f"CONFLICT {src.relative_to(ROOT)} and {dst.relative_to(ROOT)} both exist: left as they are")
        return
    log.append(f"moved {src.relative_to(ROOT)} -> {dst.relative_to(ROOT)}")
    for f in sorted(src.rglob("*.py")) if src.is_dir() else [src]:  # where each file is after this run
        after = dst / f.relative_to(src) if src.is_dir() else dst
        MOVED[f if dry else after] = (module_of(f), module_of(after))
    if not dry:
        dst.parent.mkdir(parents=True, exist_ok=True)
        git("mv", str(src.relative_to(ROOT)), str(dst.relative_to(ROOT)))
        if src.is_dir():  # what git did not track (__pycache__)
            shutil.rmtree(src, ignore_errors=True)


def make_rooms(plan: dict[str, str], dry: bool, log: list[str]) -> None:
    for room, (_, doc) in ROOMS.items():
        init = path_of(room) / "__init__.py"
        if init.is_file():
            continue
        log.append(f"wrote {init.relative_to(ROOT)}")
        if not dry:
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{doc}"""\n')
            git("add", str(init.relative_to(ROOT)))
    for old, new in sorted(plan.items()):
        src, dst = path_of(old), path_of(new)
        src = src if src.is_dir() else src.with_suffix(".py")
        move(src, dst if src.is_dir() else dst.with_suffix(".py"), dry, log)


# ---- rewriting Python imports ----


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(is_init: bool, module: str) -> str:
    return module if is_init else module.rpartition(".")[0]


def absolute_stem(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def known(module: str) -> bool:
    """Whether an old or new name is a module of oracle/ once the moves are done."""
    return rename(module, RENAMES) in AFTER


def relative(target: str, package: str) -> tuple[int, str]:
    """(level, module) of `from <level dots><module> import` naming `target` from `package`."""
    t, p = target.split("."), package.split(".")
    common = 0
    while common < min(len(t), len(p)) and t[common] == p[common]:
        common += 1
    return len(p) - common + 1, ".".join(t[common:])


def groups(node: ast.ImportFrom, stem: str) -> dict[str, list[ast.alias]]:
    """The import's names grouped by the (new) module they are imported from."""
    out: dict[str, list[ast.alias]] = {}
    for a in node.names:
        sub = f"{stem}.{a.name}"
        if a.name != "*" and known(sub):  # a submodule: from its new parent
            home = rename(sub, RENAMES).rpartition(".")[0]
        else:
            home = rename(stem, RENAMES)
        out.setdefault(home, []).append(a)
    return out


def names_found(node: ast.ImportFrom, stem: str) -> bool:
    """Whether a from-import read as naming `stem` names modules that exist (`from . import x`: each x)."""
    if node.module is None:
        return all(known(f"{stem}.{a.name}") for a in node.names)
    return known(stem)


def resolve_stem(node: ast.ImportFrom, is_init: bool, mod: str, was: str | None) -> str:
    """The absolute module a from-import names. A relative one is read from where the file was before
    this run's moves (`was`), else from where it is, falling back to its place before the rooms where
    that names nothing here (an import a branch wrote for the old place)."""
    if not node.level:
        return node.module
    if was is not None:
        return absolute_stem(node, package_of(is_init, was))
    stem = absolute_stem(node, package_of(is_init, mod))
    old_mod = rename(mod, {new: old for old, new in RENAMES.items()})
    if not names_found(node, stem) and old_mod != mod:
        old_stem = absolute_stem(node, package_of(is_init, old_mod))
        if names_found(node, old_stem):
            return old_stem
    return stem


def import_text(level: int, module: str, names: list[ast.alias]) -> str:
    what = ", ".join(a.name if a.asname is None else f"{a.name} as {a.asname}" for a in names)
    return f"from {'.' * level}{module} import {what}"


def rewrite_imports(path: Path, text: str, mod: str, was: str | None) -> str:
    """Every from-import of the file written for the file's place after the moves (`mod`) and its
    targets' new places."""
    is_init = path.name == "__init__.py"
    package = package_of(is_init, mod)
    try:
        tree = ast.parse(text, str(path))
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or (not node.level and not node.module.startswith("oracle")):
            continue
        stem = resolve_stem(node, is_init, mod, was)
        by_home = groups(node, stem)
        if node.level:
            new = [(*relative(home, package), names) for home, names in by_home.items()]
        else:
            new = [(0, home, names) for home, names in by_home.items()]
        if len(new) == 1 and (new[0][0], new[0][1] or None) == (node.level, node.module):
            continue
        if len(new) == 1:  # the same names from one module: only `from <module>` changes (comments kept)
            line = lines[node.lineno - 1]
            m = FROM.match(line, node.col_offset)
            level, module, _ = new[0]
            lines[node.lineno - 1] = line[: m.start()] + f"from {'.' * level}{module} " + line[m.end() :]
            continue
        indent = " " * node.col_offset
        body = ("\n" + indent).join(import_text(*n) for n in new)
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, body))
    for l0, c0, l1, c1, body in sorted(edits, reverse=True):
        head, tail = lines[l0 - 1][:c0], lines[l1 - 1][c1:]
        lines[l0 - 1 : l1] = [head + body + tail]
    return "".join(lines)


FROM = re.compile(r"from\s+\.*\s*[\w.]*\s+(?=import\b)")


# ---- rewriting names and paths as text ----


def name_pattern(olds) -> re.Pattern | None:
    """Each old name, dotted or as a path: not inside a longer name (oracle.judge.drift, never
    oracle.judge.drift_model or xoracle.judge.drift)."""
    alts = "|".join(re.escape(o).replace(r"\.", "[./]") for o in sorted(olds, key=len, reverse=True))
    return re.compile(rf"(?<![\w.])(?:{alts})(?!\w)") if alts else None


FROM_LINE = re.compile(r"(?m)^([ \t]*)from (oracle(?:\.\w+)*) import (\w+(?: as \w+)?(?:, *\w+(?: as \w+)?)*)[ \t]*$")


def rewrite_from_lines(text: str) -> str:
    """`from oracle.judge import drift, verdict` on a line of its own where the syntax tree does not
    see it (inside a string: a test's child script, a doc's example), split by the names' new homes."""

    def sub(m: re.Match) -> str:
        indent, stem, names = m.group(1), m.group(2), [n.strip() for n in m.group(3).split(",")]
        homes: dict[str, list[str]] = {}
        for n in names:
            sub_mod = f"{stem}.{n.split(' ')[0]}"
            home = rename(sub_mod, RENAMES).rpartition(".")[0] if sub_mod in RENAMES else stem
            homes.setdefault(home, []).append(n)
        if list(homes) == [stem]:
            return m.group(0)
        return "\n".join(f"{indent}from {home} import {', '.join(ns)}" for home, ns in homes.items())

    return FROM_LINE.sub(sub, text)


def rewrite_names(text: str, mapping: dict[str, str]) -> str:
    pattern = name_pattern(mapping)

    def sub(m: re.Match) -> str:
        found = m.group(0)
        sep = "/" if "/" in found else "."
        if sep == "/" and "." in found:  # oracle/judge.drift: not a name
            return found
        new = mapping[found.replace("/", ".")]
        return new.replace(".", sep)

    return pattern.sub(sub, text) if pattern else text


def files() -> list[Path]:
    out = [ROOT / f for f in TOP_FILES if (ROOT / f).is_file()]
    for t in TREES:
        out += [p for p in sorted((ROOT / t).rglob("*")) if p.is_file() and p.suffix in SUFFIXES]
    return [p for p in out if p.resolve() != SELF and "__pycache__" not in p.parts]


def rewrite_all(dry: bool, log: list[str]) -> list[Path]:
    """Rewrite every file; the paths changed. A file moved this run has its relative imports read from
    where it was (a dry run: where it is, written for where it goes)."""
    changed = []
    for p in files():
        text = p.read_text()
        new = text
        if p.suffix == ".py":
            was, mod = MOVED.get(p, (None, module_of(p)))
            new = rewrite_imports(p, new, mod, was)
        new = rewrite_names(rewrite_from_lines(new), RENAMES)
        if new != text:
            diff = difflib.unified_diff(text.splitlines(), new.splitlines(), n=0, lineterm="")
            n = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
            log.append(f"rewrote {p.relative_to(ROOT)} ({n} lines)")
            long = [i + 1 for i, line in enumerate(new.splitlines()) if len(line) > 120 and line not in text]
            if long and p.suffix == ".py":
                log.append(f"  LONG LINES (wrap by hand) {p.relative_to(ROOT)}: {long}")
            if not dry:
                p.write_text(new)
            changed.append(p)
    return changed


RENAMES: dict[str, str] = {}  # old name -> new name of every module in a room
AFTER: set[str] = set()  # the modules of oracle/ once the moves are done
MOVED: dict[Path, tuple[str, str]] = {}  # a file moved this run (its path now) -> (module before, after)


def main(argv=None) -> int:
    global RENAMES, AFTER
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    args = ap.parse_args(argv)
    log: list[str] = []
    plan, unplaced = placement()
    make_rooms(plan, args.dry_run, log)
    RENAMES = renames() | plan  # (a dry run: the plan's moves have not happened on disk)
    AFTER = {rename(module_of(p), plan if args.dry_run else {}) for p in (ROOT / "oracle").rglob("*.py")} | set(ROOMS)
    changed = rewrite_all(args.dry_run, log)
    for old in unplaced:
        log.append(f"UNPLACED {old}: a new module no rule places; it stays (add it to MOVES or STAY)")
    py = [str(p.relative_to(ROOT)) for p in changed if p.suffix == ".py"]
    if py and not args.dry_run and shutil.which("ruff"):
        subprocess.run(["ruff", "format", "-q", *py], cwd=ROOT, check=False)
        log.append(f"ruff format: {len(py)} Python files")
    print("\n".join(log) if log else "nothing to move or rewrite: the rooms are in place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
