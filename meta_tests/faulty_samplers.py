"""Deliberately faulty samplers for `python -m oracle sampler`: the reference's sampler
(oracle/sampler/reference.py) with one realistic bug each, a Rules step replaced. Each is a
plug-in, `--backend meta_tests.faulty_samplers:make_<fault>`, and the judge must fail it
(meta_tests/test_sampler_faults.py; the table in docs/results.md, "Sampler judge"):

    make_recover_from_p         the token after a rejection is drawn from p, not max(0, p - q)
    make_inverted_acceptance    a draft is accepted iff u * p(x) < q(x): the ratio q/p, not p/q
    make_top_p_after_residual   top-p cuts the residual (and the bonus) instead of p: acceptance
                                and max(0, p - q) see the target without top-p
    make_ties_by_index          top-k and top-p keep exactly k tokens / the tokens up to the cut
                                in a stable sort: ties at the threshold split by token id
    make_bonus_from_draft       after K acceptances the bonus token is drawn from q_{K-1}, the
                                last draft distribution, not from p_K
    make_ngram_keeps_draft      n-gram drafts (one-hot q): the recovered token is drawn from p,
                                the rejected draft token left in (vLLM's draft_probs=None path)

`outcome_distribution` of each fault's Rules is the faulty sampler's exact distribution: the
table's TV distance from the truth and the judge's power against it (`power_against`) come
from it. Every fault sets accept_prob to match its accept().
"""

from __future__ import annotations

import numpy as np

from oracle import filters, sampling
from oracle.sampling_params import CHAIN
from oracle.sampler.reference import ReferenceSampler
from oracle.sampler.rules import Rules


def _normalized(p) -> np.ndarray:
    p = np.asarray(p, np.float64)
    return (p / p.sum()).astype(np.float32)


class RecoverFromP(Rules):
    def recover(self, p, q, req, o):
        return _normalized(p)  # BUG: no max(0, p - q)


class InvertedAcceptance(Rules):
    def accept(self, u, p, q, x):
        return float(u) * float(p[x]) < float(q[x])  # BUG: u < q/p

    def accept_prob(self, p, q, x):
        return 1.0 if p[x] == 0 else min(1.0, float(q[x]) / float(p[x]))


def _top_p_of_probs(probs, params) -> np.ndarray:
    """oracle.filters.top_p on a distribution (its logs as logits)."""
    with np.errstate(divide="ignore"):
        x = np.log(np.asarray(probs, np.float32))
    return sampling.softmax(filters.top_p(x, params))


class TopPAfterResidual(Rules):
    def _off(self, params):
        import dataclasses

        return dataclasses.replace(params, top_p=None)

    def target(self, req):  # BUG: p without top-p for acceptance and the residual
        return [sampling.filtered_probs(req.target_logits[o], self._off(req.params)) for o in range(req.K + 1)]

    def recover(self, p, q, req, o):
        return _top_p_of_probs(sampling.residual(p, q), req.params)  # ... top-p on the residual

    def bonus(self, ps, qs, req):
        return _top_p_of_probs(ps[req.K], req.params)


def _top_k_by_index(x, params):
    if params.top_k is None or params.top_k >= len(x):
        return x
    x = x.copy()
    x[np.argsort(-x, kind="stable")[params.top_k :]] = -np.inf  # BUG: exactly k, ties split by id
    return x


def _top_p_by_index(x, params):
    if params.top_p is None or params.top_p >= 1:
        return x
    p = sampling.softmax(x)
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]
    x = x.copy()
    x[order[before > np.float32(params.top_p)]] = -np.inf  # BUG: the cut by position, ties split
    return x


BY_INDEX = CHAIN.replace(top_k=_top_k_by_index, top_p=_top_p_by_index)


class TiesByIndex(Rules):
    def target(self, req):
        return [sampling.filtered_probs(req.target_logits[o], req.params, chain=BY_INDEX) for o in range(req.K + 1)]

    def draft(self, req):
        if req.draft_logits is None:
            return super().draft(req)
        return [sampling.filtered_probs(req.draft_logits[o], req.params, chain=BY_INDEX) for o in range(req.K)]


class BonusFromDraft(Rules):
    def bonus(self, ps, qs, req):
        return qs[req.K - 1] if req.K else ps[req.K]  # BUG: the draft's distribution


class NgramKeepsDraft(Rules):
    def recover(self, p, q, req, o):
        if req.kind == "ngram":
            return _normalized(p)  # BUG: the one-hot q not subtracted: the draft stays in
        return super().recover(p, q, req, o)


FAULTS = {
    "recover_from_p": RecoverFromP,
    "inverted_acceptance": InvertedAcceptance,
    "top_p_after_residual": TopPAfterResidual,
    "ties_by_index": TiesByIndex,
    "bonus_from_draft": BonusFromDraft,
    "ngram_keeps_draft": NgramKeepsDraft,
}


def _factory(name):
    def make():
        return ReferenceSampler(FAULTS[name](), f"faulty:{name}")

    make.__name__ = f"make_{name}"
    return make


make_recover_from_p = _factory("recover_from_p")
make_inverted_acceptance = _factory("inverted_acceptance")
make_top_p_after_residual = _factory("top_p_after_residual")
make_ties_by_index = _factory("ties_by_index")
make_bonus_from_draft = _factory("bonus_from_draft")
make_ngram_keeps_draft = _factory("ngram_keeps_draft")


def power_against(name: str, case, request: int, draws: int, alpha: float) -> tuple[float, float, float]:
    """(TV distance, power, chi-square power): the fault's exact outcome distribution against the
    truth on one request of a case; the chance that the judge's test at level alpha with `draws`
    draws rejects it; and that chance from the chi-square alone, without the outright failure
    on an outcome of probability zero (noncentral chi-square, lambda = N * sum (F - P)^2 / P over
    the judge's cells of positive P)."""
    from scipy import stats as sst

    from oracle.sampler import stats
    from oracle.sampler.rules import RULES

    req = case.requests[request]
    p = RULES.outcome_distribution(req).ravel()
    f = FAULTS[name]().outcome_distribution(req).ravel()
    tv = 0.5 * float(np.abs(f - p).sum())
    groups = stats.cells(p, draws)
    P = np.array([p[g].sum() for g in groups])
    F = np.array([f[g].sum() for g in groups])
    df = len(groups) - 1
    lam = draws * float(((F - P) ** 2 / P).sum())
    chi = float(sst.ncx2.sf(sst.chi2.isf(alpha, df), df, lam)) if df else 0.0
    zero = float(f[p == 0].sum())  # caught outright once such an outcome is drawn
    return tv, 1.0 - (1.0 - chi) * (1.0 - zero) ** draws, chi


def largest_tv(name: str, cases) -> float:
    """The fault's largest TV distance from the truth over the sampled requests of the cases."""
    from oracle.sampler.rules import RULES

    fault = FAULTS[name]()
    tvs = [
        0.5 * float(np.abs(fault.outcome_distribution(r) - RULES.outcome_distribution(r)).sum())
        for c in cases
        for r in c.requests
        if not r.params.greedy
    ]
    return max(tvs, default=0.0)


def table(seed: int = 0, cases: int = 20) -> list[str]:
    """docs/results.md's rows: each fault judged as `python -m oracle sampler --backend
    meta_tests.faulty_samplers:make_<fault> --seed SEED --cases CASES --fail-fast
    --shrink-budget 0` would, and on the request that failed first its TV from the truth and
    the judge's power against it at the draws it took (and the chi-square's alone), and the
    fault's largest TV over the run's cases."""
    import time

    from oracle.sampler.cases import draw_case
    from oracle.sampler.judge import Settings
    from oracle.sampler.run import family_size, run

    rng = np.random.default_rng([seed, 1])  # as the CLI draws them
    drawn = [draw_case(rng, f"case {n}") for n in range(cases)]
    st = Settings(family=family_size(drawn, False))
    head = "| fault | caught by | kind | how | draws until caught | seconds | TV there | power there |"
    rows = [head + " chi-square power | largest TV in the run |", "|---" * 10 + "|"]
    for name in FAULTS:
        t0 = time.perf_counter()
        r = run(_factory(name)(), name, drawn, st, seed, None, 0.0, lambda _: None, fail_fast=True)
        secs = time.perf_counter() - t0
        bad = next(x for x in r.results if not x.ok)
        t = next(t for t in bad.tests if not t.ok)
        draws = sum(x.draws for x in r.results)
        tv, power, chi = power_against(name, bad.case, t.request, bad.draws, st.alpha / st.family)
        where = f"{bad.case.name}, request {t.request}"
        how = "outcome of probability 0" if t.fit.impossible else f"chi-square p = {t.fit.p_value:.2g}"
        cols = f"{draws} | {secs:.1f} | {tv:.3f} | {power:.4f} | {chi:.4f} | {largest_tv(name, drawn):.3f}"
        rows.append(f"| {name} | {where} | {t.kind} | {how} | {cols} |")
    return rows


if __name__ == "__main__":
    print("\n".join(table()))
