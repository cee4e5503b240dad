"""Judge-round timings of several judge variants on one GPU: side by side, timed one at a time.

    python scripts/gpu_judge_variants.py --out DIR --wave 2 \\
        'base:' 'tf32:--dot tf32x3 --rows-bits 2' 'cublas:--dot highest|XLA_FLAGS=--xla_gpu_enable_triton_gemm=false'

Each variant is NAME:ARGS[|ENV=VALUE ...]: scripts/gpu_judge_time.py with ARGS (and those
environment variables), its JSON and log in DIR/NAME.{json,log}. Up to --wave variants run at
once (model build and XLA compiles overlap); their timed rounds take turns under one file lock
(LOOPSPEC_TIMING_LOCK, gpu_tests/judge_timing.py), so no two variants time a round at the
same moment. One variant's build, compiles and warm-up still run beside another's timed rounds
(on the H200 that inflated rounds by up to 1.6x): for numbers to compare, time the variants in
one process, one after another (`gpu_judge_time.py --variant ...`); this is for a quick look.
Device memory is allocated on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false).
Prints one line per variant and mode: median ms, over floor, warm-up compile s.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse(spec: str):
    name, sep, rest = spec.partition(":")
    if not sep or not name.isidentifier():
        raise SystemExit(f"error: variant {spec!r}: expected NAME:ARGS[|ENV=VALUE ...]")
    args, *envs = rest.split("|")
    env = {}
    for e in envs:
        k, eq, v = e.partition("=")
        if not eq or not k:
            raise SystemExit(f"error: variant {name}: environment {e!r} is not ENV=VALUE")
        env[k] = v
    return name, shlex.split(args), env


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("variants", nargs="+", help="NAME:ARGS[|ENV=VALUE ...]")
    p.add_argument("--out", required=True, help="folder for each variant's JSON and log")
    p.add_argument("--wave", type=int, default=2, help="variants running at once")
    p.add_argument("--timeout", type=float, default=400, help="seconds per variant")
    a = p.parse_args(argv)
    if a.wave < 1:
        p.error("--wave must be >= 1")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = [parse(v) for v in a.variants]
    lock = out / "timing.lock"
    todo, running, t0 = list(specs), [], time.perf_counter()
    while todo or running:
        while todo and len(running) < a.wave:
            name, args, env = todo.pop(0)
            e = dict(os.environ, LOOPSPEC_TIMING_LOCK=str(lock), XLA_PYTHON_CLIENT_PREALLOCATE="false", **env)
            cmd = [sys.executable, str(ROOT / "scripts" / "gpu_judge_time.py"), *args, "--json", str(out / f"{name}.json")]
            log = open(out / f"{name}.log", "w")
            running.append((name, subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT), time.perf_counter()))
        time.sleep(1)
        for r in list(running):
            name, proc, start = r
            if proc.poll() is None and time.perf_counter() - start < a.timeout:
                continue
            if proc.poll() is None:
                proc.kill()
            running.remove(r)
            print(f"{name}: exit {proc.wait()} after {time.perf_counter() - start:.0f} s "
                  f"(at {time.perf_counter() - t0:.0f} s)", flush=True)
            show(name, out / f"{name}.json")
    return 0


def show(name: str, path: Path) -> None:
    if not path.is_file():
        print(f"  {name}: no result")
        return
    res = json.loads(path.read_text())
    for fetch in ("async", "thread", "round"):
        for mode in ("block", "loop"):
            r = res.get(fetch, {}).get(mode)
            if r:
                print(f"  {name} {fetch} {mode:5s}: {r['median_ms']:.2f} ms, {r['over_floor']:.2f}x floor {r['floor_ms']:.2f}; "
                      f"warm-up {r['warmup_s']:.1f} s ({r['warmup_compiles']['compile_s']:.1f} s compiling); "
                      f"rounds {r['times_ms']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
