"""The `rules` plan kind (oracle/judge/plans/plan.py `rules_plan`): one run's round traces judged against
the rules that need no second run. Well formed (malformed.malformed_rounds: `trace record` refuses
to write a malformed recording); with params and a policy, each request's stop cut and RNG layout
(decisions.policy_problem); with streams, each sampled request's seeded host stream
(decisions.stream_problem); with schedule (the mode), each round's calls against its schedule
(schedule.schedule_violation); with cache_free (a logits tolerance) and the model, every logits
vector against the cache-free recompute (cache_free.cache_free_check); with events, the run's RNG
events in order equal to those (rng_trace.first_difference: a run that must draw exactly as
another did). Each problem is a failed check: "malformed", "rules", "rng_stream", "schedule",
"cache_free", "rng_events"."""

from __future__ import annotations

from ...comparison.cache_free import cache_free_check
from ...comparison.decisions import policy_problem, stream_problem
from ...comparison.malformed import malformed_rounds
from ..plan import Executor, RulesPlan
from ....rng_trace import first_difference
from ....schedule import schedule_violation


def run(plan: RulesPlan, ex: Executor, v) -> None:
    """The rules plan's checks into v (its heading: verdict._heading)."""
    traces, r = plan.traces[0], plan.rules
    cfg = None if plan.model is None else plan.model.cfg
    vocab = None if cfg is not None else next((len(lg) for t in traces for lg in t.verify_logits.values()), None)
    bad = malformed_rounds(traces, cfg, vocab)
    v.checks += [{"name": "malformed", "ok": False, "detail": line, "failure": None} for line in bad]
    if not bad and r.get("params") is not None:
        for tr in traces:
            problem = policy_problem(tr, r["params"], r["policy"])
            if problem:
                v.checks.append({"name": "rules", "ok": False, "detail": problem, "failure": None})
                break
    if not bad:
        _run_rules(v, plan, traces, r)
    for rid, (seed, events) in r.get("streams", {}).items():
        problem = stream_problem(events, seed, rid)
        if problem:
            v.checks.append({"name": "rng_stream", "ok": False, "detail": problem, "failure": None})
        v.counters["rng_events_compared"] += len(events)
    for tr in traces:
        v.counters["request_rounds"] += len(tr.requests)
        v.counters["tokens_compared"] += sum(len(e) for e in tr.emitted.values())
        v.counters["rng_events_compared"] += len(tr.rng_events)
    v.cases.append({"name": "traces", "ok": not v.checks})


def _run_rules(v, plan, traces, r) -> None:
    """The schedule, cache-free and event-order rules of a well-formed run, into v."""
    if r.get("schedule") is not None:
        problem = next((p for p in (schedule_violation(tr, r["schedule"]) for tr in traces) if p), None)
        if problem:
            v.checks.append({"name": "schedule", "ok": False, "detail": problem, "failure": None})
    if r.get("cache_free") is not None:
        check, n = cache_free_check(plan.model, traces, r["cache_free"])
        v.checks.append({"name": "cache_free", "ok": check.ok, "detail": check.detail, "failure": None})
        v.counters["logits_compared"] += n
    if r.get("events") is not None:
        diff = first_difference(list(r["events"]), [e for tr in traces for e in tr.rng_events])
        if diff:
            v.checks.append({"name": "rng_events", "ok": False, "detail": diff, "failure": None})
