"""Wall time of `python -m oracle check --backend B` beside CPU-bound processes (issue 26's
must-show: torch-cpu-bf16 on 2 cores, another CPU-bound process running, under 10 s).

    python scripts/busy_check_time.py                          # torch-cpu-bf16, 1 busy process, 5 runs
    python scripts/busy_check_time.py --busy 0 --runs 3        # the same on an idle machine
    python scripts/busy_check_time.py --json out.json -- --no-drift

Each run is a fresh process (imports included), with the environment as given (the check picks
its torch threads from the free cores: `--threads`). Prints each run's wall seconds and the
median; exits 1 if a check failed.
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="torch-cpu-bf16")
    p.add_argument("--busy", type=int, default=1, help="CPU-bound processes running beside the check")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", default=None, help="write the times here")
    p.add_argument("extra", nargs="*", help="more check options (after --)")
    a = p.parse_args(argv)
    if a.busy < 0 or a.runs < 1:
        p.error("--busy must be >= 0 and --runs >= 1")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    busy = [mp.Process(target=spin, daemon=True) for _ in range(a.busy)]
    for b in busy:
        b.start()
    times, ok = [], True
    try:
        time.sleep(1.0 if busy else 0.0)            # the load average and the scheduler see them
        for i in range(a.runs):
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "oracle", "check", "--backend", a.backend, *a.extra],
                               cwd=root, env=env, capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
            ok &= r.returncode == 0
            print(f"run {i}: {times[-1]:.2f} s, exit {r.returncode}", flush=True)
            if r.returncode != 0:
                print(r.stdout[-2000:], r.stderr[-2000:], sep="\n")
    finally:
        for b in busy:
            b.terminate()
    med = statistics.median(times)
    print(f"median {med:.2f} s over {a.runs} runs ({a.busy} busy processes, {os.cpu_count()} cores)")
    if a.json:
        Path(a.json).write_text(json.dumps({"backend": a.backend, "busy": a.busy, "cores": os.cpu_count(),
                                            "extra": a.extra, "times_s": times, "median_s": med,
                                            "date": time.strftime("%Y-%m-%d")}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
