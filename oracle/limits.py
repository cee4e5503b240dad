"""Size limits checked before any work, so a large input is refused in one line instead of
running for hours or eating memory. Every limit is named in its message, and `--allow-large`
lifts them all (the work then takes as long as it takes).

The time estimate of a reference run (check, trace record) is calibrated on this project's
2-core CI machine: a recurrent row costs about ROW_SECONDS on the tiny preset (scaled by the
model's parameter count), and the cache-free recompute of each round re-runs the whole
sequence, whose attention grows with the square of its length.
"""
from __future__ import annotations

from .config import ModelConfig
from .errors import OracleError

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
ROW_SECONDS = 1.5e-4        # one recurrent row on the tiny preset (Python overhead dominated)
FLOPS_PER_SECOND = 5e9      # NumPy FP32 on the CI machine, large matrices
ATTENTION_SECONDS = 6e-7    # per (token x token) of a cache-free recompute, tiny preset, per loop

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


def estimate_seconds(cfg: ModelConfig, counts, D: int, rounds: int, prompt_len: int, check: bool = True) -> float:
    """Seconds of a reference check: both rounds' rows, plus the cache-free recompute of every
    round (whole sequence, all loops), whose attention term is quadratic in its length.
    check=False: one mode, no recompute (trace record)."""
    row_s = max(ROW_SECONDS, 2 * params_per_row(cfg) / FLOPS_PER_SECOND)
    round_rows = (2 if check else 1) * rounds * sum(counts) * D
    recompute_rows, recompute_pairs = 0, 0
    for t in (counts if check else ()):
        for r in range(rounds):
            length = prompt_len + r * t
            recompute_rows += D * length
            recompute_pairs += D * length * length
    width = cfg.num_layers * cfg.num_heads * cfg.head_dim / (TINY_SHAPE.num_layers * 32)
    return (round_rows + recompute_rows) * row_s + recompute_pairs * ATTENTION_SECONDS * max(1.0, width)


def check_work(cfg: ModelConfig, counts, D: int, rounds: int, prompt_len: int, allow_large: bool = False,
               check: bool = True) -> None:
    if allow_large:
        return
    if rounds > MAX_ROUNDS:
        refuse("--rounds", rounds, MAX_ROUNDS)
    if prompt_len > MAX_PROMPT_LEN:
        refuse("--prompt-len", prompt_len, MAX_PROMPT_LEN)
    seconds = estimate_seconds(cfg, counts, D, rounds, prompt_len, check)
    if seconds > MAX_SECONDS:
        raise OracleError(f"this run would take about {seconds:.0f} s (limit {MAX_SECONDS:.0f} s: counts "
                          f"{','.join(map(str, counts))}, D={D}, {rounds} rounds, prompt length {prompt_len}, "
                          f"{cfg.num_layers} layers x hidden {cfg.hidden_size}); {ALLOW}")


TINY_SHAPE = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                         num_heads=4, num_kv_heads=4, head_dim=8)
