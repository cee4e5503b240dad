"""Logits processors that depend on the sequence (docs/DESIGN.md section 5), with vLLM's
definitions and order: bad words, min_tokens, logit bias, then the repetition, frequency and presence
penalties; then Hugging Face's no_repeat_ngram_size. Each step maps FP32 logits [V] to FP32
logits [V] (it may write into its input, which the chain has copied) and skips itself when its
parameter is off, so a request without processors gets the same bits as before they existed.
Beside each, the check of its fields (`<name>_check`, as oracle/step.py says), which its `Step`
(oracle/sampling_params.py) names.

`Seen` is what the logits of one offset see. A round's offset o (0-based; offset 0 is the last
committed token) has drafts 1..o behind it, for the draft logits that draw draft o+1 and for
the verification logits that judge it alike: the contexts plain decoding would have had."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import OracleError
from .step import in_vocab, is_id, is_num

F32 = np.float32


@dataclass(slots=True, frozen=True)
class Seen:
    prompt: tuple = ()  # the request's prompt tokens
    output: tuple = ()  # tokens generated before this offset: earlier rounds', then this round's drafts
    drafts: int = 0  # how many of output's last tokens are this round's drafts (= the offset)
    round_drafts: int = 0  # drafts the round draws for the request in all (K)


EMPTY = Seen()


def bad_words(x: np.ndarray, params, seen: Seen) -> np.ndarray:
    """A bad word w masks its last token when the output ends with w[:-1] (vLLM: the output
    only, not the prompt; a one-token word is always masked)."""
    out = seen.output
    for w in params.bad_words:
        n = len(w) - 1
        if n <= len(out) and tuple(out[len(out) - n :]) == w[:-1]:
            x[w[-1]] = -np.inf
    return x


def bad_words_check(p, vocab=None) -> dict:
    words = []
    for w in p.bad_words:
        w = tuple(w) if isinstance(w, (list, tuple)) else None
        if not w or not all(is_id(t) for t in w):
            raise OracleError(f"bad_words must be non-empty sequences of token ids >= 0, got {list(p.bad_words)!r}")
        words.append(tuple(int(t) for t in w))
    if vocab is not None:
        in_vocab("bad_words", [t for w in words for t in w], vocab)
    return {"bad_words": tuple(words)}


def logit_bias(x: np.ndarray, params, seen: Seen) -> np.ndarray:
    for t, b in params.logit_bias:
        x[t] = x[t] + F32(b)
    return x


def logit_bias_check(p, vocab=None) -> dict:
    bias = p.logit_bias.items() if isinstance(p.logit_bias, dict) else p.logit_bias
    try:
        bias = [(t, b) for t, b in bias]
    except (TypeError, ValueError):
        raise OracleError(f"logit_bias must map token ids to biases, got {p.logit_bias!r}") from None
    for t, b in bias:
        if not is_id(t):
            raise OracleError(f"logit_bias: {t!r} is not a token id >= 0")
        if not is_num(b) or not -100 <= b <= 100:
            raise OracleError(f"logit_bias of token {t}: the bias must be a finite number in [-100, 100], got {b!r}")
    if len({t for t, _ in bias}) != len(bias):
        raise OracleError("logit_bias names a token twice")
    if vocab is not None:
        in_vocab("logit_bias", [t for t, _ in bias], vocab)
    return {"logit_bias": tuple(sorted((int(t), float(b)) for t, b in bias))}


def min_tokens(x: np.ndarray, params, seen: Seen) -> np.ndarray:
    """Stop tokens are masked while fewer than min_tokens tokens are generated (the one that
    these logits draw would be token number len(output) + 1)."""
    if len(seen.output) < params.min_tokens and params.stop_token_ids:
        x[list(params.stop_token_ids)] = -np.inf
    return x


def min_tokens_check(p, vocab=None) -> dict:
    m = p.min_tokens
    if isinstance(m, bool) or not isinstance(m, int) or m < 0:
        raise OracleError(f"min_tokens must be an integer >= 0, got {m!r}")
    if p.max_tokens is not None and m > p.max_tokens:
        raise OracleError(f"min_tokens {m} exceeds max_tokens {p.max_tokens}")
    return {}


def output_counts(seen: Seen, V: int) -> np.ndarray:
    """[V] int64: how often each token occurs in the output."""
    return np.bincount(np.asarray(seen.output, np.int64), minlength=V)


def penalties(x: np.ndarray, params, seen: Seen) -> np.ndarray:
    """vLLM's order: repetition (prompt and output tokens: x > 0 -> x / r, else x * r), then
    x -= frequency * count(output), then x -= presence * [token in output]."""
    r, f, p = params.repetition_penalty, params.frequency_penalty, params.presence_penalty
    if r == 1 and f == 0 and p == 0:
        return x
    counts = output_counts(seen, len(x))
    if r != 1:
        hit = counts > 0
        hit[list(seen.prompt)] = True
        x = np.where(hit, np.where(x > 0, x / F32(r), x * F32(r)), x).astype(F32)
    if f != 0:
        x = (x - F32(f) * counts.astype(F32)).astype(F32)
    if p != 0:
        x = (x - F32(p) * (counts > 0).astype(F32)).astype(F32)
    return x


def penalties_check(p, vocab=None) -> dict:
    r = p.repetition_penalty
    if not is_num(r) or r <= 0:
        raise OracleError(f"repetition_penalty must be a finite number > 0 (1 = off), got {r!r}")
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(p, name)
        if not is_num(v) or not -2 <= v <= 2:
            raise OracleError(f"{name} must be in [-2, 2] (0 = off), got {v!r}")
    return {
        "repetition_penalty": float(r),
        "presence_penalty": float(p.presence_penalty),
        "frequency_penalty": float(p.frequency_penalty),
    }


def no_repeat_ngram(x: np.ndarray, params, seen: Seen) -> np.ndarray:
    """Hugging Face's NoRepeatNGramLogitsProcessor: with n = no_repeat_ngram, a token is masked
    when it would complete an n-gram that already occurs in the sequence, the prompt followed by
    the output (HF matches its whole input_ids, prompt included). n = 1 masks every token seen."""
    n = params.no_repeat_ngram
    if not n:
        return x
    seq = tuple(seen.prompt) + tuple(seen.output)
    prefix = seq[len(seq) - n + 1 :] if n > 1 else ()  # the last n-1 tokens
    banned = [seq[j + n - 1] for j in range(len(seq) - n + 1) if seq[j : j + n - 1] == prefix]
    x[banned] = -np.inf
    return x


def no_repeat_ngram_check(p, vocab=None) -> dict:
    n = p.no_repeat_ngram
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise OracleError(f"no_repeat_ngram must be an integer >= 0 (0 = off), got {n!r}")
    return {"no_repeat_ngram": int(n)}
