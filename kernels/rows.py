"""SamplingParams -> the per-slot sampling rows of the device (one conversion: Engine.set_params
writes them into its [S] / [S, V] buffers, host_sampling builds a one-row batch from them, and
round_buffer.sampling_variant takes a round's variant from the same flags).

Scalars: greedy, temp (1.0 for greedy rows, whose probabilities go unused), top_k (>= V: off),
top_p (+inf: off), min_p (0: off), left (max_tokens not yet generated; 2**62: no limit),
repetition / presence / frequency penalties (1, 0, 0: off), min_tokens.
[V] rows: ban (banned or outside allowed_token_ids), stop (stop token ids), bias (logit_bias,
-0.0 elsewhere, which adds nothing to any x).
Bad words, padded to MAX_BAD_WORDS words of at most MAX_BAD_WORD_LEN tokens: bw_pre [NW, TAIL]
(each word's prefix w[:-1], right-aligned), bw_plen [NW] (len(w) - 1), bw_last [NW] (w[-1];
-1: no word). The device keeps the last TAIL committed output tokens per slot to match them.
"""
from __future__ import annotations

import numpy as np

from oracle.errors import OracleError
from oracle.sampling import CHAIN

MAX_BAD_WORD_LEN = 8            # tokens in one bad word, at most
MAX_BAD_WORDS = 32              # bad words of one request, at most
TAIL = MAX_BAD_WORD_LEN - 1     # committed output tokens a slot keeps for the bad-word match
NO_LIMIT = 2**62


def filtered(params, vocab: int) -> bool:
    """A sampled request whose distribution min-p, top-k or top-p cut (the sorting sampler)."""
    return not params.greedy and ((params.top_k is not None and params.top_k < vocab) or
                                  (params.top_p is not None and params.top_p < 1) or bool(params.min_p))


def processor_steps(params) -> tuple:
    """The steps of oracle.sampling.CHAIN.processors after the mask that are on for these
    params (a step that is off for a row is the identity on it), in the chain's order."""
    on = {"bad_words": bool(params.bad_words), "logit_bias": bool(params.logit_bias),
          "min_tokens": bool(params.min_tokens and params.stop_token_ids),
          "penalties": params.repetition_penalty != 1 or bool(params.presence_penalty or params.frequency_penalty)}
    return tuple(n for n in STEPS if on[n])


def check_limits(params) -> None:
    """The device's bad-word tables are fixed-size (graph-safe): refuse what does not fit."""
    if len(params.bad_words) > MAX_BAD_WORDS:
        raise OracleError(f"bad_words: {len(params.bad_words)} words; the torch backend holds at most "
                          f"{MAX_BAD_WORDS} per request")
    long = [w for w in params.bad_words if len(w) > MAX_BAD_WORD_LEN]
    if long:
        raise OracleError(f"bad_words: a word of {len(long[0])} tokens {list(long[0])}; the torch backend matches "
                          f"words of at most {MAX_BAD_WORD_LEN} tokens")


def sampling_rows(params, vocab: int) -> dict:
    """params -> {name: numpy scalar or row} (the module docstring)."""
    check_limits(params)
    V = vocab
    ban = np.full(V, params.allowed_token_ids is not None)
    if params.allowed_token_ids is not None:
        ban[list(params.allowed_token_ids)] = False
    ban[list(params.banned_token_ids)] = True
    stop = np.zeros(V, bool)
    stop[list(params.stop_token_ids)] = True
    bias = np.full(V, -0.0, np.float32)              # x + (-0.0) is x, bit for bit: no bias
    for t, b in params.logit_bias:
        bias[t] = np.float32(b)
    pre = np.zeros((MAX_BAD_WORDS, TAIL), np.int64)
    plen = np.zeros(MAX_BAD_WORDS, np.int64)
    last = np.full(MAX_BAD_WORDS, -1, np.int64)
    for n, w in enumerate(params.bad_words):
        plen[n], last[n] = len(w) - 1, w[-1]
        if len(w) > 1:
            pre[n, TAIL - len(w) + 1:] = w[:-1]
    top_p = params.top_p if params.top_p is not None and params.top_p < 1 else float("inf")
    return {"greedy": np.bool_(params.greedy), "temp": np.float32(1.0 if params.greedy else params.temperature),
            "top_k": np.int64(min(params.top_k or V, V)), "top_p": np.float32(top_p),
            "min_p": np.float32(params.min_p or 0.0),
            "left": np.int64(NO_LIMIT if params.max_tokens is None else params.max_tokens),
            "rep": np.float32(params.repetition_penalty), "pres": np.float32(params.presence_penalty),
            "freq": np.float32(params.frequency_penalty), "min_tokens": np.int64(params.min_tokens),
            "ban": ban, "stop": stop, "bias": bias, "bw_pre": pre, "bw_plen": plen, "bw_last": last,
            "filtered": filtered(params, V), "steps": processor_steps(params)}


# the processor steps the device runs after the mask (kernels/sampler.py STEPS), in
# oracle.sampling.CHAIN's order
STEPS = tuple(n for n, _ in CHAIN.processors if n != "mask")
# the rows each step of the chain reads (the device gathers them per row: Engine._proc_rows for
# the processors, FILTER_ROWS for sampler.filtered_probs)
STEP_ROWS = {"temperature": ("temp",), "min_p": ("min_p",), "top_k": ("top_k",), "top_p": ("top_p",),
             "bad_words": ("bw_pre", "bw_plen", "bw_last"), "logit_bias": ("bias",), "min_tokens": ("stop", "min_tokens"),
             "penalties": ("rep", "pres", "freq")}
assert set(STEP_ROWS) == {n for n, _ in CHAIN.filters} | set(STEPS), "a chain step without its rows"
FILTER_ROWS = tuple(r for n, _ in CHAIN.filters for r in STEP_ROWS[n])
# the per-slot rows each group of device buffers takes (Engine._buffers, Engine._proc_buffers),
# initialised to the rows of default params (every step off)
SLOT_ROWS = ("greedy", "left", "ban", "stop") + FILTER_ROWS
PROC_ROWS = tuple(dict.fromkeys(r for n in STEPS for r in STEP_ROWS[n] if r not in SLOT_ROWS))
