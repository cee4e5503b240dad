"""Where a judge round leaves the device idle: a jax.profiler trace read back.

`annotated()` wraps the round's phases (oracle.phases), the judge's device steps
(judge_jax.model) and its flush in jax.profiler.TraceAnnotation, named "J:<function>", for
one traced round (the Python tracer stays off: it keeps at most 8192 events, fewer than a
round at ouro-1.4b makes). `gaps(trace_dir)` then reads the trace's .xplane.pb and returns,
for the annotated round ("J:round"): its wall time, the time some kernel ran on the device
(the union of the compute streams' events) and the kernels taking most of it (ms,
launches), the copies' time, the idle time in gaps under
0.1 ms (launch gaps between kernels already queued), and the rest of the idle time split by
the two innermost annotations the main thread was in at each idle moment ("flush>_get": what
the device waited for). On a host without a GPU plane the device figures are absent.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os

# (module, attribute): the functions annotated; a class method as "Class.method"
ANNOTATED = (
    ("oracle.phases", "run_call"),
    ("oracle.phases", "head_call"),
    ("oracle.phases", "draft_head"),
    ("oracle.phases", "verify_head"),
    ("oracle.phases", "accept"),
    ("oracle.phases", "finish_round"),
    ("judge_jax.backend", "run_call"),  # the judge's round takes these four by name
    ("judge_jax.backend", "draft_head"),
    ("judge_jax.backend", "verify_head"),
    ("judge_jax.backend", "finish_round"),
    ("oracle.sampling", "processed_logits"),
    ("judge_jax.model", "JaxLoopedModel.call"),
    ("judge_jax.model", "JaxLoopedModel.head_rows"),
    ("judge_jax.model", "JaxLoopedModel._put"),
    ("judge_jax.model", "JaxLoopedModel._get"),
    ("judge_jax.model", "JaxLoopedModel._step"),
    ("judge_jax.backend", "_RoundModel.flush"),
    ("judge_jax.backend", "_RoundModel._kick"),
)


@contextlib.contextmanager
def annotated():
    """Wrap ANNOTATED in TraceAnnotation("J:<name>") while inside; restore them after."""
    import importlib

    import jax

    saved = []
    for mod_name, attr in ANNOTATED:
        owner = importlib.import_module(mod_name)
        *path, name = attr.split(".")
        for p in path:
            owner = getattr(owner, p)
        fn = owner.__dict__[name]

        def wrap(fn=fn, label=f"J:{name}"):
            @functools.wraps(fn)
            def inner(*a, **kw):
                with jax.profiler.TraceAnnotation(label):
                    return fn(*a, **kw)

            return inner

        setattr(owner, name, wrap())
        saved.append((owner, name, fn))
    try:
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


SHORT_GAP_NS = 100_000  # an idle gap shorter than 0.1 ms is a launch gap between queued kernels


def _union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def gaps(trace_dir: str, top: int = 8) -> dict:
    """Read the newest .xplane.pb under trace_dir; see the module docstring."""
    from jax.profiler import ProfileData

    files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True), key=os.path.getmtime)
    assert files, f"no .xplane.pb under {trace_dir}"
    return read(ProfileData.from_file(files[-1]), top)


def read(data, top: int = 8) -> dict:
    """gaps() of a jax ProfileData (a trace's XSpace)."""
    host, dev, device_lines, kernels = [], {"compute": [], "copy": []}, {}, []
    for plane in data.planes:
        if plane.name == "/host:CPU":
            for line in plane.lines:
                ev = [(e.start_ns, e.end_ns, e.name) for e in line.events if e.name.startswith("J:")]
                if len(ev) > len(host):  # the main thread's line: the most annotations
                    host = ev
        elif plane.name.startswith("/device:GPU:0"):
            for line in plane.lines:
                events = [(e.start_ns, e.end_ns) for e in line.events]
                device_lines[line.name] = len(events)
                if not line.name.startswith("Stream"):
                    continue  # "XLA Modules" / "XLA Ops" repeat the streams' events
                kind = "copy" if "memcpy" in line.name.lower() else "compute"
                dev[kind] += events
                if kind == "compute":
                    kernels += [(e.start_ns, e.end_ns, e.name) for e in line.events]
    rounds = [(s, e) for s, e, n in host if n == "J:round"]
    assert rounds, "no J:round annotation in the trace"
    t0, t1 = rounds[0]
    out = {"wall_ms": round((t1 - t0) / 1e6, 3), "host_ms": {}}
    inner = [(s, e, n) for s, e, n in host if t0 <= s and e <= t1 and n != "J:round"]
    for s, e, n in inner:
        out["host_ms"][n[2:]] = out["host_ms"].get(n[2:], 0.0) + (e - s) / 1e6
    out["host_ms"] = {k: round(v, 3) for k, v in sorted(out["host_ms"].items(), key=lambda kv: -kv[1])}
    if device_lines:
        out["device_lines"] = device_lines  # line name -> events (which lines were read)
    if not dev["compute"]:
        return out
    busy = [(max(s, t0), min(e, t1)) for s, e in _union(dev["compute"]) if e > t0 and s < t1]
    copies = [(max(s, t0), min(e, t1)) for s, e in _union(dev["copy"]) if e > t0 and s < t1]
    idle, cur = [], t0
    for s, e in busy:
        if s > cur:
            idle.append((cur, s))
        cur = max(cur, e)
    if cur < t1:
        idle.append((cur, t1))
    short = [(s, e) for s, e in idle if e - s < SHORT_GAP_NS]
    by = {}
    step = 20_000  # ns: idle time attributed in slices of 20 us to the innermost annotation
    for s, e in idle:
        if e - s < SHORT_GAP_NS:
            continue  # between two kernels of work already queued: not the host's doing
        x = s
        while x < e:
            y = min(e, x + step)
            mid = (x + y) / 2
            active = sorted((ss - es, n[2:]) for ss, es, n in inner if ss <= mid < es)  # outermost first
            name = ">".join(n for _, n in active[-2:]) if active else "(between annotations)"
            by[name] = by.get(name, 0.0) + (y - x) / 1e6
            x = y
    per_kernel = {}  # name -> [ms, launches] within the round
    for s, e, name in kernels:
        if t0 <= s < t1:
            k = per_kernel.setdefault(name, [0.0, 0])
            k[0] += (e - s) / 1e6
            k[1] += 1
    out.update(
        device_by_kernel={
            n: [round(ms, 3), c] for n, (ms, c) in sorted(per_kernel.items(), key=lambda kv: -kv[1][0])[:top]
        },
        device_launches=sum(c for _, c in per_kernel.values()),
        device_busy_ms=round(sum(e - s for s, e in busy) / 1e6, 3),
        copy_ms=round(sum(e - s for s, e in copies) / 1e6, 3),
        idle_ms=round(sum(e - s for s, e in idle) / 1e6, 3),
        idle_gaps=len(idle),
        idle_short_ms=round(sum(e - s for s, e in short) / 1e6, 3),  # gaps under SHORT_GAP_NS
        idle_short_gaps=len(short),
        idle_by=dict(sorted(((k, round(v, 3)) for k, v in by.items()), key=lambda kv: -kv[1])[:top]),
    )
    return out
