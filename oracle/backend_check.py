"""`python -m oracle check --backend NAME`: a backend's block and loop rounds against the
reference, by the backend's dtype row of the tolerance table and the first-divergence rule.
Backends that draw their own uniforms are checked by replaying them on the reference."""
from __future__ import annotations

import json
import time

from .backends import load_backend
from .check import run_case
from .compare import compare_runs


def replayed_reference(model, case, mode, got):
    """Reference run consuming the uniforms the backend recorded (padded: after a divergence
    the reference may need more than the backend drew; those are never compared)."""
    us = {}
    for tr in got:
        for e in tr.rng_events:
            us.setdefault(e.request, []).append(e.value)
    return run_case(model, case, mode, replay={rid: u + [0.5] * 64 for rid, u in us.items()})[0]


def check_backend(args, model, cases, t0) -> int:
    backend = load_backend(args.backend)
    dtype = "exact" if backend.exact else backend.dtype
    out = {"ok": True, "backend": backend.name, "dtype": backend.dtype, "checks": [], "kv_writes_compared": 0,
           "logits_compared": 0, "rng_events_compared": 0, "tokens_compared": 0, "layers": model.cfg.num_layers,
           "excused_divergences": [], "max_rel_err": {"kv": 0.0, "logits": 0.0}}
    for case in cases:
        if case.policy not in backend.policies:
            continue
        for mode in ("block", "loop"):
            got, _ = run_case(model, case, mode, backend)
            ref = run_case(model, case, mode)[0] if getattr(backend, "host_rng", True) else \
                replayed_reference(model, case, mode, got)
            rep = compare_runs(ref, got, dtype, case.reproduce + f" --backend {args.backend}")
            out["ok"] &= rep.ok
            for k in ("kv_writes_compared", "logits_compared", "rng_events_compared", "tokens_compared"):
                out[k] += getattr(rep, k)
            for k in ("kv", "logits"):
                out["max_rel_err"][k] = max(out["max_rel_err"][k], rep.max_rel_err[k])
            out["excused_divergences"] += rep.divergences
            out["checks"] += [{"name": f"{case.name} [{mode}]: {c.name}", "ok": c.ok, "detail": c.detail}
                              for c in rep.checks]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"loopspec-oracle check: backend {backend.name} ({backend.dtype}) against the FP32 reference, "
              f"tolerance row {dtype!r}")
        for c in out["checks"]:
            if not c["ok"]:
                print(f"  FAIL {c['name']}: {c['detail']}")
        for d in out["excused_divergences"]:
            print(f"  excused: {d}")
        print(f"  compared: {out['kv_writes_compared']} KV writes, {out['logits_compared']} logits vectors, "
              f"{out['rng_events_compared']} RNG events, {out['tokens_compared']} emitted tokens; max relative "
              f"error KV {out['max_rel_err']['kv']:.2g}, logits {out['max_rel_err']['logits']:.2g}")
        print(f"  {'OK' if out['ok'] else 'FAILED'} in {out['seconds']} s")
    return 0 if out["ok"] else 1
