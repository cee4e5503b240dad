"""`python -m oracle check --backend NAME [--reference jax]`: a backend's block and loop rounds
judged by the one judge (oracle.compare.compare_runs through oracle.cases.judge_backend), on
the same cases `check` runs. Exit 0 when every check holds, 1 when one fails (its place named
and a reproduce line given)."""
from __future__ import annotations

import json
import time

from .backends import load_backend
from .cases import judge_backend


def check_backend(args, model, cases, t0) -> int:
    backend = load_backend(args.backend)
    judge = None
    judge_name = "the FP32 reference"
    if getattr(args, "reference", None) not in (None, "reference"):
        judge = load_backend(args.reference)
        judge_name = f"the {judge.name} judge ({judge.dtype})"
    row = "exact" if backend.exact else backend.dtype
    out = {"ok": True, "backend": backend.name, "dtype": backend.dtype, "exact": bool(backend.exact),
           "judge": judge.name if judge else "reference", "tolerance_row": row, "checks": [], "cases": [],
           "kv_writes_compared": 0, "logits_compared": 0, "rng_events_compared": 0, "tokens_compared": 0,
           "request_rounds": 0, "layers": model.cfg.num_layers, "excused_divergences": [],
           "max_rel_err": {"kv": 0.0, "logits": 0.0}}
    skipped = []
    for case in cases:
        if case.policy not in backend.policies:
            skipped.append(f"{case.name} (policy {case.policy} not supported by {backend.name})")
            continue
        reproduce = (case.reproduce or "python -m oracle check") + f" --backend {args.backend}" + \
            (f" --reference {args.reference}" if judge else "")
        reports = judge_backend(backend, model, case, reproduce, case.name, catch=True, judge=judge)
        case_ok = all(rep.ok for _, rep in reports)
        out["ok"] &= case_ok
        out["cases"].append({"name": case.name, "ok": case_ok})
        for label, rep in reports:
            for k in ("kv_writes_compared", "logits_compared", "rng_events_compared", "tokens_compared",
                      "request_rounds"):
                out[k] += getattr(rep, k)
            for k in ("kv", "logits"):
                out["max_rel_err"][k] = max(out["max_rel_err"][k], rep.max_rel_err[k])
            out["excused_divergences"] += rep.divergences
            out["checks"] += [{"name": f"{label}: {c.name}", "ok": c.ok, "detail": c.detail} for c in rep.checks]
    out["skipped"] = skipped
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if args.json:
        print(json.dumps(out))
        return 0 if out["ok"] else 1
    print(f"loopspec-oracle check: backend {backend.name} ({backend.dtype}, exact={bool(backend.exact)}) "
          f"against {judge_name}, tolerance row {row!r}")
    for c in out["cases"]:
        print(f"  [{'PASS' if c['ok'] else 'FAIL'}] {c['name']}")
    for c in out["checks"]:
        if not c["ok"]:
            print(f"  FAIL [{c['name'].rsplit(': ', 1)[-1]}] {c['detail']}")
    for s in skipped:
        print(f"  skipped: {s}")
    n_exc = len(out["excused_divergences"])
    for d in out["excused_divergences"][:10]:
        print(f"  excused: {d}")
    if n_exc > 10:
        print(f"  excused: ... {n_exc - 10} more")
    print(f"  compared: {out['request_rounds']} request-rounds, {out['kv_writes_compared']} KV writes, "
          f"{out['logits_compared']} logits vectors, {out['rng_events_compared']} RNG events, "
          f"{out['tokens_compared']} tokens; max relative error KV {out['max_rel_err']['kv']:.3g}, "
          f"logits {out['max_rel_err']['logits']:.3g}; {n_exc} excused near-tie divergences; "
          f"every decision explained by the backend's own logits: "
          f"{'yes' if not any(not c['ok'] and c['name'].endswith(': decisions') for c in out['checks']) else 'NO'}")
    print(f"  {'OK' if out['ok'] else 'FAILED'} in {out['seconds']} s")
    return 0 if out["ok"] else 1
