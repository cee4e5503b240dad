"""The built-in cases `python -m oracle check` runs (the case catalogue); the Case type is
oracle/judge/scenario.py, the runner oracle/judge/runner.py."""
from __future__ import annotations

from ..judge.scenario import Case, command, make_case
from ..sampling import SamplingParams


def default_cases(vocab: int, model_flags: list[str] | None = None) -> list[Case]:
    """Several ragged batches, greedy and sampled (top-k, top-p), four (d, D) pairs, one batch
    of per-request target depths, stop tokens and max_tokens, the logits processors, both RNG policies, multi-round
    generation with rollback and requests joining/leaving. Each case's reproduce line runs it
    alone: `check <model_flags> --case NAME`, where model_flags name the model the check ran on
    (default: the tiny preset, seed 0)."""
    flags = list(model_flags) if model_flags is not None else ["--preset", "tiny", "--seed", "0"]
    G = SamplingParams()
    S = lambda seed, **kw: SamplingParams(temperature=kw.pop("t", 1.0), seed=seed, **kw)
    mixed = [G, S(1, top_k=8), S(2, top_p=0.8), S(3, t=0.7, top_k=20, top_p=0.9), G, S(5, t=1.5)]
    stop = [SamplingParams(stop_token_ids=(7,)), S(1, top_k=8, max_tokens=4),
            S(2, top_p=0.9, t=0.7, stop_token_ids=(46,), max_tokens=5), S(3, stop_token_ids=(3, 7))]
    pen = dict(repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.2, logit_bias={5: 2.0, 9: -1.5},
               bad_words=((3, 4), (7,)))
    procs = [SamplingParams(stop_token_ids=(11,), min_tokens=4, **pen), S(1, stop_token_ids=(11, 12), min_tokens=3, **pen),
             S(2, top_k=12, **pen), SamplingParams(repetition_penalty=0.8, frequency_penalty=-0.5, bad_words=((8, 8),))]
    specs = [
        ("ragged (5,3,1) d=2 D=4", [{0: 5, 1: 3, 2: 1}], 2, 4, mixed[:3], 1, "sequential", None),
        ("uniform (5,5,5,5) d=2 D=4, 6 rounds", [{i: 5 for i in range(4)}] * 6, 2, 4, mixed[:4], 2, "sequential", None),
        ("ragged d=1 D=3, K changes per round",
         [{0: 3, 1: 1, 2: 6}, {0: 1, 1: 4, 2: 2}, {0: 9, 1: 2, 2: 1}, {0: 2, 1: 5, 2: 3}],
         1, 3, [mixed[1], mixed[0], mixed[2]], 3, "sequential", None),
        ("d=3 D=5 fixed policy, joins and leaves",
         [{0: 4, 1: 2}, {0: 4, 1: 3, 2: 5}, {2: 2, 3: 4}, {0: 1, 2: 5, 3: 3, 4: 2}], 3, 5, mixed[1:6], 4, "fixed",
         None),
        ("per-request depths 2:4,1:3,3:5,1:4, 3 rounds",
         [{0: 5, 1: 3, 2: 1, 3: 4}, {0: 6, 1: 6, 2: 4, 3: 1}, {0: 3, 2: 2, 3: 3}],
         1, 5, mixed[:4], 6, "sequential", [(2, 4), (1, 3), (3, 5), (1, 4)]),
        ("stop tokens and max_tokens, 4 rounds", [{0: 5, 1: 3, 2: 1, 3: 4}] * 4, 2, 4, stop, 7, "sequential", None),
        ("logits processors (penalties, bias, bad words, min_tokens), 4 rounds",
         [{0: 5, 1: 4, 2: 3, 3: 5}] * 4, 2, 4, procs, 8, "sequential", None),
        ("d=1 D=2 greedy and sampled, 8 requests", [{i: 1 + (i * 3) % 7 for i in range(8)}] * 3,
         1, 2, [mixed[i % 6] for i in range(8)], 5, "sequential", None),
    ]
    return [make_case(name, rounds, d, D, params, seed=seed, policy=policy, vocab=vocab, depths=depths,
                      reproduce=command(["check", *flags, "--case", name]))
            for name, rounds, d, D, params, seed, policy, depths in specs]
