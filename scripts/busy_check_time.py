"""Wall time of `python -m oracle check --backend B` beside CPU-bound processes (the target's
must-show: torch-cpu-bf16 on 2 cores, another CPU-bound process running, under 10 s).

    python scripts/busy_check_time.py                          # torch-cpu-bf16, 1 busy process, 5 runs
    python scripts/busy_check_time.py --busy 0 --runs 3        # the same on an idle machine
    python scripts/busy_check_time.py --against /tmp/old --runs 6 --json out.json   # paired with another checkout
    python scripts/busy_check_time.py --json out.json -- --no-drift

Each run is a fresh process (imports included), with the environment as given (the check picks
its torch threads from the free cores: `--threads`). With --against DIR the runs alternate
between this tree and DIR (a checkout of another commit: `git worktree add DIR COMMIT`), ABBA
order, and the paired ratio this/DIR of each pair is reported too. Prints each run's wall
seconds and the medians; exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def spin() -> None:
    while True:
        pass


def one_run(tree: Path, backend: str, extra) -> tuple[float, int, str]:
    env = dict(os.environ, PYTHONPATH=str(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "oracle", "check", "--backend", backend, *extra],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - t0, r.returncode, r.stdout[-2000:] + r.stderr[-2000:]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="torch-cpu-bf16")
    p.add_argument("--busy", type=int, default=1, help="CPU-bound processes running beside the check")
    p.add_argument("--runs", type=int, default=5, help="runs (of each tree, with --against)")
    p.add_argument("--against", default=None, metavar="DIR", help="another checkout, run alternately with this one")
    p.add_argument("--json", default=None, help="write the times here")
    p.add_argument("extra", nargs="*", help="more check options (after --)")
    a = p.parse_args(argv)
    if a.busy < 0 or a.runs < 1:
        p.error("--busy must be >= 0 and --runs >= 1")
    root = Path(__file__).resolve().parents[1]
    trees = {"this": root}
    if a.against is not None:
        other = Path(a.against).resolve()
        if not (other / "oracle" / "__main__.py").is_file():
            p.error(f"--against {a.against}: not a checkout of this project (no oracle/__main__.py)")
        trees["against"] = other
    busy = [mp.Process(target=spin, daemon=True) for _ in range(a.busy)]
    for b in busy:
        b.start()
    times = {name: [] for name in trees}
    ok = True
    try:
        time.sleep(1.0 if busy else 0.0)  # the load average and the scheduler see them
        for i in range(a.runs):
            for name in list(trees) if i % 2 == 0 else list(trees)[::-1]:
                sec, rc, tail = one_run(trees[name], a.backend, a.extra)
                times[name].append(round(sec, 2))
                ok &= rc == 0
                print(f"run {i} {name}: {sec:.2f} s, exit {rc}", flush=True)
                if rc != 0:
                    print(tail)
    finally:
        for b in busy:
            b.terminate()
    out = {
        "backend": a.backend,
        "busy": a.busy,
        "cores": os.cpu_count(),
        "extra": a.extra,
        "date": time.strftime("%Y-%m-%d"),
        "times_s": times["this"],
        "median_s": statistics.median(times["this"]),
    }
    print(f"median {out['median_s']:.2f} s over {a.runs} runs ({a.busy} busy processes, {os.cpu_count()} cores)")
    if "against" in times:
        ratios = [x / y for x, y in zip(times["this"], times["against"])]
        out |= {
            "against": str(trees["against"]),
            "against_times_s": times["against"],
            "against_median_s": statistics.median(times["against"]),
            "paired_ratio_median": round(statistics.median(ratios), 3),
        }
        print(
            f"against {trees['against']}: median {out['against_median_s']:.2f} s; "
            f"paired ratio (this / against) median {out['paired_ratio_median']:.3f}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
