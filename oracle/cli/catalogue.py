"""The built-in cases `python -m oracle check` runs (the case catalogue); the Case type is
oracle/judge/scenario.py, the runner oracle/judge/runner.py."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter

from ..judge.scenario import Case, command, make_case
from ..sampling_params import SamplingParams


def default_cases(vocab: int, model_flags: list[str] | None = None) -> list[Case]:
    """Several ragged batches, greedy and sampled (top-k, top-p), four (d, D) pairs, one batch
    of per-request target depths, stop tokens and max_tokens, banned and allowed ids, the logits processors, both
    RNG policies, multi-round generation with rollback and requests joining/leaving. The mask and
    processor cases derive their params from the model (`derived_params`, through Case.params_for):
    what they ban or penalise includes the reference's own top choices. Each case's reproduce line runs it
    alone: `check <model_flags> --case NAME`, where model_flags name the model the check ran on
    (default: the tiny preset, seed 0).
    (Over 80 lines: the catalogue is one list of case literals.)"""
    flags = list(model_flags) if model_flags is not None else ["--preset", "tiny", "--seed", "0"]
    G = SamplingParams()
    S = lambda seed, **kw: SamplingParams(temperature=kw.pop("t", 1.0), seed=seed, **kw)
    mixed = [G, S(1, top_k=8), S(2, top_p=0.8), S(3, t=0.7, top_k=20, top_p=0.9), G, S(5, t=1.5)]
    stop = [
        SamplingParams(stop_token_ids=(7,)),
        S(1, top_k=8, max_tokens=4),
        S(2, top_p=0.9, t=0.7, stop_token_ids=(46,), max_tokens=5),
        S(3, stop_token_ids=(3, 7)),
    ]
    # the mask and processor cases: params derived from the reference's own top choices (derived_params)
    masks = [(G, "banned"), (G, "allowed"), (S(1), "banned"), (S(2, top_k=8), "allowed")]
    procs = [
        (G, "bad_words"),
        (G, "bad_bigram"),
        (G, "min_tokens"),
        (G, "logit_bias"),
        (G, "repetition"),
        (S(3), "presence"),
        (S(4), "frequency"),
        (S(1, t=0.8), "all"),
    ]
    specs = [
        ("ragged (5,3,1) d=2 D=4", [{0: 5, 1: 3, 2: 1}], 2, 4, mixed[:3], 1, "sequential", None),
        ("uniform (5,5,5,5) d=2 D=4, 6 rounds", [{i: 5 for i in range(4)}] * 6, 2, 4, mixed[:4], 2, "sequential", None),
        (
            "ragged d=1 D=3, K changes per round",
            [{0: 3, 1: 1, 2: 6}, {0: 1, 1: 4, 2: 2}, {0: 9, 1: 2, 2: 1}, {0: 2, 1: 5, 2: 3}],
            1,
            3,
            [mixed[1], mixed[0], mixed[2]],
            3,
            "sequential",
            None,
        ),
        (
            "d=3 D=5 fixed policy, joins and leaves",
            [{0: 4, 1: 2}, {0: 4, 1: 3, 2: 5}, {2: 2, 3: 4}, {0: 1, 2: 5, 3: 3, 4: 2}],
            3,
            5,
            mixed[1:6],
            4,
            "fixed",
            None,
        ),
        (
            "per-request depths 2:4,1:3,3:5,1:4, 3 rounds",
            [{0: 5, 1: 3, 2: 1, 3: 4}, {0: 6, 1: 6, 2: 4, 3: 1}, {0: 3, 2: 2, 3: 3}],
            1,
            5,
            mixed[:4],
            6,
            "sequential",
            [(2, 4), (1, 3), (3, 5), (1, 4)],
        ),
        ("stop tokens and max_tokens, 4 rounds", [{0: 5, 1: 3, 2: 1, 3: 4}] * 4, 2, 4, stop, 7, "sequential", None),
        ("banned and allowed token ids, 2 rounds", [{0: 5, 1: 4, 2: 5, 3: 3}] * 2, 2, 4, masks, 9, "sequential", None),
        (
            "logits processors (penalties, bias, bad words, min_tokens), 3 rounds",
            [dict(enumerate((5, 4, 3, 5, 5, 5, 5, 4)))] * 3,
            2,
            4,
            procs,
            8,
            "sequential",
            None,
        ),
        (
            "d=1 D=2 greedy and sampled, 8 requests",
            [{i: 1 + (i * 3) % 7 for i in range(8)}] * 3,
            1,
            2,
            [mixed[i % 6] for i in range(8)],
            5,
            "sequential",
            None,
        ),
    ]
    cases = []
    for name, rounds, d, D, params, seed, policy, depths in specs:
        kinds = [k for _, k in params] if isinstance(params[0], tuple) else None
        c = make_case(
            name,
            rounds,
            d,
            D,
            [p[0] for p in params] if kinds else params,
            seed=seed,
            policy=policy,
            vocab=vocab,
            depths=depths,
            reproduce=command(["check", *flags, "--case", name]),
        )
        if kinds:
            c.derive = functools.partial(derived_params, kinds)
        cases.append(c)
    return cases


# How the mask and processor cases bite: each request's mask or processor is built from the
# reference's own top choices on this model (`tops`: one run of the case with the processors
# off on the FP32 reference), so that skipping the step, on the drafts or on the verification
# only, changes a token: what it bans is what the model would pick, and each penalty or bias is
# strong enough to move the top choice. A deterministic function of the model.
PLAIN_RUN_SECONDS = 10.0  # the plain run's estimated NumPy cost above which the prompt stands in
PLAIN_ROUNDS = 2  # the plain run: the case's first 2 rounds (where its steps bite first)
BIAS = -10.0  # logit_bias on the top choices (vLLM's range: [-100, 100])
REPETITION = 4.0  # repetition_penalty: seen tokens' positive logits / 4, or (1 / 4) x 4
PRESENCE = FREQUENCY = 2.0  # presence / frequency penalties: the largest vLLM takes, either sign


def tops(run, rid) -> list[int]:
    """Request rid's top choices in a run: the argmax of its first draft and first verification
    logits (its first round, offset 0: what it picks first at either depth), then the argmax of
    every other logits vector of the run, most frequent first (ties: first seen), then every token by
    its first verification logits (so there are always enough)."""
    seen = [tr for tr in run.traces if rid in tr.requests]
    first = [
        int(max(range(len(lg)), key=lg.__getitem__))
        for lg in (seen[0].draft_logits.get((rid, 0)), seen[0].verify_logits[(rid, 0)])
        if lg is not None
    ]
    every = [
        int(lg.argmax())
        for tr in seen
        for kind in (tr.draft_logits, tr.verify_logits)
        for (q, o), lg in sorted(kind.items())
        if q == rid
    ]
    counts = Counter(every)
    order = sorted(dict.fromkeys(every), key=lambda t: -counts[t])
    runners_up = [int(t) for t in (-seen[0].verify_logits[(rid, 0)]).argsort(kind="stable")]  # by its first logits
    return list(dict.fromkeys(first + order + runners_up))


def first_bite(run, rid, plain, field: str, values) -> dict:
    """{field: v} for the value v of `values` whose penalty changes both a draft choice and a
    verification choice (argmax; drafts at every offset, verification at those the round decided
    on) soonest along the
    reference's run of the plain case: the later of its first draft change and its first
    verification change, (round, offset), is the smallest, then the earlier; ties: the first value. Up to its first
    change the penalised run is that run, so this is where the step skipped on the drafts, or on
    the verification, first shows. A penalty acts on the tokens seen so far, so its sign decides
    where it bites: demoting them bites where the model would repeat one, boosting them where it
    would not."""
    from ..sampling import processed_logits
    from ..traces import seen_in

    if run is None:  # no plain run (derived_params): the first value
        return {field: values[0]}
    never = (len(run.traces), 0)
    best = None
    for v in values:
        params = dataclasses.replace(plain, **{field: v})
        first = {"draft": never, "verify": never}
        for n, tr in enumerate(tr for tr in run.traces if rid in tr.requests):
            drafts, a = tr.drafts[rid], tr.accepted[rid]
            for o in range(len(drafts) + 1):  # drafts at every offset < K, verification up to a
                for side, logits in (
                    ("draft", tr.draft_logits.get((rid, o))),
                    ("verify", tr.verify_logits[(rid, o)] if o <= a else None),
                ):
                    if (
                        logits is not None
                        and first[side] == never
                        and processed_logits(logits, params, seen_in(tr, rid, o, drafts)).argmax() != logits.argmax()
                    ):
                        first[side] = (n, o)
        at = (max(first.values()), min(first.values()))
        if best is None or at < best[0]:
            best = (at, v)
    return {field: best[1]}


def derived_params(kinds, model, case) -> list:
    """The params of a mask or processor case on `model` (kinds: one per request, the step it
    bites with): the case's plain params plus that step, aimed at the request's top choices in
    the reference's run of the plain case (its first PLAIN_ROUNDS rounds). min_tokens is the
    request's first K: its stop tokens (its top choices) are masked at every draft offset of its
    first round, and a count that took the round's K drafts as generated would unmask them from
    offset 0. A model whose plain run
    would take the NumPy reference more than PLAIN_RUN_SECONDS (limits.estimate_seconds: the
    real shape, judged by JAX) takes each request's prompt tokens, last first, as its top choices."""
    from ..judge.runner import REFERENCE, run_scenario
    from .limits import estimate_seconds

    plain = dataclasses.replace(case, rounds=case.rounds[:PLAIN_ROUNDS], derive=None, derived=[])
    V = model.cfg.vocab_size
    run = None
    if estimate_seconds(model.cfg, plain.rounds, plain.D, 8, check=False) <= PLAIN_RUN_SECONDS:
        run = run_scenario(REFERENCE, model, plain, "block")
    out = []
    for rid, (p, kind) in enumerate(zip(case.params, kinds)):
        if run is not None:
            top = tops(run, rid)
            drafts = next(tr.drafts[rid] for tr in run.traces if rid in tr.requests)
        else:  # too large for a NumPy run: the prompt's own tokens
            top = list(dict.fromkeys(case.prompts[rid][::-1] + list(range(V))))
            drafts = case.prompts[rid][-2:]
        t2, t3 = tuple(top[:2]), tuple(top[:3])
        first_K = next(r[rid] for r in case.rounds if rid in r) - 1
        kw = {
            "banned": dict(banned_token_ids=t3),
            "allowed": dict(allowed_token_ids=tuple(t for t in range(V) if t not in t3)),
            "bad_words": dict(bad_words=tuple((t,) for t in t2)),
            "bad_bigram": dict(bad_words=(tuple(drafts[:2]),) if len(drafts) > 1 else ((top[0],),)),
            "min_tokens": dict(stop_token_ids=t2, min_tokens=max(first_K, 1)),
            "logit_bias": dict(logit_bias={t: BIAS for t in t2}),
            "repetition": first_bite(run, rid, p, "repetition_penalty", (REPETITION, 1 / REPETITION)),
            "presence": first_bite(run, rid, p, "presence_penalty", (PRESENCE, -PRESENCE)),
            "frequency": first_bite(run, rid, p, "frequency_penalty", (FREQUENCY, -FREQUENCY)),
            "all": dict(
                banned_token_ids=top[:1],
                bad_words=((top[1],),),
                logit_bias={top[2]: BIAS},
                repetition_penalty=REPETITION,
                presence_penalty=-PRESENCE / 2,
                frequency_penalty=-FREQUENCY / 2,
            ),
        }[kind]
        out.append(dataclasses.replace(p, **kw))
    return out
