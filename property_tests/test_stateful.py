"""Stateful test of the round lifecycle (hypothesis.stateful).

The backend's session (mode A) is driven in lockstep with a reference session in the other
mode B, the model of sequential semantics. Rules:

* add          a new request joins both sessions;
* submit       a round over a non-empty subset of the active requests with random T_i is
               submitted; up to `backend.max_in_flight` (default 2) rounds may be in flight.
               Sessions with `submit(counts) -> handle` / `collect(handle) -> RoundTrace` use
               them (deferred collection); others run `step(counts)` at collection;
* collect      the oldest round in flight is collected and the reference runs the same
               round; the two traces must agree (the one verdict, a traces plan: exact, or the dtype's
               tolerance with the reference replaying the backend's uniforms);
* preempt      (no round in flight) a request is removed from both sessions; the committed
               tokens returned must agree;
* resume       (no round in flight) a preempted request is added again with prompt = its
               committed tokens and the same SamplingParams. Semantics checked: a resumed
               request is a new request, its RNG stream restarts from params.seed (the
               engine does not carry generator state across preemption) and its events'
               round numbers continue the session's round counter;
* bad round    (no round in flight) a round naming an unknown request, a zero or
               non-integer token count, or no request at all, and remove() of an unknown
               request, must raise, in both sessions, and leave tokens, KV frontiers and the
               round counter unchanged (the next round's number must equal the reference's).

Rounds in flight are collected before add/preempt/resume/bad round (requests join and leave
between rounds); each rule's @precondition says in which states it applies.

Invariants (whenever no round is in flight): committed tokens equal the reference's; KV
frontiers are len(tokens) - 1 (where the backend exposes them); each active sampled
request's RNG values since it (re)joined are the prefix of PCG64(seed) (exact / host-RNG
backends).
"""

from __future__ import annotations

from hypothesis import assume, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from oracle.judge.plans.plan import INLINE, rules_plan, traces_plan
from oracle.judge.plans.verdict import judge
from oracle.runtime.contract import session_capabilities

from . import harness
from .harness import examples
from .strategies import (
    MODES,
    seeded_model,
    depths,
    model_configs,
    policies,
    prompts,
    sampling_params,
    token_counts,
    weight_seeds,
)

MAX_ACTIVE = 4


class RoundLifecycle(RuleBasedStateMachine):
    @initialize(
        cfg=model_configs(max_layers=1, vocab=(16, 64)),
        seed=weight_seeds(),
        depth=depths(max_D=4),
        mode=st.sampled_from(MODES),
        policy=policies(),
        n=st.integers(1, MAX_ACTIVE),
        data=st.data(),
    )
    def start(self, cfg, seed, depth, mode, policy, n, data):
        self.bk = harness.backend()
        policy = policy if policy in self.bk.policies else self.bk.policies[0]
        self.cfg, (self.d, self.D) = cfg, depth
        model = self.model = seeded_model(cfg, seed)
        self.sut = self.bk.session(model, self.d, self.D, mode, policy)
        self.ref = harness.REFERENCE.session(model, self.d, self.D, "loop" if mode == "block" else "block", policy)
        self.replay = not harness.host_rng(self.bk)  # device RNG: the reference replays its uniforms
        self.deferred = session_capabilities(self.sut).submit_collect
        self.max_in_flight = harness.caps(self.bk).max_in_flight
        self.active, self.preempted, self.in_flight, self.events = {}, {}, [], {}
        self.diverged = set()
        self.next_rid, self.rounds = 0, 0
        for _ in range(n):  # the first requests
            self._new_request(data)

    def _new_request(self, data):
        prompt = data.draw(prompts(self.cfg.vocab_size, max_len=8), label="prompt")
        params = data.draw(sampling_params(self.cfg.vocab_size), label="params")
        self._join(self.next_rid, prompt, params)
        self.next_rid += 1

    # ---- helpers ----
    def _join(self, rid, prompt, params):
        self.sut.add(rid, list(prompt), params)
        self.ref.add(rid, list(prompt), params, **({"replay": []} if self.replay else {}))
        self.active[rid], self.events[rid] = params, []

    def _drop(self, rid):
        got, want = list(self.sut.remove(rid)), list(self.ref.remove(rid))
        assert got == want, f"remove({rid}) returned {got}, the reference {want}"
        del self.active[rid], self.events[rid]
        return want

    def _snapshot(self):
        return {rid: (list(self.sut.tokens(rid)), harness.kv_frontiers(self.sut, rid)) for rid in self.active}

    # ---- rules ----
    def _drain(self):
        """Requests join and leave between rounds: collect every round in flight first (an
        inexact backend's diverged requests leave then, so `active` may shrink)."""
        while self.in_flight:
            self.collect()

    @precondition(lambda self: len(self.active) < MAX_ACTIVE)
    @rule(data=st.data())
    def add(self, data):
        self._drain()
        event("rule: add")
        self._new_request(data)

    @precondition(lambda self: self.active)
    @rule(data=st.data())
    def submit(self, data):
        if len(self.in_flight) >= self.max_in_flight:
            self.collect()
        event("rule: submit" if not self.in_flight else "rule: submit with a round in flight")
        members = data.draw(st.lists(st.sampled_from(sorted(self.active)), min_size=1, unique=True), label="batch")
        counts = {rid: data.draw(token_counts(), label=f"T[{rid}]") for rid in members}
        handle = self.sut.submit(counts) if self.deferred else None
        self.in_flight.append((handle, counts))

    @precondition(lambda self: self.in_flight)
    @rule()
    def collect(self):
        event("rule: collect")
        self.rounds += 1
        handle, counts = self.in_flight.pop(0)
        tr = self.sut.collect(handle) if self.deferred else self.sut.step(counts)
        if self.replay:  # this round's uniforms, and padding a diverged path may consume
            for rid in counts:  # (dropped unconsumed next round, so agreeing requests stay aligned)
                rng = self.ref.requests[rid].rng
                rng.replay[rng.pos :] = [e.value for e in tr.rng_events if e.request == rid] + [0.5] * (
                    2 * counts[rid] + 1
                )
        ref_tr = self.ref.step(counts)
        assert tr.round == ref_tr.round, f"round counter {tr.round}, the reference's {ref_tr.round}"
        live = [rid for rid in counts if rid not in self.diverged]
        if live:  # a round of only diverged requests (queued before they diverged) has nothing to judge
            ref_sub, dtype = [ref_tr.restrict(live, batch=False)], harness.dtype_of(self.bk)
            # the one verdict on this round (a traces plan): reduced precision by the noise twin's
            # bounds, as every other judgement of the suite (the fixed row's false alarms:
            # docs/results.md, "Calibration of the bfloat16 row")
            v = judge(traces_plan(ref_sub, [tr.restrict(live, batch=False)], dtype, self.model), INLINE)
            assert v.ok, f"{self.bk.name} vs reference: {v.first_failure()}"
        for rid in live:
            self.events[rid].extend(e for e in ref_tr.rng_events if e.request == rid)
            if tr.emitted[rid] != ref_tr.emitted[rid]:  # an excused divergence (inexact backends)
                self.diverged.add(rid)
        if not self.in_flight:
            for rid in sorted(self.diverged):
                self.sut.remove(rid), self.ref.remove(rid)
                del self.active[rid], self.events[rid]
            self.diverged.clear()

    @precondition(lambda self: self.active)
    @rule(data=st.data())
    def preempt(self, data):
        self._drain()
        assume(self.active)  # every active request diverged in the drained rounds: nothing to preempt
        event("rule: preempt")
        rid = data.draw(st.sampled_from(sorted(self.active)), label="preempt")
        params = self.active[rid]
        self.preempted[rid] = (self._drop(rid), params)

    @precondition(lambda self: self.preempted and len(self.active) < MAX_ACTIVE)
    @rule(data=st.data())
    def resume(self, data):
        self._drain()
        event("rule: resume")
        rid = data.draw(st.sampled_from(sorted(self.preempted)), label="resume")
        tokens, params = self.preempted.pop(rid)
        self._join(rid, tokens, params)

    @rule(data=st.data())
    def bad_round(self, data):
        self._drain()
        known = sorted(self.active)
        kinds = ["unknown request", "no request", "remove unknown request"]
        kinds += ["zero tokens", "non-integer count"] if known else []  # these need a request to name
        kind = data.draw(st.sampled_from(kinds), label="kind")
        event(f"rule: bad round ({kind})")
        before = self._snapshot()
        if kind == "remove unknown request":
            for name, sess in (("backend", self.sut), ("reference", self.ref)):
                try:
                    sess.remove(self.next_rid + 1000)
                except Exception:
                    continue
                raise AssertionError(f"{name}: remove() of an unknown request did not raise")
            assert self._snapshot() == before, "a failed remove() changed the backend's state"
            return
        if kind == "unknown request":
            counts = {rid: 2 for rid in known[:1]} | {self.next_rid + 1000: 2}
        elif kind == "no request":
            counts = {}
        else:
            rid = data.draw(st.sampled_from(known), label="victim")
            counts = {r: 2 for r in known} | {rid: 0 if kind == "zero tokens" else 2.0}
        for name, sess in (("backend", self.sut), ("reference", self.ref)):
            try:
                if name == "backend" and self.deferred:
                    sess.collect(sess.submit(counts))
                else:
                    sess.step(counts)
            except Exception:
                continue
            raise AssertionError(f"{name} accepted an invalid round ({kind}): {counts}")
        assert self._snapshot() == before, f"a failed round ({kind}) changed the backend's state"

    def teardown(self):
        n = getattr(self, "rounds", 0)
        event(f"rounds per run: {'0' if not n else '1-4' if n < 5 else '5-9' if n < 10 else '10+'}")

    # ---- invariants ----
    @precondition(lambda self: not self.in_flight)
    @invariant()
    def committed_state_matches_reference(self):
        for rid in self.active:
            got, want = list(self.sut.tokens(rid)), list(self.ref.tokens(rid))
            assert got == want, f"request {rid}: committed tokens {got}, the reference {want}"
            f = harness.kv_frontiers(self.sut, rid)
            assert f is None or f == {len(got) - 1}, (
                f"request {rid}: KV frontiers {sorted(f)}, expected {{{len(got) - 1}}}"
            )
            assert self.ref.kv.frontiers(rid) == {len(want) - 1}
            params = self.active[rid]
            if not self.replay and not params.greedy:  # its seeded stream, by the one verdict (rules plan)
                v = judge(rules_plan([], streams={rid: (params.seed, self.events[rid])}, name=self.bk.name), INLINE)
                assert not any(c["name"] == "rng_stream" for c in v.failed), v.first_failure()


RoundLifecycle.TestCase.settings = settings(max_examples=examples(120))
TestRoundLifecycle = RoundLifecycle.TestCase
