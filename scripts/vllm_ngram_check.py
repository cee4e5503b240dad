"""vLLM 0.33's n-gram path (RejectionSampler with draft_probs=None) against the exact distribution
of speculative sampling with one-hot drafts, at a stated power, without the sampler judge's CLI.

    TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES="" PYTHONPATH=. /work/vllm-venv/bin/python \\
        scripts/vllm_ngram_check.py --draws 5000 --first-seed 0 --counts /tmp/ngram.json

One request, V = 8, K = 2 drafts, temperature 1 (the setting of issue 63's p = 0.0037), is drawn
--draws times through examples/vllm_rejection_sampler.py, each copy with its own torch.Generator
seeded first-seed, first-seed + 1, ...; the counts of the outcomes (accepted drafts a, final
token) are added to --counts (so runs of other seeds accumulate). The exact distribution, by
the rules with q = onehot(draft): draft x_o is accepted with probability p_o(x_o); on a
rejection the token comes from p_o with x_o removed, renormalised; after K acceptances from p_K.
The verdict: Pearson's chi-square over the outcomes (those of expected count < 5 pooled) at
--alpha; the power: the total-variation distance detected with 99% probability at that alpha
(noncentrality >= 4 N eps^2 for any alternative at TV eps, a lower bound), and the power against
the fault of leaving the draft token in the recovery distribution.

Every vLLM draw is also replayed by StreamModel, vLLM's use of the request's generator redone in
torch alone, and the draws where the two differ are counted. Where they never differ, --model
draws the same outcomes about 200 times faster (no vLLM, no Triton interpreter), for millions
of draws: `python scripts/vllm_ngram_check.py --model --draws 1000000 --counts /tmp/model.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass

import numpy as np

V, K, TEMPERATURE = 8, 2, 1.0
CASE_SEED = 24  # the target logits: 1.5 * normal(0, 1) from PCG64(24), [K + 1, V]


def target_logits() -> np.ndarray:
    return (np.random.default_rng(CASE_SEED).normal(size=(K + 1, V)).astype(np.float32) * np.float32(1.5)).astype(
        np.float32
    )


def drafts(logits: np.ndarray, rank: int = 0) -> tuple:
    """Each offset's token of this rank by probability. Rank 0, the most likely (an n-gram hit),
    of probability 0.54 and 0.51 here: accepted about as often as rejected, so every outcome
    (a, t) has mass; rank 1 (0.17 and 0.15): rejected most of the time."""
    return tuple(int(np.argsort(-row, kind="stable")[rank]) for row in logits[:K])


def probs(logits: np.ndarray) -> np.ndarray:
    """[K + 1, V] float64: softmax(logits / T) in float32, as vLLM computes it."""
    x = logits / np.float32(TEMPERATURE)
    e = np.exp(x - x.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).astype(np.float32).astype(np.float64)


def exact(p: np.ndarray, x: tuple, keep_draft: bool = False) -> np.ndarray:
    """[(K + 1) * V] float64: P(a accepted drafts, final token t) at index a * V + t.
    keep_draft: the faulty recovery that leaves the draft token in (normalize(p))."""
    out = np.zeros((K + 1, V))
    reach = 1.0
    for o in range(K):
        acc = p[o, x[o]]
        r = p[o].copy()
        if not keep_draft:
            r[x[o]] = 0.0
        out[o] = reach * (1 - acc) * r / r.sum()
        reach *= acc
    out[K] = reach * p[K]
    return out.reshape(-1)


@dataclass(slots=True)
class Req:
    """The fields of oracle.sampler.contract.SamplerRequest the adapter reads (n-gram)."""

    target_logits: np.ndarray
    draft_tokens: tuple
    params: object
    seed: int
    draft_probs: None = None
    draft_logits: None = None
    kind: str = "ngram"

    @property
    def K(self) -> int:
        return len(self.draft_tokens)

    @property
    def V(self) -> int:
        return int(self.target_logits.shape[1])


class StreamModel:
    """vLLM 0.33's draws for one n-gram request on the CPU, replayed with torch alone: its
    torch.Generator(seed) gives, in order, the bonus token's exponential noise [1, V] float32
    (Sampler, random_sample), the K acceptance uniforms float64 (generate_uniform_probs) and the
    recovery noise [1, V] float32 (sample_recovered_tokens); draft o is accepted while
    p_o(x_o) >= u_o; the recovered token is argmax(p_a with x_a zeroed * 1/noise), the bonus
    token argmax(p_K / noise). draw() checks it against vLLM seed by seed."""

    def __init__(self, logits: np.ndarray, x: tuple):
        import torch

        self.torch, self.x = torch, x
        self.p = torch.softmax(torch.from_numpy(logits) / TEMPERATURE, -1)  # [K + 1, V] float32

    def outcome(self, seed: int) -> list:
        torch, p, x = self.torch, self.p, self.x
        g = torch.Generator().manual_seed(seed)
        bonus = torch.empty(1, V).exponential_(generator=g)
        u = torch.empty(K, dtype=torch.float64).uniform_(generator=g)
        recovery = torch.empty(1, V).exponential_(generator=g)
        a = 0
        while a < K and float(p[a, x[a]]) >= float(u[a]):
            a += 1
        if a == K:
            return list(x) + [int(torch.argmax(p[K] / bonus[0]))]
        r = p[a].clone()
        r[x[a]] = 0
        return list(x[:a]) + [int(torch.argmax(r * recovery[0].reciprocal()))]


def tally(counts: np.ndarray, toks: list, x: tuple) -> None:
    a = len(toks) - 1
    assert toks[:a] == list(x[:a]), f"emitted {toks}: accepted tokens are not the drafts {x}"
    counts[a * V + toks[-1]] += 1


def draw(n: int, first_seed: int, batch: int, rank: int, model_only: bool) -> tuple[np.ndarray, int]:
    """(counts [(K + 1) * V], seeds where vLLM and StreamModel differ) of n draws through vLLM
    (the adapter), each checked against the model; model_only: the model's draws alone."""
    logits = target_logits()
    x = drafts(logits, rank)
    model, counts, differ = StreamModel(logits, x), np.zeros((K + 1) * V, np.int64), 0
    if model_only:
        for seed in range(first_seed, first_seed + n):
            tally(counts, model.outcome(seed), x)
        return counts, 0
    from examples.vllm_rejection_sampler import make_sampler
    from oracle.sampling_params import SamplingParams

    sampler, params = make_sampler(), SamplingParams(temperature=TEMPERATURE)
    for s in range(first_seed, first_seed + n, batch):
        seeds = range(s, min(s + batch, first_seed + n))
        for seed, toks in zip(seeds, sampler.sample([Req(logits, x, params, seed) for seed in seeds])):
            tally(counts, toks, x)
            differ += toks != model.outcome(seed)
    return counts, differ


def chi_square(counts: np.ndarray, expected_p: np.ndarray) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value); outcomes of expected count < 5 pooled."""
    n = counts.sum()
    e = expected_p * n
    big = e >= 5
    obs, exp = list(counts[big]), list(e[big])
    if (~big).any() and e[~big].sum() > 0:
        obs.append(counts[~big].sum())
        exp.append(e[~big].sum())
    obs, exp = np.array(obs, float), np.array(exp)
    from scipy import stats

    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(exp) - 1
    return stat, df, float(stats.chi2.sf(stat, df))


def tv_at_99(n: int, df: int, alpha: float) -> float:
    """The smallest TV distance every alternative at which is detected with probability 0.99."""
    from scipy import optimize, stats

    crit = stats.chi2.isf(alpha, df)
    return optimize.brentq(lambda eps: stats.ncx2.sf(crit, df, 4 * n * eps**2) - 0.99, 1e-6, 1.0)


def report(counts: np.ndarray, alpha: float, rank: int) -> dict:
    from scipy import stats

    logits = target_logits()
    p, x = probs(logits), drafts(logits, rank)
    want, fault = exact(p, x), exact(p, x, keep_draft=True)
    n = int(counts.sum())
    stat, df, pval = chi_square(counts, want)
    crit = stats.chi2.isf(alpha, df)
    lam_fault = n * float(((fault - want) ** 2 / np.where(want > 0, want, 1)).sum())
    z = (counts - n * want) / np.sqrt(np.maximum(n * want, 1e-12))
    worst = int(np.argmax(np.abs(z)))
    return {
        "case": {"V": V, "K": K, "temperature": TEMPERATURE, "case_seed": CASE_SEED, "drafts": list(x)},
        "p_draft": [round(float(p[o, x[o]]), 4) for o in range(K)],
        "draws": n,
        "chi2": round(stat, 2),
        "df": df,
        "p_value": pval,
        "alpha": alpha,
        "verdict": "pass" if pval >= alpha else "FAIL",
        "tv_detected_at_99pct": round(tv_at_99(n, df, alpha), 4),
        "fault_keep_draft_tv": round(0.5 * float(np.abs(fault - want).sum()), 4),
        "power_vs_keep_draft": float(stats.ncx2.sf(crit, df, lam_fault)),
        "largest_residual": {"a": worst // V, "token": worst % V, "z": round(float(z[worst]), 2)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=0, help="new draws through vLLM (0: only the report)")
    ap.add_argument("--first-seed", type=int, default=0, help="the first request seed of these draws")
    ap.add_argument("--batch", type=int, default=256, help="requests per forward() (default 256)")
    ap.add_argument("--counts", default="/tmp/vllm_ngram_counts.json", help="counts file, added to")
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument(
        "--draft-rank", type=int, default=0, choices=range(V), help="drafts: each offset's token of this rank"
    )
    ap.add_argument("--case-json", action="store_true", help="print the case as the sampler judge's --case-json")
    ap.add_argument("--model", action="store_true", help="draw with StreamModel alone (torch, no vLLM)")
    args = ap.parse_args()
    if args.case_json:
        logits = target_logits()
        req = {"target_logits": logits.tolist(), "draft_tokens": list(drafts(logits, args.draft_rank))}
        print(json.dumps({"requests": [req | {"params": {"temperature": TEMPERATURE}}]}, separators=(",", ":")))
        return
    saved = json.load(open(args.counts)) if os.path.exists(args.counts) else {"counts": None, "seeds": []}
    source = "StreamModel" if args.model else "vLLM"
    held = (saved.get("draft_rank", 0), saved.get("source", "vLLM")) if saved["counts"] else None
    if args.draws and held and held != (args.draft_rank, source):
        raise SystemExit(f"{args.counts} holds other draws (draft rank, source): {held}")
    rank = held[0] if held and not args.draws else args.draft_rank  # a report reads the file's
    counts = np.array(saved["counts"] or np.zeros((K + 1) * V, np.int64), np.int64)
    if args.draws:
        taken = [args.first_seed, args.first_seed + args.draws]
        if any(lo < taken[1] and taken[0] < hi for lo, hi in saved["seeds"]):
            raise SystemExit(f"seeds {taken} overlap those already counted in {args.counts}: {saved['seeds']}")
        t = time.perf_counter()
        new, differ = draw(args.draws, args.first_seed, args.batch, rank, args.model)
        counts += new
        who = "StreamModel" if args.model else f"vLLM; StreamModel differs on {differ} of them"
        print(f"{args.draws} draws in {time.perf_counter() - t:.1f} s ({who})")
        saved = {"counts": counts.tolist(), "seeds": saved["seeds"] + [taken], "draft_rank": rank}
        saved["source"] = source
        json.dump(saved, open(args.counts, "w"))
    if not counts.sum():
        raise SystemExit(f"no draws counted in {args.counts} yet: pass --draws N")
    extra = {"source": saved.get("source", "vLLM"), "seeds": saved["seeds"]}
    print(json.dumps(report(counts, args.alpha, rank) | extra, indent=1))


if __name__ == "__main__":
    main()
