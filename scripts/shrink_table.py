"""The table of docs/results.md "Shrinking failing checks" (issue 44): every faulty backend of meta_tests/
(faulty.py reference faults, faulty_kernels.py kernel faults on the CPU, plugins.py plug-ins) through
`python -m oracle check --backend SPEC --json` on the tiny preset, each in its own process, and what the
check's shrinking made of its first failure: the original case, the shrunk one, the candidate runs and
seconds of the search.

    python scripts/shrink_table.py --json docs/results/shrink_table_20261203.json
    python scripts/shrink_table.py --group faulty_kernels --budget 120 \
        --json docs/results/shrink_table_kernels_120s_20261203.json
    python scripts/shrink_table.py --only faulty:make_kv_wrong_plane,plugins:make_extra_rng_event

prints the markdown table (and writes every check's `shrunk` object, with the command, to --json);
docs/results.md's table is

    python scripts/shrink_table.py --render docs/results/shrink_table_20261203.json \
        docs/results/shrink_table_kernels_120s_20261203.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLUGINS = (
    "make_one_kv_write_scaled",
    "make_zero_q_draft",
    "make_token_out_of_vocab",
    "make_extra_rng_event",
    "make_raises_in_step",
    "dies_segfault_in_step",
    "dies_abort_in_step",
    "dies_exit_in_step",
    "dies_segfault_in_session",
)


def backends() -> list[str]:
    from meta_tests import faulty, faulty_kernels

    out = [f"meta_tests.faulty:{name}" for name in faulty.FAULTS]
    out += [f"meta_tests.faulty_kernels:make_{name}_bf16" for name in faulty_kernels.FAULTS]
    out += [f"meta_tests.plugins:{name}" for name in PLUGINS]
    return out


def run(spec: str, budget: float | None, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "oracle", "check", "--backend", spec, "--json", "--quiet"]
    cmd += ["--shrink-budget", repr(budget)] if budget is not None else []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    wall = time.perf_counter() - t0
    row = {"backend": spec, "command": " ".join(cmd[1:]), "exit": p.returncode, "wall_s": round(wall, 1)}
    try:
        v = json.loads(p.stdout)
    except ValueError:
        return row | {"error": (p.stderr or p.stdout).strip().splitlines()[-1:]}
    failed = [c for c in v.get("checks", []) if not c["ok"]]
    return row | {
        "ok": v["ok"],
        "check_s": v.get("seconds"),
        "failed_checks": len(failed),
        "first_failure": failed[0]["name"] if failed else None,
        "shrunk": v.get("shrunk"),
    }


def short(spec: str) -> str:
    return spec.removeprefix("meta_tests.")


def _brief(description: str) -> str:
    """describe()'s line, shorter for the table (the sequential policy left unsaid)."""
    out = description.replace(", policy sequential", "")
    if out.startswith("1 request,"):  # older runs' wording of one prompt
        out = out.replace("prompts of 1 tokens", "a prompt of 1 token").replace("prompts of ", "a prompt of ")
    return out


def markdown(rows: list[dict], more: list[dict] = ()) -> str:
    """The table: one row per backend; `more`: the rows of a run with another budget (shown beside)."""
    other = {r["backend"]: r for r in more}
    out = [
        "| backend | first failure: the original case | shrunk case, its line (`check --preset tiny --seed 0 ... "
        "--backend BACKEND`) | runs | s | check + shrink, s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        s = r.get("shrunk")
        if s is None:
            what = "passes the check (exit 0): nothing to shrink" if r.get("ok") else f"exit {r['exit']}, no shrink"
            out.append(f"| `{short(r['backend'])}` | {what} | | | | {r['wall_s']} |")
            continue
        o, n = s["original"], s["shrunk"]
        key = f" ({s['key']})" if s["key"] else ""
        orig = f"[{s['class']}]{key} {_brief(o['description'])}"
        if n is None:
            new = "none before the budget ran out **(partial)**" if s["partial"] else "none smaller"
        else:
            line = n["reproduce"].split(" check ", 1)[-1].replace(f" --backend {r['backend']}", "")
            line = line.replace("--preset tiny --seed 0 ", "").replace("|", "\\|")
            new = _brief(n["description"]) + (" **(partial)**" if s["partial"] else "") + f": `{line}`"
        if r["backend"] in other and (other[r["backend"]].get("shrunk") or {}).get("shrunk"):
            s2 = other[r["backend"]]["shrunk"]
            n2 = s2["shrunk"]
            size = f"{n2['probe_requests']} requests" if "probe_requests" in n2 else _brief(n2["description"])
            new += (
                f"; with `--shrink-budget {s2['budget_s']:g}`: {size}, {s2['candidates']} runs, {s2['seconds']:.1f} s"
            )
        out.append(
            f"| `{short(r['backend'])}` | {orig} | {new} | {s['candidates']} | {s['seconds']:.1f} | {r['wall_s']} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated backend specs (meta_tests. prefix optional)")
    ap.add_argument(
        "--group", default=None, choices=("faulty", "faulty_kernels", "plugins"), help="one module's backends"
    )
    ap.add_argument("--budget", type=float, default=None, help="--shrink-budget of every check (default: check's)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds each check may take")
    ap.add_argument("--json", default=None, metavar="FILE", help="write every row to FILE")
    ap.add_argument(
        "--render",
        nargs="+",
        default=None,
        metavar="FILE",
        help="print the table of earlier runs' --json files (the first one's rows; the others' beside them)",
    )
    a = ap.parse_args()
    if a.render:
        runs = [json.loads(Path(f).read_text())["rows"] for f in a.render]
        print(markdown(runs[0], [r for more in runs[1:] for r in more]))
        return 0
    specs = backends()
    if a.group:
        specs = [s for s in specs if s.startswith(f"meta_tests.{a.group}:")]
    if a.only:
        want = {w if w.startswith("meta_tests.") else "meta_tests." + w for w in a.only.split(",")}
        specs = [s for s in specs if s in want] + sorted(want - set(specs))
    rows = []
    for spec in specs:
        row = run(spec, a.budget, a.timeout)
        rows.append(row)
        got = (row.get("shrunk") or {}).get("shrunk") or {}
        print(
            f"{short(spec)}: exit {row['exit']}, {row['wall_s']} s, shrunk {got.get('description')}",
            file=sys.stderr,
            flush=True,
        )
    if a.json:
        Path(a.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
