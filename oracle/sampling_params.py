"""A request's sampling parameters (`SamplingParams`) and the chain from logits to
probabilities that they set (`CHAIN`; docs/DESIGN.md section 5). The draws and acceptance on the
chain's output: oracle/sampling.py.

The chain (`CHAIN`, a tuple of `Step`s, in FP32, on the draft and on the verification logits
of every offset):
  processors (greedy and sampled requests alike; `seen`: the tokens these logits see)
  1. mask: banned token ids, and every id outside allowed_token_ids, become -inf (a row
     with every token masked is an error; -inf is a legal logit, NaN and +inf are not);
  2. bad_words, 3. min_tokens, 4. logit_bias, 5. penalties (oracle/processors.py, vLLM's
     definitions and order; min_tokens and logit_bias commute), 6. no_repeat_ngram (Hugging
     Face's no_repeat_ngram_size, on the prompt and the output);
  filters (sampled requests; greedy requests take the argmax of the processed logits;
  oracle/filters.py)
  7. temperature: x / T;
  8. min-p (vLLM's definition): drop tokens with softmax(x) < min_p * max softmax(x);
  9. top-k: keep x >= the k-th largest x;
  10. top-p: sort the probabilities descending; a token whose mass before it (in that order)
     exceeds p is dropped, the top token always stays;
  11. typical-p (Hugging Face's): with H the entropy, sort by |-log p - H| ascending and keep
     the tokens up to the first whose cumulative mass reaches typical_p (at least one); last,
     as in Hugging Face, where it sees what min-p, top-k and top-p left (its entropy is theirs);
     it commutes with none of them (both it and top-p cut by cumulative mass);
  12. softmax.
Each step carries all that varies by step (`Step`, oracle/step.py): its fields, checks, options,
strategy, device rows and margin; everything else reads CHAIN. Here: its fields and its `Step`
(and the mask's function and check); beside its function (oracle/processors.py,
oracle/filters.py): its check, and a filter's rows and margin.
Ties: every token tied with the last survivor of top-k, top-p or typical-p survives too
(top-k keeps x >= the k-th value; top-p keeps p_t >= the probability of the last token kept
in sorted order, as FlashInfer does; typical-p keeps every score <= the last kept token's, as
Hugging Face does, and tokens of equal p have equal scores). Why: tied tokens are
indistinguishable to the model, so which of them survive must not depend on their ids; with
this rule the filtered distribution is the same under any relabelling of the vocabulary, and
it is the rule a sort-free threshold kernel implements. The price: the kept set may be larger
than k, or hold more mass than p needs. min-p commutes with top-k (both compare x with a
threshold below the maximum) but not with top-p; it runs before both, as in vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import filters, processors
from .errors import OracleError
from .processors import Seen
from .step import Chain, Step, in_vocab, is_id

F32 = np.float32


@dataclass(slots=True, frozen=True)
class SamplingParams:
    """A request's parameters. Each field but seed and the stop cut's (stop_token_ids,
    max_tokens) belongs to one step of CHAIN, which checks it, says when it is on, and writes
    it to JSON (`Step`)."""

    temperature: float = 0.0  # 0 means greedy
    top_k: int | None = None  # None: off
    top_p: float | None = None  # None or 1.0: off
    seed: int = 0
    stop_token_ids: tuple = ()  # emission stops after the first of these (kept)
    max_tokens: int | None = None  # tokens a request may generate in all (None: no limit)
    banned_token_ids: tuple = ()  # masked to -inf before temperature and the filters
    allowed_token_ids: tuple | None = None  # None: every token; else all others are masked
    min_p: float | None = None  # None or 0: off
    repetition_penalty: float = 1.0  # 1: off; > 0; on prompt and output tokens
    presence_penalty: float = 0.0  # in [-2, 2]; on output tokens
    frequency_penalty: float = 0.0  # in [-2, 2]; on output tokens
    logit_bias: tuple = ()  # ((token id, bias in [-100, 100]), ...), by token id; a dict is taken
    bad_words: tuple = ()  # token-id sequences; the last token of one is masked after the others
    min_tokens: int = 0  # stop tokens masked until this many tokens are generated
    no_repeat_ngram: int = 0  # Hugging Face's no_repeat_ngram_size: 0 off; n bans repeating an n-gram
    typical_p: float | None = None  # Hugging Face's typical_p: None or 1.0 off; in (0, 1]

    def __post_init__(self):
        stops = tuple(self.stop_token_ids)
        if any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 for t in stops):
            raise OracleError(f"stop_token_ids must be token ids >= 0, got {list(stops)!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in stops))
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise OracleError(f"seed must be an integer >= 0 (as --seed), got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))
        m = self.max_tokens
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise OracleError(f"max_tokens must be an integer >= 1 (or None), got {m!r}")
        for step in CHAIN.steps:  # each step's fields, checked and in normal form
            for name, value in step.check(self).items():
                object.__setattr__(self, name, value)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def needs_seen(self) -> bool:
        """Whether the processed logits depend on the tokens before them."""
        return any(s.seen and s.is_on(self) for s in CHAIN.steps)

    def to_json(self) -> dict:
        """temperature, top_k, top_p and seed always; the stop cut's fields and each step's
        fields when one of them is not its off value. SamplingParams(**json) reads it back."""
        out = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}
        if self.stop_token_ids or self.max_tokens is not None:
            out |= {"stop_token_ids": list(self.stop_token_ids), "max_tokens": self.max_tokens}
        for step in CHAIN.steps:
            if step.given(self):
                out |= {name: _json(getattr(self, name)) for name in step.off}
        return out

    def check_vocab(self, vocab: int, who="request") -> None:
        """Token ids named by the params must be in the vocabulary."""
        try:
            in_vocab("stop_token_ids", self.stop_token_ids, vocab)
            for step in CHAIN.steps:
                step.check(self, vocab)
        except OracleError as e:
            raise OracleError(f"{who}: {e}") from None


def _json(v):
    return [_json(x) for x in v] if isinstance(v, tuple) else v


def _check_mask(p, vocab=None) -> dict:
    out = {}
    for name in ("banned_token_ids", "allowed_token_ids"):
        ids = getattr(p, name)
        if ids is None:
            continue
        ids = tuple(ids)
        if not all(is_id(t) for t in ids):
            raise OracleError(f"{name} must be token ids >= 0, got {list(ids)!r}")
        out[name] = tuple(int(t) for t in ids)
        if vocab is not None:
            in_vocab(name, out[name], vocab)
    if p.allowed_token_ids is not None and not set(out["allowed_token_ids"]) - set(out["banned_token_ids"]):
        raise OracleError("allowed_token_ids minus banned_token_ids is empty: every token is masked")
    return out


def mask(x: np.ndarray, params: SamplingParams, seen: Seen) -> np.ndarray:
    """Banned ids and ids outside allowed_token_ids set to -inf."""
    if params.allowed_token_ids is not None:
        keep = np.zeros(len(x), bool)
        keep[list(params.allowed_token_ids)] = True
        x[~keep] = -np.inf
    x[list(params.banned_token_ids)] = -np.inf
    return x


def _mass_filter(name: str, apply: Callable, check: Callable, margin: Callable, help: str) -> Step:
    """A filter step of one mass field `name` in (0, 1], off where None or 1 (top_p, typical_p)."""
    return Step(
        name,
        "filter",
        apply,
        {name: None},
        check,
        on=lambda p: getattr(p, name) is not None and getattr(p, name) < 1,
        options=((name, "probability", name.upper(), help),),
        strategy=f"{name}_kwargs",
        rows=filters.off_at_one(name),
        margin=margin,
    )


def _count_processor(name: str, apply: Callable, check: Callable, help: str, on: Callable | None = None) -> Step:
    """A processor of one count field `name` (option N), off at 0, that reads the tokens (min_tokens,
    no_repeat_ngram)."""
    return Step(
        name,
        "processor",
        apply,
        {name: 0},
        check,
        on=on,
        seen=True,
        options=((name, "count", "N", help),),
        strategy=f"{name}_kwargs",
    )


STEPS = (
    Step("mask", "mask", mask, {"banned_token_ids": (), "allowed_token_ids": None}, _check_mask),
    Step(
        "bad_words",
        "processor",
        processors.bad_words,
        {"bad_words": ()},
        processors.bad_words_check,
        seen=True,
        options=(
            (
                "bad_words",
                "words",
                "IDS/IDS",
                "token-id words whose last token is masked after the others, e.g. 3,4/7 (default: none)",
            ),
        ),
        strategy="bad_words_kwargs",
    ),
    _count_processor(
        "min_tokens",
        processors.min_tokens,
        processors.min_tokens_check,
        "stop tokens are masked until this many tokens are generated (default: 0)",
        on=lambda p: bool(p.min_tokens and p.stop_token_ids),
    ),
    Step(
        "logit_bias",
        "processor",
        processors.logit_bias,
        {"logit_bias": ()},
        processors.logit_bias_check,
        options=(
            (
                "logit_bias",
                "biases",
                "ID:B,...",
                "added to the logits of these token ids, e.g. 5:2.0,9:-1.5 (default: none)",
            ),
        ),
        strategy="logit_bias_kwargs",
    ),
    Step(
        "penalties",
        "processor",
        processors.penalties,
        {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0},
        processors.penalties_check,
        seen=True,
        options=(
            (
                "repetition_penalty",
                "number",
                "R",
                "vLLM's repetition penalty on prompt and output tokens, > 0 (default: 1, off)",
            ),
            (
                "presence_penalty",
                "number",
                "P",
                "subtracted from the logits of tokens in the output, in [-2, 2] (default: 0)",
            ),
            ("frequency_penalty", "number", "F", "subtracted per occurrence in the output, in [-2, 2] (default: 0)"),
        ),
        strategy="penalties_kwargs",
    ),
    _count_processor(
        "no_repeat_ngram",
        processors.no_repeat_ngram,
        processors.no_repeat_ngram_check,
        "Hugging Face's no_repeat_ngram_size: a token that would repeat an N-gram of the prompt and "
        "output is masked (default: 0, off)",
    ),
    Step(
        "temperature",
        "filter",
        filters.temperature,
        {"temperature": 0.0},
        filters.temperature_check,
        rows=filters.temperature_rows,
        cuts=lambda p, vocab: False,
    ),
    Step(
        "min_p",
        "filter",
        filters.min_p,
        {"min_p": None},
        filters.min_p_check,
        on=lambda p: bool(p.min_p),
        options=(
            (
                "min_p",
                "probability",
                "MIN_P",
                "min-p filter, vLLM's p >= min_p * max p after temperature (default: off)",
            ),
        ),
        strategy="min_p_kwargs",
        rows=lambda p, V: {"min_p": F32(p.min_p or 0.0)},
        margin=filters.min_p_margin,
    ),
    Step(
        "top_k",
        "filter",
        filters.top_k,
        {"top_k": None},
        filters.top_k_check,
        options=(("top_k", "positive", "TOP_K", "keep the k most likely tokens (default: off)"),),
        strategy="top_k_kwargs",
        rows=lambda p, V: {"top_k": np.int64(min(p.top_k or V, V))},
        margin=filters.top_k_margin,
        cuts=lambda p, vocab: p.top_k is not None and p.top_k < vocab,
    ),
    _mass_filter(
        "top_p", filters.top_p, filters.top_p_check, filters.top_p_margin, "nucleus mass in (0, 1] (default: off)"
    ),
    _mass_filter(
        "typical_p",
        filters.typical_p,
        filters.typical_p_check,
        filters.typical_p_margin,
        "Hugging Face's typical-p mass in (0, 1] (default: off)",
    ),
)


CHAIN = Chain(STEPS)
