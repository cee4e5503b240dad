"""Size limits checked before any work, so a large input is refused in one line instead of
running for hours or eating memory. Every limit is named in its message, and `--allow-large`
lifts them all (the work then takes as long as it takes).

The time estimate of a reference run (check, trace record) is calibrated on this project's
2-core machine (tiny and small presets, up to 200 rounds; within about 3x): a row of a round
costs ROW_SECONDS per layer plus its multiply-adds at FLOPS_PER_SECOND; the cache-free
recompute forwards each committed position once and each round's tokens once, attending over
the context (linear in the rounds, like decoding itself).
"""
from __future__ import annotations

from ..config import ModelConfig
from ..errors import OracleError

# Hard caps on single sizes.
MAX_REQUESTS = 256          # requests per round (len of --counts)
MAX_TOKEN_COUNT = 256       # T_i = K_i + 1
MAX_TARGET_LOOPS = 64       # D
MAX_ROUNDS = 1000
MAX_PROMPT_LEN = 4096
MAX_PROMPT_TOKENS = 4096    # model --tokens
# A planned schedule holds one Python tuple per row: sum(T) * D rows.
MAX_SCHEDULE_ROWS = 200_000
# The text diagram prints requests x offsets x calls cells.
MAX_DIAGRAM_CELLS = 200_000
# Reference runs (check, trace record): estimated seconds.
MAX_SECONDS = 120.0
ROW_SECONDS = 3.5e-4        # Python overhead of one row of a round, per layer (fit on tiny and small)
RECOMPUTE_ROW_SECONDS = 2e-5   # the same for a row of the cache-free recompute (whole sequences at once)
FLOPS_PER_SECOND = 2.5e9    # NumPy FP32 row-by-row matrix-vector products on the CI machine
ATTENTION_SECONDS = 4e-7    # per (token x token) of a cache-free recompute, tiny preset, per loop

ALLOW = "pass --allow-large to run it anyway"


def refuse(what: str, value, limit, unit: str = "") -> None:
    raise OracleError(f"{what} {value}{unit} exceeds the limit {limit}{unit}; {ALLOW}")


def check_counts(counts, D: int | None = None, allow_large: bool = False) -> None:
    """Requests, token counts and D of one round."""
    if allow_large:
        return
    if len(counts) > MAX_REQUESTS:
        refuse("--counts: number of requests", len(counts), MAX_REQUESTS)
    if counts and max(counts) > MAX_TOKEN_COUNT:
        refuse("--counts: token count T_i", max(counts), MAX_TOKEN_COUNT)
    if D is not None and D > MAX_TARGET_LOOPS:
        refuse("-D/--target-loops", D, MAX_TARGET_LOOPS)


def check_schedule_size(counts, d: int, D: int, allow_large: bool = False, diagram: bool = False) -> None:
    """A planned schedule (and its text diagram) fits in memory and on a screen."""
    if allow_large:
        return
    rows = sum(counts) * D
    if rows > MAX_SCHEDULE_ROWS:
        refuse("schedule size sum(T)*D =", rows, MAX_SCHEDULE_ROWS, " rows")
    if diagram:
        calls = (max(counts) - 1) * d + D
        cells = sum(counts) * calls
        if cells > MAX_DIAGRAM_CELLS:
            raise OracleError(f"diagram of {cells} cells exceeds the limit {MAX_DIAGRAM_CELLS}; "
                              f"use --json, or {ALLOW}")


def params_per_row(cfg: ModelConfig) -> int:
    """Weights one row multiplies through in one loop (all layers), plus the head."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    attn = H * cfg.num_heads * cfg.head_dim * 2 + H * cfg.num_kv_heads * cfg.head_dim * 2
    return cfg.num_layers * (attn + 3 * H * I) + H * cfg.vocab_size


def estimate_seconds(cfg: ModelConfig, rounds: list[dict], D: int, prompt_len: int, check: bool = True) -> float:
    """Seconds of a reference check of rounds [{request: T_i}]: both rounds' rows, plus the
    cache-free recompute (each prompt once, then each round's tokens and its committed tokens,
    attending over the context). check=False: one mode, no recompute (trace record)."""
    flops_s = 2 * params_per_row(cfg) / FLOPS_PER_SECOND
    row_s, recompute_row_s = ROW_SECONDS * cfg.num_layers + flops_s, RECOMPUTE_ROW_SECONDS * cfg.num_layers + flops_s
    round_rows = (2 if check else 1) * D * sum(sum(r.values()) for r in rounds)
    recompute_rows, recompute_pairs = 0, 0
    length: dict = {}
    for r in (rounds if check else ()):
        for rid, t in r.items():
            if rid not in length:                    # the prompt, once
                length[rid] = prompt_len
                recompute_rows += D * prompt_len
                recompute_pairs += D * prompt_len * prompt_len // 2
            n = length[rid]
            recompute_rows += 2 * D * t              # the round's tokens, then the committed ones
            recompute_pairs += 2 * D * t * n
            length[rid] = n + t                      # at most T_i tokens are committed per round
    width = cfg.num_layers * cfg.num_heads * cfg.head_dim / (TINY_SHAPE.num_layers * 32)
    return round_rows * row_s + recompute_rows * recompute_row_s + recompute_pairs * ATTENTION_SECONDS * max(1.0, width)


def forward_seconds(cfg: ModelConfig, n_tokens: int, loops: int) -> float:
    """Seconds of one cache-free forward (`model`): n_tokens rows per loop, attention n^2."""
    row_s = RECOMPUTE_ROW_SECONDS * cfg.num_layers + 2 * params_per_row(cfg) / FLOPS_PER_SECOND
    width = cfg.num_layers * cfg.num_heads * cfg.head_dim / (TINY_SHAPE.num_layers * 32)
    return loops * (n_tokens * row_s + n_tokens * n_tokens * ATTENTION_SECONDS * max(1.0, width))


def refuse_slow(seconds: float, what: str) -> None:
    if seconds > MAX_SECONDS:
        raise OracleError(f"this run would take about {seconds:.0f} s (limit {MAX_SECONDS:.0f} s: {what}); {ALLOW}")


def check_work(cfg: ModelConfig, counts, D: int, rounds: int, prompt_len: int, allow_large: bool = False,
               check: bool = True) -> None:
    """A custom case: the same counts every round."""
    if allow_large:
        return
    if rounds > MAX_ROUNDS:
        refuse("--rounds", rounds, MAX_ROUNDS)
    if prompt_len > MAX_PROMPT_LEN:
        refuse("--prompt-len", prompt_len, MAX_PROMPT_LEN)
    seconds = estimate_seconds(cfg, [dict(enumerate(counts))] * rounds, D, prompt_len, check)
    refuse_slow(seconds, f"counts {','.join(map(str, counts))}, D={D}, {rounds} rounds, prompt length "
                         f"{prompt_len}, {cfg.num_layers} layers x hidden {cfg.hidden_size}")


def check_cases_work(cfg: ModelConfig, cases, allow_large: bool = False, check: bool = True) -> None:
    """Built-in cases (prompts of at most 8 tokens) on this model."""
    if allow_large:
        return
    seconds = sum(estimate_seconds(cfg, c.rounds, c.D, 8, check) for c in cases)
    refuse_slow(seconds, f"{len(cases)} built-in case(s) on {cfg.num_layers} layers x hidden {cfg.hidden_size}")


TINY_SHAPE = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                         num_heads=4, num_kv_heads=4, head_dim=8)
