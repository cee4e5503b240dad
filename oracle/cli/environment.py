"""Environment variables the oracle and its kernels read, checked before any work so a typo
is refused in one line instead of being ignored or failing deep inside an import.

    ORACLE_BACKEND             read by the property suite; `check` takes --backend instead
    LOOPSPEC_GEMV, LOOPSPEC_FUSE, LOOPSPEC_TRITON_ATTN, LOOPSPEC_PDL    "0" or "1"
    LOOPSPEC_COMPILE_DYNAMIC   "rows" or "all"
    LOOPSPEC_GEMV_CONFIG       a JSON object file of GEMV tiles
    LOOPSPEC_GEMV_MAX_ROWS     calls of up to this many rows (1..16) take the GEMV path
    (the defaults of kernels.options.KernelOptions; their schema and its check, `check_env`, live
    there, and the kernels check them themselves: KernelOptions.from_env in the named torch
    backends' factories, which `check` loads before any work, and `bench`'s preflight)
    OMP_NUM_THREADS            thread counts 1..the usable cores (as --threads)
"""

from __future__ import annotations

import os
import re
import sys

from ..errors import OracleError


def check_environment(args, env=os.environ) -> None:
    """Environment variables that would be silently ignored, or are malformed, are refused."""
    backend = env.get("ORACLE_BACKEND", "").strip()
    if args.command == "check" and backend and backend != "reference" and getattr(args, "backend", None) is None:
        raise OracleError(
            f"ORACLE_BACKEND={backend} is read by the property suite, not by `check`; "
            f"pass --backend {backend} (or unset ORACLE_BACKEND)"
        )
    check_thread_counts(args, env)


# ---- torch's intra-op threads ----


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_thread_counts(args, env=os.environ) -> None:
    """OMP_NUM_THREADS (OpenMP's list of counts per nesting level, read by choose_threads, torch and
    the BLAS) and --threads: thread counts 1..the usable cores. More threads than cores only spin
    against each other, and OMP_NUM_THREADS=100000 had torch start tens of thousands of threads."""
    cores = usable_cores()
    omp = env.get("OMP_NUM_THREADS", "")
    if omp.strip():
        items = [x.strip() for x in omp.strip().split(",")]
        if not all(re.fullmatch(r"[0-9]+", x) and int(x) >= 1 for x in items):
            raise OracleError(f"OMP_NUM_THREADS={omp!r}: expected a thread count 1..{cores} (or unset it)")
        if max(map(int, items)) > cores:
            raise OracleError(
                f"OMP_NUM_THREADS={omp.strip()}: more threads than the {cores} cores this process may use; "
                f"set it to 1..{cores} or unset it"
            )
    threads = getattr(args, "threads", None)
    if threads is not None and threads > cores:
        raise OracleError(
            f"--threads {threads}: more threads than the {cores} cores this process may use; give 1..{cores}"
        )


def free_cores() -> int:
    """Cores this process may use less the machine's load (1-minute average), at least 1."""
    usable = usable_cores()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return max(1, usable - round(load))


# Below this hidden size intra-op threads only add overhead: `check --backend torch-cpu-bf16` on
# the tiny preset, idle 2 cores, took 11.4 s with one thread and 13.8 s with two (2026-12-01).
ONE_THREAD_HIDDEN = 512


def choose_threads(option: int | None, env=os.environ, hidden: int | None = None) -> tuple[int, str]:
    """(threads, where from): --threads, else a numeric OMP_NUM_THREADS (its first level, at most the
    usable cores), else 1 for a model of
    hidden size below ONE_THREAD_HIDDEN, else the free cores. Two threads per core on a busy
    machine spin against the other process (`check --backend torch-cpu-bf16` took 51 s instead
    of 5 s on 2 busy cores)."""
    if option is not None:
        return option, "option"
    omp = env.get("OMP_NUM_THREADS", "").strip().split(",")[0].strip()
    if re.fullmatch(r"[0-9]+", omp) and int(omp) >= 1:  # never more than the cores (the CLI refuses more)
        return min(int(omp), usable_cores()), "OMP_NUM_THREADS"
    if hidden is not None and hidden < ONE_THREAD_HIDDEN:
        return 1, f"hidden size {hidden} < {ONE_THREAD_HIDDEN}"
    return free_cores(), "free cores"


def set_threads(args, hidden: int | None = None) -> dict:
    """torch's intra-op threads (if torch is loaded: a torch backend, a plug-in that imports it,
    or bench) and NumPy's BLAS threads, both choose_threads(args.threads, hidden=the model's
    hidden size); {"threads": N, "threads_from": ...} for --json."""
    n, where = choose_threads(getattr(args, "threads", None), hidden=hidden)
    from threadpoolctl import threadpool_limits

    threadpool_limits(n, user_api="blas")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    if "oracle.runtime.isolated" in sys.modules:  # a plug-in's process (oracle/runtime/isolated.py): the same count
        sys.modules["oracle.runtime.isolated"].set_threads(n)
    return {"threads": n, "threads_from": where}
