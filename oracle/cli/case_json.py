"""`check --case-json JSON`: one case as data on one line (issue 44), the reproduce line of a shrunk
case (oracle/judge/shrinker/shrink.py), which per-request prompts and params make impossible to write with the
other round options.

    {"prompts": [[12, 40, 3], [7]],          token ids per request (request i is prompts[i])
     "params": [{}, {"temperature": 1.0, "seed": 1}],   SamplingParams JSON per request; {} is greedy
     "rounds": [{"0": 2, "1": 5}, {"1": 3}],  per round: request id -> T_i (a request joins at its first
                                              round; the order is the round's row order)
     "d": 1, "D": 2,                          every request's draft and target loops, or
     "depths": [[1, 2], [2, 4]],              per-request (d_i, D_i) instead of d and D
     "policy": "sequential"}                  optional (default sequential)

It is checked as strictly as the other round options, each problem one `error:` line (exit 2): not
JSON, not an object, an unknown or missing key, a value of the wrong type, a token id outside the
vocabulary, a request in no round, an empty round, a token count below 1, d >= D, invalid sampling
parameters (`SamplingParams`, their ids in the vocabulary, the repetition penalty's range), what the
round options refuse as having no effect (filters of a greedy request, --policy fixed with every
request greedy, min_tokens without stop tokens, top_k >= the vocabulary) or as masking every token,
and the size limits (oracle/cli/limits.py; --allow-large lifts them). `encode` writes the short form:
params with their default fields left out, policy and depths only where given.
"""

from __future__ import annotations

import json
import operator

from . import limits
from ..errors import OracleError
from ..judge.scenario import Case, command
from ..rng_trace import check_policy
from ..sampling_params import CHAIN, SamplingParams
from ..schedule import validate

KEYS = ("prompts", "params", "rounds", "d", "D", "depths", "policy")
REQUIRED = ("prompts", "params", "rounds")
DEFAULT = SamplingParams()
NAME = "--case-json"


def _fail(why: str):
    raise OracleError(f"{NAME}: {why}")


def encode(case: Case, params=None) -> str:
    """The case as --case-json's one line (compact JSON); params: the params it runs with (a
    built-in case's derived ones), default case.params."""
    params = case.params if params is None else params
    out = {
        "prompts": [list(map(int, p)) for p in case.prompts],
        "params": [_short(p) for p in params],
        "rounds": [{str(r): int(t) for r, t in rnd.items()} for rnd in case.rounds],
    }
    if case.depths is not None:
        out["depths"] = [[int(a), int(b)] for a, b in case.depths]
    else:
        out |= {"d": int(case.d), "D": int(case.D)}
    if case.policy != "sequential":
        out["policy"] = case.policy
    return json.dumps(out, separators=(",", ":"))


def _short(p: SamplingParams) -> dict:
    """SamplingParams JSON without the fields at their defaults (SamplingParams(**short) reads it)."""
    return {k: v for k, v in p.to_json().items() if v != _plain(getattr(DEFAULT, k))}


def _plain(x):
    return [_plain(y) for y in x] if isinstance(x, (tuple, list)) else x


def _int(x, what: str, low: int) -> int:
    try:
        if isinstance(x, bool):
            raise TypeError
        x = operator.index(x)
    except TypeError:
        _fail(f"{what} is {json.dumps(x)}, not an integer")
    if x < low:
        _fail(f"{what} is {x}; it must be >= {low}")
    return x


def _list(x, what: str) -> list:
    if not isinstance(x, list):
        _fail(f"{what} must be a JSON array, got {json.dumps(x)[:60]}")
    return x


def decode(text: str, cfg, allow_large: bool = False, check_penalty=None, reference=None) -> Case:
    """The case `text` describes on a model of config `cfg`, checked (one OracleError line per
    problem); check_penalty: round_args.check_penalty (the repetition penalty's range)."""
    try:
        obj = json.loads(text, parse_constant=lambda c: _fail(f"{c} is not a number JSON allows here"))
    except (ValueError, RecursionError) as e:
        if isinstance(e, OracleError):
            raise
        _fail(f"not JSON: {e}")
    if not isinstance(obj, dict):
        _fail(f"must be a JSON object with keys {', '.join(KEYS)}, got {type(obj).__name__}")
    unknown = [k for k in obj if k not in KEYS]
    if unknown:
        _fail(f"unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        _fail(f"missing key {missing[0]!r}")
    vocab = cfg.vocab_size
    prompts = []
    for i, p in enumerate(_list(obj["prompts"], "prompts")):
        p = [_int(t, f"prompts[{i}] token", 0) for t in _list(p, f"prompts[{i}]")]
        if not p:
            _fail(f"prompts[{i}] is empty: a request needs at least one prompt token")
        bad = [t for t in p if t >= vocab]
        if bad:
            _fail(f"prompts[{i}]: token id {bad[0]} is outside the vocabulary [0, {vocab})")
        if not allow_large and len(p) > limits.MAX_PROMPT_LEN:
            limits.refuse(f"{NAME}: prompts[{i}] length", len(p), limits.MAX_PROMPT_LEN)
        prompts.append(p)
    n = len(prompts)
    if not n:
        _fail("prompts is empty: a case needs at least one request")
    raw = _list(obj["params"], "params")
    if len(raw) != n:
        _fail(f"params gives {len(raw)} entries for {n} requests (one SamplingParams object each)")
    policy = obj.get("policy", "sequential")
    if not isinstance(policy, str):
        _fail(f"policy must be a string, got {json.dumps(policy)}")
    try:
        check_policy(policy)
    except OracleError as e:
        _fail(str(e))
    params = [_params(p, i, vocab, check_penalty) for i, p in enumerate(raw)]
    if policy == "fixed" and all(p.greedy for p in params):
        _fail(
            "policy fixed lays out the uniforms of sampled requests; every request is greedy and draws "
            "none: drop it or give a request a temperature > 0"
        )
    depths, d, D = _depths(obj, n)
    rounds = _rounds(obj, n, d, D, depths, allow_large)
    if not rounds:
        _fail("rounds is empty: a case needs at least one round")
    unused = sorted(set(range(n)) - {r for rnd in rounds for r in rnd})
    if unused:
        _fail(f"request {unused[0]} is in no round (its prompt and params would do nothing)")
    if not allow_large and len(rounds) > limits.MAX_ROUNDS:
        limits.refuse(f"{NAME}: rounds", len(rounds), limits.MAX_ROUNDS)
    case = Case("--case-json", prompts, params, rounds, d, D, policy, "", depths)
    if not allow_large:
        plen = max(map(len, prompts))
        seconds = (
            limits.estimate_judge_seconds(cfg, rounds, d, D, plen)
            if limits.judge_on_gpu(reference)
            else limits.estimate_seconds(cfg, rounds, D, plen, True)
        )
        limits.refuse_slow(seconds, f"{NAME}: {n} requests, {len(rounds)} rounds, D={D}")
    return case


def _depths(obj: dict, n: int) -> tuple:
    """(depths, d, D) of the case: per-request pairs from "depths" (d, D their min and max), or
    None with "d" and "D"."""
    if "depths" in obj:
        if "d" in obj or "D" in obj:
            _fail("depths gives every request its own [d_i, D_i]; do not combine it with d or D")
        pairs = _list(obj["depths"], "depths")
        if len(pairs) != n:
            _fail(f"depths gives {len(pairs)} pairs for {n} requests (one [d_i, D_i] each)")
        depths = []
        for i, pair in enumerate(pairs):
            if not isinstance(pair, list) or len(pair) != 2:
                _fail(f"depths[{i}] must be a pair [d_i, D_i], got {json.dumps(pair)}")
            depths.append((_int(pair[0], f"depths[{i}] d_i", 1), _int(pair[1], f"depths[{i}] D_i", 1)))
        return depths, min(a for a, _ in depths), max(b for _, b in depths)
    else:
        for k in ("d", "D"):
            if k not in obj:
                _fail(f"missing key {k!r} (or give depths)")
        return None, _int(obj["d"], "d", 1), _int(obj["D"], "D", 1)


def _rounds(obj: dict, n: int, d: int, D: int, depths, allow_large: bool) -> list[dict]:
    """The rounds of the case ({request id: token count} each), each checked against the depths."""
    rounds = []
    for j, rnd in enumerate(_list(obj["rounds"], "rounds")):
        if not isinstance(rnd, dict) or not rnd:
            _fail(f"rounds[{j}] must be a non-empty object request id -> token count, got {json.dumps(rnd)[:60]}")
        counts = {}
        for key, t in rnd.items():
            if not key.isdigit() or int(key) >= n:
                _fail(f"rounds[{j}]: request id {key!r} is not one of 0..{n - 1}")
            counts[int(key)] = _int(t, f"rounds[{j}] token count of request {key}", 1)
        ids = list(counts)
        try:
            validate(
                list(counts.values()),
                d if depths is None else [depths[r][0] for r in ids],
                D if depths is None else [depths[r][1] for r in ids],
            )
            limits.check_counts(list(counts.values()), D, allow_large)
        except OracleError as e:
            _fail(f"rounds[{j}]: {e}")
        rounds.append(counts)
    return rounds


def _params(p, i: int, vocab: int, check_penalty=None) -> SamplingParams:
    who = f"params[{i}]"
    if not isinstance(p, dict):
        _fail(f"{who} must be a SamplingParams JSON object, got {json.dumps(p)[:60]}")
    try:
        sp = SamplingParams(**p)
        sp.check_vocab(vocab, who)
    except TypeError as e:
        _fail(f"{who}: {e}")
    except OracleError as e:
        msg = str(e)
        _fail(msg if msg.startswith(who) else f"{who}: {msg}")
    if check_penalty is not None:
        try:
            check_penalty(sp.repetition_penalty, "repetition_penalty")
        except OracleError as e:
            _fail(f"{who}: {e}")
    if sp.greedy:
        given = next((f for s in CHAIN.named("filter") if s.options for f in s.off if p.get(f) is not None), None)
        if given:
            _fail(
                f"{who}: {given} filters sampled tokens; with temperature 0 the request is greedy and it has "
                f"no effect: drop it or give a temperature > 0"
            )
    if sp.min_tokens and not sp.stop_token_ids:
        _fail(f"{who}: min_tokens {sp.min_tokens} masks the stop tokens; without stop_token_ids it has no effect")
    for f in CHAIN.inert(sp, vocab):
        _fail(f"{who}: {f} {getattr(sp, f)} keeps every token of the {vocab}-token vocabulary: it has no effect")
    masked = set(sp.banned_token_ids) | {w[0] for w in sp.bad_words if len(w) == 1}
    if sp.allowed_token_ids is not None:
        masked |= set(range(vocab)) - set(sp.allowed_token_ids)
    if len(masked) >= vocab:
        _fail(f"{who}: the masks and one-token bad words cover all {vocab} tokens: no token is left to emit")
    if sp.min_tokens and len(masked | set(sp.stop_token_ids)) >= vocab:
        _fail(f"{who}: min_tokens masks the stop tokens, and with the masks they cover all {vocab} tokens")
    return sp


def check_args(args, explicit: list, cfg, check_penalty) -> None:
    """check_round_args for --case-json: alone among the round options, the case decoded and kept
    (args.case_json_case) before any work."""
    if args.case is not None:
        raise OracleError(f"--case {args.case} runs a built-in case; do not combine it with {NAME}")
    if explicit:
        raise OracleError(
            f"{NAME} gives the whole case (prompts, params, rounds, depths, policy); do not combine it with "
            f"--{explicit[0].replace('_', '-')}"
        )
    args.case_json_case = decode(
        args.case_json, cfg, args.allow_large, check_penalty, reference=getattr(args, "reference", None)
    )


def case_of(args, flags: list) -> Case:
    """The decoded case, its reproduce line the command that runs it (flags: round_case.model_flags)."""
    case = args.case_json_case
    words = ["check", *flags, NAME, args.case_json] + (["--allow-large"] if args.allow_large else [])
    case.reproduce = command(words)
    case.name = describe_name(case)
    return case


def describe_name(case: Case) -> str:
    n, r = len(case.prompts), len(case.rounds)
    return f"case-json ({n} request{'s' if n != 1 else ''}, {r} round{'s' if r != 1 else ''})"
