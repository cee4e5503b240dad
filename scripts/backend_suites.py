"""The property suite against every named backend CI can run (`python -m oracle.runtime.backends`
lists them with their profiles), as `make test`'s last step: one pytest process per backend, as many
at a time as there are cores, each with one torch thread. A process per backend, not pytest-xdist's
workers: the JAX backend compiles each drawn shape once instead of once per worker, and no worker
starts idle. Each run's output is printed whole when it ends; the exit code is 1 if any run failed.

    python scripts/backend_suites.py                  # each backend's SUITE_PROFILES profile
    python scripts/backend_suites.py --profile ci     # every backend at the ci profile
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", help="one Hypothesis profile for every backend (default: each its own)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="backends run at a time")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    sys.path.insert(0, str(REPO))
    from oracle.runtime.backends import suite_command, suite_runs

    runs = [(name, args.profile or profile) for name, profile in suite_runs()]
    pending, live, failed = list(runs), [], []
    with tempfile.TemporaryDirectory() as tmp:
        while pending or live:
            while pending and len(live) < args.jobs:
                name, profile = pending.pop(0)
                log = open(Path(tmp) / f"{name}.log", "w+")
                cmd, run_env = suite_command(name, profile, dict(os.environ))  # one torch thread each
                proc = subprocess.Popen(cmd, cwd=REPO, env=run_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
                live.append((name, profile, proc, log, time.perf_counter()))
            time.sleep(0.2)
            for item in [x for x in live if x[2].poll() is not None]:
                name, profile, proc, log, t0 = item
                live.remove(item)
                log.seek(0)
                print(f"ORACLE_BACKEND={name} HYPOTHESIS_PROFILE={profile} pytest property_tests", flush=True)
                print(log.read().rstrip(), flush=True)
                print(f"({name}: exit {proc.returncode}, {time.perf_counter() - t0:.1f} s)", flush=True)
                log.close()
                if proc.returncode != 0:
                    failed.append(name)
    if failed:
        print(f"the property suite failed on: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
