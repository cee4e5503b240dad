"""SamplingParams -> the per-slot sampling rows of the device (one conversion: Engine.set_params
writes them into its [S] / [S, V] buffers, host_sampling builds a one-row batch from them, and
round_buffer.sampling_variant takes a round's variant from the same flags).

Scalars: greedy, left (max_tokens not yet generated; 2**62: no limit), the filters' rows
(their Step.rows, oracle/filters.py: temp, 1.0 for greedy rows, whose probabilities go unused;
min_p, 0: off; top_k, >= V: off; top_p, +inf: off), repetition / presence / frequency
penalties (1, 0, 0: off), min_tokens.
[V] rows: ban (banned or outside allowed_token_ids), stop (stop token ids), bias (logit_bias,
-0.0 elsewhere, which adds nothing to any x).
Bad words, padded to MAX_BAD_WORDS words of at most MAX_BAD_WORD_LEN tokens: bw_pre [NW, TAIL]
(each word's prefix w[:-1], right-aligned), bw_plen [NW] (len(w) - 1), bw_last [NW] (w[-1];
-1: no word). The device keeps the last TAIL committed output tokens per slot to match them.
no_repeat_ngram (0: off; at most MAX_NGRAM): the device keeps up to HISTORY tokens of prompt
and output per slot.
The rows of each step of oracle.sampling_params.CHAIN come from ROWS, or are its fields as scalars;
STEP_ROWS, FILTER_ROWS and PROC_ROWS are read from them, and check_limits from LIMITS.
"""

from __future__ import annotations

import numpy as np

from oracle.errors import OracleError
from oracle.sampling_params import CHAIN, SamplingParams

MAX_BAD_WORD_LEN = 8  # tokens in one bad word, at most
MAX_BAD_WORDS = 32  # bad words of one request, at most
TAIL = MAX_BAD_WORD_LEN - 1  # committed output tokens a slot keeps for the bad-word match
MAX_NGRAM = 8  # no_repeat_ngram, at most
HISTORY = 2048  # tokens of prompt and output a slot keeps for no_repeat_ngram, at most
NO_LIMIT = 2**62


def filtered(params, vocab: int) -> bool:
    """A sampled request whose distribution a filter of oracle.sampling_params.CHAIN may cut (min-p,
    top-k < vocab, top-p, ...: the sorting sampler; `Step.drops`)."""
    return not params.greedy and any(s.drops(params, vocab) for s in CHAIN.named("filter"))


def processor_steps(params) -> tuple:
    """The processor steps of oracle.sampling_params.CHAIN (after the mask) that are on for these
    params (a step that is off for a row is the identity on it), in the chain's order."""
    return tuple(s.name for s in CHAIN.named("processor") if s.is_on(params))


# ---- the device's fixed-size tables (graph-safe): what does not fit is refused at add() ----


def _bad_words_limits(params, length) -> None:
    if len(params.bad_words) > MAX_BAD_WORDS:
        raise OracleError(
            f"bad_words: {len(params.bad_words)} words; the torch backend holds at most {MAX_BAD_WORDS} per request"
        )
    long = [w for w in params.bad_words if len(w) > MAX_BAD_WORD_LEN]
    if long:
        raise OracleError(
            f"bad_words: a word of {len(long[0])} tokens {list(long[0])}; the torch backend matches "
            f"words of at most {MAX_BAD_WORD_LEN} tokens"
        )


def _no_repeat_ngram_limits(params, length) -> None:
    if params.no_repeat_ngram > MAX_NGRAM:
        raise OracleError(
            f"no_repeat_ngram {params.no_repeat_ngram}: the torch backend matches n-grams of at most {MAX_NGRAM} tokens"
        )
    if length is not None and length > HISTORY:
        raise OracleError(
            f"no_repeat_ngram: the request reaches {length} tokens of prompt and output; the torch "
            f"backend keeps at most {HISTORY} per request"
        )


LIMITS = {"bad_words": _bad_words_limits, "no_repeat_ngram": _no_repeat_ngram_limits}


def check_limits(params, length: int | None = None) -> None:
    """Refuse what the device's tables cannot hold. length: the tokens (prompt and output) the
    request may reach, where known (add(): prompt + max_tokens; a round: its committed tokens
    after it)."""
    for step in CHAIN.steps:
        if step.name in LIMITS and step.is_on(params):
            LIMITS[step.name](params, length)


# ---- each step's rows: params, V -> {row name: numpy scalar or row}: its Step.rows (the
# filters: oracle/filters.py), else ROWS; a step named in neither has one scalar row per
# SamplingParams field, of the field's name (float32 or int64) ----


def _mask_rows(params, V) -> dict:
    ban = np.full(V, params.allowed_token_ids is not None)
    if params.allowed_token_ids is not None:
        ban[list(params.allowed_token_ids)] = False
    ban[list(params.banned_token_ids)] = True
    return {"ban": ban}


def _bad_words_rows(params, V) -> dict:
    pre = np.zeros((MAX_BAD_WORDS, TAIL), np.int64)
    plen = np.zeros(MAX_BAD_WORDS, np.int64)
    last = np.full(MAX_BAD_WORDS, -1, np.int64)
    for n, w in enumerate(params.bad_words):
        plen[n], last[n] = len(w) - 1, w[-1]
        if len(w) > 1:
            pre[n, TAIL - len(w) + 1 :] = w[:-1]
    return {"bw_pre": pre, "bw_plen": plen, "bw_last": last}


def _min_tokens_rows(params, V) -> dict:
    stop = np.zeros(V, bool)
    stop[list(params.stop_token_ids)] = True
    return {"stop": stop, "min_tokens": np.int64(params.min_tokens)}


def _logit_bias_rows(params, V) -> dict:
    bias = np.full(V, -0.0, np.float32)  # x + (-0.0) is x, bit for bit: no bias
    for t, b in params.logit_bias:
        bias[t] = np.float32(b)
    return {"bias": bias}


ROWS = {
    "mask": _mask_rows,
    "bad_words": _bad_words_rows,
    "min_tokens": _min_tokens_rows,
    "logit_bias": _logit_bias_rows,
    "penalties": lambda p, V: {
        "rep": np.float32(p.repetition_penalty),
        "pres": np.float32(p.presence_penalty),
        "freq": np.float32(p.frequency_penalty),
    },
}


def _field_rows(step):
    return lambda p, V: {
        f: (np.float32 if isinstance(off, float) else np.int64)(getattr(p, f)) for f, off in step.off.items()
    }


STEP_ROW_FNS = {s.name: s.rows or ROWS.get(s.name) or _field_rows(s) for s in CHAIN.steps}


def sampling_rows(params, vocab: int) -> dict:
    """params -> {name: numpy scalar or row} (the module docstring)."""
    check_limits(params)
    out = {
        "greedy": np.bool_(params.greedy),
        "left": np.int64(NO_LIMIT if params.max_tokens is None else params.max_tokens),
    }
    for fn in STEP_ROW_FNS.values():
        out |= fn(params, vocab)
    return out | {"filtered": filtered(params, vocab), "steps": processor_steps(params)}


# the processor steps the device runs after the mask (kernels/sampler.py STEPS), in
# oracle.sampling_params.CHAIN's order
STEPS = tuple(s.name for s in CHAIN.named("processor"))
# the rows each step of the chain reads (the device gathers them per row: Engine._proc_rows for
# the processors, FILTER_ROWS for sampler.filtered_probs)
STEP_ROWS = {name: tuple(fn(SamplingParams(), 2)) for name, fn in STEP_ROW_FNS.items() if name != "mask"}
FILTER_ROWS = tuple(r for s in CHAIN.named("filter") for r in STEP_ROWS[s.name])
# the per-slot rows each group of device buffers takes (Engine._buffers, Engine._proc_buffers),
# initialised to the rows of default params (every step off)
SLOT_ROWS = ("greedy", "left", "ban", "stop") + FILTER_ROWS
PROC_ROWS = tuple(dict.fromkeys(r for n in STEPS for r in STEP_ROWS[n] if r not in SLOT_ROWS))
