"""Sequence-dependent logits processors inside speculative rounds (oracle/processors.py; the
chain of oracle/sampling_params.py: mask, bad_words, min_tokens, logit_bias, penalties,
no_repeat_ngram, then the filters). The logits at offset o see the prompt, the output of earlier rounds and this
round's drafts 1..o (oracle.phases.seen, oracle.traces.seen_in): the context plain
decoding would have had. Requests here always carry processors, on small vocabularies (8-24
tokens) so that they bite (strategies.processor_kwargs: repeats, penalties up to 2, biases
that change decisions, bad words from the prompt's tokens, min_tokens with stop tokens), and
the first two properties add bad words and stop tokens (with min_tokens around them) cut
from each request's own plain decode (`with_recent_words`), so that they bite inside rounds.

* test_greedy_speculative_decoding_is_plain_decoding (any backend): greedy requests emit
  exactly the same tokens under speculative rounds (any K_i, d < D, both modes and RNG
  policies) as under one-token-per-step decoding (every round K = 0) with the same
  processors, whatever is accepted. Inexact backends: a first difference is excused only at
  a near tie of the backend's own processed logits (the dtype's margin row, as the judge
  excuses divergences); the sequences are compared up to it.
  test_each_processor_alone_is_plain_decoding: the same, per processor step of
  oracle.sampling_params.CHAIN, with that step alone on (a new step is covered once its strategy is
  named in CHAIN).
* test_forced_drafts_follow_the_plain_decode (exact backends whose sessions run
  oracle.phases, i.e. the reference and meta_tests.faulty): the draft head is replaced
  (a `Phases` with another draft_head) by one that drafts the plain decode's next tokens and,
  for sampled requests, gives q := the plain decode's p at that position; the accept
  uniforms are 1 - 2**-53 and the bonus uniform the plain decode's. Then every draft must be
  accepted, and the emitted tokens and the verification distributions (through the backend's
  sampling functions) equal the plain decode's at every position. This catches a penalty
  (or bad-word match, or min_tokens count) computed once per round.
* test_processors_draw_no_uniforms: RNG consumption with processors is RNG consumption
  without them for the same accept/reject outcomes: each round's events are
  rng_trace.round_layout(policy, K, accepted) with the values of the request's stream in
  order (host-RNG backends), and the same scenario without processors on the reference
  consumes the same uniforms for as long as its outcomes are the same.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from oracle import phases as oracle_phases
from oracle.judge.scenario import Case
from oracle.judge.comparison.decisions import greedy_margin
from oracle.traces import seen_in
from oracle.phases import PHASES
from oracle.sampling_params import CHAIN, SamplingParams
from oracle.tolerances import TOLERANCES

from . import harness
from .harness import examples
from .strategies import (
    MODES,
    base_params,
    seeded_model,
    cap,
    depths,
    greedy_params,
    model_configs,
    policies,
    prompts,
    request_depths,
    token_counts,
    unmasked,
    weight_seeds,
    with_processors,
)

ACCEPT_ALWAYS = 1.0 - 2.0**-53  # u * q(x) < p(x) whenever p(x) = q(x) > 0


# ---- inputs --------------------------------------------------------------------------------


@st.composite
def processor_request(draw, vocab: int, prompt, kind: str = "any", only: str | None = None) -> SamplingParams:
    """One request with processors (always; only: that step alone): greedy (kind "greedy") or
    either; in half the cases stop tokens (up to a third of the vocabulary) and sometimes
    max_tokens, so min_tokens bites."""
    p = draw(greedy_params(vocab) if kind == "greedy" else base_params(vocab))
    if draw(st.booleans()):
        stops = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=max(1, vocab // 3), unique=True))
        p = dataclasses.replace(p, stop_token_ids=tuple(stops), max_tokens=draw(st.none() | st.integers(4, 24)))
    return draw(with_processors(p, vocab, prompt, only))


@st.composite
def processor_scenarios(draw, kind: str = "any", rounds=(2, None), only: str | None = None) -> Case:
    """1-3 requests with processors on a small model, every request in every round (K_i
    drawn per round), per-request depths in half the runs."""
    cfg = draw(model_configs(vocab=(8, 24)))
    d, D = draw(depths())
    n = draw(st.integers(1, min(3, cap("ORACLE_MAX_REQUESTS"))))
    ragged = draw(st.booleans())
    depth_list = tuple(draw(request_depths(D)) for _ in range(n)) if ragged else None
    prompt_list = tuple(draw(prompts(cfg.vocab_size)) for _ in range(n))
    params = tuple(draw(processor_request(cfg.vocab_size, prompt_list[i], kind, only)) for i in range(n))
    lo, hi = rounds
    ops = [("add", i) for i in range(n)]
    for _ in range(draw(st.integers(lo, hi or cap("ORACLE_MAX_ROUNDS")))):
        ops.append(("step", tuple((i, draw(token_counts())) for i in range(n))))
    return Case.from_ops(cfg, draw(weight_seeds()), d, D, draw(policies()), prompt_list, params, ops, depth_list)


def plain_scenario(sc: Case, lengths: dict) -> Case:
    """sc with one-token rounds (K = 0): request i in rounds 0..lengths[i]-1."""
    ops = [("add", i) for i in range(len(sc.prompts))]
    for j in range(max(lengths.values(), default=0)):
        members = tuple((i, 1) for i in range(len(sc.prompts)) if lengths[i] > j)
        ops.append(("step", members))
    return sc.with_ops(ops)


def planned(sc: Case) -> dict:
    """rid -> the tokens its rounds would emit with every draft accepted (sum of T_i)."""
    return {
        rid: sum(t for op, arg in sc.ops if op == "step" for r, t in arg if r == rid) for rid in range(len(sc.prompts))
    }


def with_recent_words(sc: Case, data) -> Case:
    """sc with, on some requests, words cut from the request's own plain decode (on the
    reference), so that they bite inside rounds (words drawn from the prompt rarely do):
    a bad word of 2-3 consecutive generated tokens (its prefix is generated, often as the
    drafts of one round, and its last token is what the decode would emit next), and a stop
    token the decode generates at position m with min_tokens in m..m+4 (the stop token is
    masked exactly where the decode would emit it). Each only where the mask leaves tokens
    besides the masked ones."""
    pre = harness.run(harness.REFERENCE, plain_scenario(sc, planned(sc)), "block")
    params = list(sc.params)
    for rid, p in enumerate(params):
        g = generated(pre, sc, rid)
        left = set(unmasked(p, sc.cfg.vocab_size)) - set(p.stop_token_ids) - {w[-1] for w in p.bad_words if len(w) == 1}
        if len(g) >= 2 and data.draw(st.booleans(), label=f"bad word from the decode of request {rid}"):
            n = data.draw(st.integers(0, len(g) - 2), label="at")
            word = tuple(g[n : n + data.draw(st.integers(2, min(3, len(g) - n)), label="length")])
            if left - {word[-1]}:
                p = dataclasses.replace(p, bad_words=p.bad_words + (word,))
                left -= {word[-1]}
        if g and data.draw(st.booleans(), label=f"stop token from the decode of request {rid}"):
            m = data.draw(st.integers(0, len(g) - 1), label="stop at")
            low = min(m, p.max_tokens or m)
            k = data.draw(st.integers(low, low + 4), label="min_tokens")
            if left - {g[m]}:
                p = dataclasses.replace(
                    p,
                    stop_token_ids=tuple(sorted(set(p.stop_token_ids) | {g[m]})),
                    min_tokens=min(k, p.max_tokens or k),
                )
        params[rid] = p
    return dataclasses.replace(sc, params=tuple(params))


def generated(run, sc: Case, rid: int) -> list[int]:
    return run.tokens[rid][len(sc.prompts[rid]) :]


def finished(run, rid: int):
    return next((tr.finished[rid] for tr in run.traces if rid in tr.finished), None)


def position(run, rid: int, n: int):
    """(round trace, offset) of the logits that decided request rid's generated token n."""
    for tr in run.traces:
        if rid in tr.requests and tr.generated[rid] <= n < tr.generated[rid] + len(tr.kept(rid)):
            return tr, n - tr.generated[rid]
    raise AssertionError(f"request {rid}: no round emitted generated token {n}")


def processed_at(bk, run, rid: int, n: int, params):
    tr, o = position(run, rid, n)
    seen = seen_in(tr, rid, o, tr.drafts[rid])
    return harness.sampling_impl(bk).processed_logits(tr.verify_logits[(rid, o)], params, seen)


def bite_events(bk, run, sc: Case) -> None:
    """Coverage: did the processors change a greedy decision (raw vs processed argmax)?"""
    changed = False
    for rid, p in enumerate(sc.params):
        for n in range(len(generated(run, sc, rid))):
            tr, o = position(run, rid, n)
            raw = tr.verify_logits[(rid, o)]
            changed |= int(np.argmax(raw)) != int(np.argmax(processed_at(bk, run, rid, n, p)))
    event("processors changed a greedy decision" if changed else "processors changed no greedy decision")


# ---- a. greedy speculative decoding is plain decoding ----------------------------------------


@settings(max_examples=examples(40))
@given(
    sc=processor_scenarios(kind="greedy"),
    mode=st.sampled_from(MODES),
    plain_mode=st.sampled_from(MODES),
    data=st.data(),
)
def test_greedy_speculative_decoding_is_plain_decoding(sc, mode, plain_mode, data):
    assert_plain_decoding(with_recent_words(sc, data), mode, plain_mode)


@pytest.mark.parametrize("step", [s.name for s in CHAIN.named("processor")])
@settings(max_examples=examples(15))
@given(mode=st.sampled_from(MODES), plain_mode=st.sampled_from(MODES), data=st.data())
def test_each_processor_alone_is_plain_decoding(step, mode, plain_mode, data):
    """The property above with one processor step of oracle.sampling_params.CHAIN on, alone (a step
    that needs stop tokens is off where the request has none)."""
    assert_plain_decoding(data.draw(processor_scenarios(kind="greedy", only=step), label="scenario"), mode, plain_mode)


def assert_plain_decoding(sc, mode, plain_mode):
    bk, sc = harness.backend_for(sc)
    spec = harness.run(bk, sc, mode)
    lengths = {rid: len(generated(spec, sc, rid)) for rid in range(len(sc.prompts))}
    plain = harness.run(bk, plain_scenario(sc, lengths), plain_mode)
    margin = 0.0 if bk.exact else TOLERANCES[bk.dtype]["margin"]
    where = f"speculative rounds ({mode}) vs plain decoding ({plain_mode})"
    for rid, p in enumerate(sc.params):
        a, b = generated(spec, sc, rid), generated(plain, sc, rid)
        n = next((n for n, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if n is None:
            assert len(a) == len(b) and finished(spec, rid) == finished(plain, rid), (
                f"{bk.name}: request {rid} generated {a} ({finished(spec, rid)}) under {where}: {b} "
                f"({finished(plain, rid)}); params {p.to_json()}; {sc.describe()}"
            )
            continue
        near = min(
            greedy_margin(processed_at(bk, spec, rid, n, p), a[n], b[n]),
            greedy_margin(processed_at(bk, plain, rid, n, p), b[n], a[n]),
        )
        assert near <= margin, (
            f"{bk.name}: request {rid} generated token {n} is {a[n]} under speculative rounds "
            f"({mode}), {b[n]} under plain decoding ({plain_mode}) (margin {near:.3g} > "
            f"{margin:.3g}); speculative {a}, plain {b}; params {p.to_json()}; {sc.describe()}"
        )
        event("excused near tie")
    accepted = sum(tr.accepted[r] for tr in spec.traces for r in tr.requests)
    event(f"drafts accepted in all: {'0' if not accepted else '1-4' if accepted < 5 else '5+'}")
    bite_events(bk, plain, sc)


# ---- b. drafts forced to the plain decode ----------------------------------------------------


def forced_draft_head(plan: dict):
    """A draft head that drafts the plain decode's tokens (plan: rid -> (tokens, probs)) and,
    for sampled requests, records q := the plain p of that position (drawing the draft
    uniform all the same: the RNG layout is unchanged)."""

    def draft_head(st, heads):
        if not heads:
            return
        logits = oracle_phases.head_call(st, heads, 0, "draft head", "d_i-1")
        for (i, o), lg in zip(heads, logits):
            req = st.requests[i]
            st.trace.draft_logits[(req.rid, o)] = lg
            toks, probs = plan[req.rid]
            n = req.generated + o  # draft o+1 is generated token n
            if not req.params.greedy:
                st.q[(i, o)] = probs[n]
                req.rng.draw("draft", o)
            st.tokens[i].append(toks[n])
        st.trace.calls[-1]["draft_head"] = [[st.requests[i].rid, o] for i, o in heads]
        st.stats["draft_head_calls"] += 1
        st.stats["draft_head_rows"] += len(heads)

    return draft_head


def force(session, plan: dict) -> bool:
    """Make the session's rounds run forced_draft_head (False: it does not run oracle.phases)."""
    fn = getattr(session, "round_fn", None)
    if fn is None:
        return False
    base = fn.keywords.get("phases", PHASES) if isinstance(fn, functools.partial) else PHASES
    rounds = fn.func if isinstance(fn, functools.partial) else fn
    session.round_fn = functools.partial(rounds, phases=dataclasses.replace(base, draft_head=forced_draft_head(plan)))
    return True


def plain_plan(bk, run, sc: Case) -> dict:
    """rid -> (generated tokens, the distribution (sampled: filtered probs; greedy: processed
    logits) of every position, the uniform of every position) of a one-token-per-step run."""
    S = harness.sampling_impl(bk)
    out = {}
    for rid, p in enumerate(sc.params):
        toks, dists, us = generated(run, sc, rid), [], []
        for n in range(len(toks)):
            tr, o = position(run, rid, n)
            seen = seen_in(tr, rid, 0, [])
            lg = tr.verify_logits[(rid, 0)]
            dists.append(S.processed_logits(lg, p, seen) if p.greedy else S.filtered_probs(lg, p, seen))
            us.append(next((e.value for e in tr.rng_events if e.request == rid), None))
        out[rid] = (toks, dists, us)
    return out


@settings(max_examples=examples(40))
@given(sc=processor_scenarios(kind="any"), mode=st.sampled_from(MODES), data=st.data())
def test_forced_drafts_follow_the_plain_decode(sc, mode, data):
    bk = harness.backend()
    if not bk.exact:
        pytest.skip(f"backend {bk.name} is not exact: forced drafts need bit-equal logits across batchings")
    bk, sc = harness.backend_for(with_recent_words(sc, data))
    model = seeded_model(sc.cfg, sc.weight_seed)
    plain = harness.run(bk, plain_scenario(sc, planned(sc)), "loop")
    plan = plain_plan(bk, plain, sc)
    # the forced rounds: the drawn K_i, cut so that no round drafts past the plain decode's end
    pos = {rid: 0 for rid in plan}
    rounds, replay = [], {rid: [] for rid in plan}
    for op, arg in sc.ops:
        if op != "step":
            continue
        counts = {}
        for rid, T in arg:
            left = len(plan[rid][0]) - pos[rid]
            if left <= 0:
                continue
            K = min(T - 1, left - 1)
            counts[rid] = K + 1
            if not sc.params[rid].greedy:
                replay[rid] += [0.5] * K + [ACCEPT_ALWAYS] * K + [plan[rid][2][pos[rid] + K]]
            pos[rid] += K + 1
        if counts:
            rounds.append(counts)
    s = bk.session(model, sc.d, sc.D, mode, sc.policy)
    if not force(s, {rid: plan[rid][:2] for rid in plan}):
        pytest.skip(f"backend {bk.name} does not run oracle.phases: its drafts cannot be forced")
    for rid in plan:
        kw = {} if sc.depths is None else {"depths": tuple(sc.depths[rid])}
        s.add(rid, list(sc.prompts[rid]), sc.params[rid], replay=replay[rid] + [0.5] * 64, **kw)
    S = harness.sampling_impl(bk)
    where = f"{bk.name} {mode}, drafts forced to the plain decode, {sc.describe()}"
    for counts in rounds:
        tr = s.step(counts)
        for rid, T in counts.items():
            p, K, n0 = sc.params[rid], T - 1, tr.generated[rid]
            toks, dists, _ = plan[rid]
            at = f"{where}: round {tr.round} request {rid} ({p.to_json()}), generated tokens {n0}..{n0 + K}"
            assert tr.accepted[rid] == K, (
                f"{at}: accepted {tr.accepted[rid]} of the {K} drafts the plain decode emitted "
                f"{toks[n0 : n0 + K]} (the verification at offset {tr.accepted[rid]} saw other logits)"
            )
            assert tr.emitted[rid] == toks[n0 : n0 + K + 1], (
                f"{at}: emitted {tr.emitted[rid]}, plain decoding {toks[n0 : n0 + K + 1]}"
            )
            for o in range(K + 1):
                seen = seen_in(tr, rid, o, tr.drafts[rid])
                lg = tr.verify_logits[(rid, o)]
                got = S.processed_logits(lg, p, seen) if p.greedy else S.filtered_probs(lg, p, seen)
                if not np.array_equal(got, dists[n0 + o]):
                    with np.errstate(invalid="ignore"):  # -inf - -inf: equal, masked
                        t = int(np.argmax(np.abs(np.nan_to_num(got - dists[n0 + o], posinf=1e9, neginf=-1e9))))
                    raise AssertionError(
                        f"{at}: the verification {'logits' if p.greedy else 'distribution'} of "
                        f"offset {o} differs from plain decoding's at token {t}: {got[t]} vs "
                        f"{dists[n0 + o][t]}"
                    )
            event(
                f"forced round: K = {'0' if K == 0 else '1-3' if K < 4 else '4+'}, "
                f"{'greedy' if p.greedy else 'sampled'}"
            )
    for rid in plan:
        assert s.tokens(rid)[len(sc.prompts[rid]) :] == plan[rid][0], (
            f"{where}: request {rid} committed {s.tokens(rid)}, plain decoding {plan[rid][0]}"
        )


# ---- c. processors draw no uniforms ---------------------------------------------------------


def without_processors(p: SamplingParams) -> SamplingParams:
    return dataclasses.replace(p, **CHAIN.off("processor"))


@settings(max_examples=examples(30))
@given(sc=processor_scenarios(kind="any", rounds=(1, None)), mode=st.sampled_from(MODES))
def test_processors_draw_no_uniforms(sc, mode):
    bk, sc = harness.backend_for(sc)
    params = dict(enumerate(sc.params))
    r = harness.run(bk, sc, mode)
    problem = harness.rng_use_violation(bk, r, params, sc.policy)
    assert problem is None, f"{r.label()} with processors, {sc.describe()}: {problem}"
    # the same requests without processors (on the reference): the same uniforms while the
    # outcomes (K_i, accepted) are the same
    bare = harness.run(
        harness.REFERENCE, dataclasses.replace(sc, params=tuple(map(without_processors, sc.params))), mode
    )
    same = 0
    for rid, p in params.items():
        if p.greedy:
            continue
        for a, b in zip(r.traces, bare.traces):
            if rid not in a.requests or rid not in b.requests or a.accepted[rid] != b.accepted[rid]:
                break
            ea = [(e.purpose, e.offset, e.value, e.used) for e in a.rng_events if e.request == rid]
            eb = [(e.purpose, e.offset, e.value, e.used) for e in b.rng_events if e.request == rid]
            if harness.host_rng(bk):
                assert ea == eb, (
                    f"{r.label()}, {sc.describe()}: round {a.round} request {rid} accepted "
                    f"{a.accepted[rid]} with and without processors, but drew {ea} with them and "
                    f"{eb} without"
                )
            else:
                assert [x[:2] + x[3:] for x in ea] == [x[:2] + x[3:] for x in eb], (
                    f"{r.label()}, {sc.describe()}: round {a.round} request {rid}: "
                    f"RNG layout {ea} vs {eb} without processors"
                )
            same += 1
            if a.finished.get(rid) or b.finished.get(rid):
                break
    event(f"request rounds with the outcome of the bare run: {'0' if not same else '1-3' if same < 4 else '4+'}")
