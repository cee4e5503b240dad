"""How often the bfloat16 row of the judge fails a correct BF16 backend (torch-cpu-bf16) on
random tiny models, like those the property suite draws (hidden 8-32, head_dim 2-8, 1-2
layers, D 2-6, 1-3 requests, greedy and sampled, 1-2 block rounds).
    python scripts/bf16_false_alarm_rate.py [--seed 0] [--n 250]   (about 50 s per 250 on 2 cores)"""
import argparse
import collections
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle.backends import load_backend  # noqa: E402
from oracle.cases import Case, judge_mode  # noqa: E402
from oracle.config import ModelConfig  # noqa: E402
from oracle.model import LoopedModel, random_weights  # noqa: E402
from oracle.sampling import SamplingParams as SP  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=250)
    args = p.parse_args(argv)
    bk, rng = load_backend("torch-cpu-bf16"), np.random.default_rng(args.seed)
    runs, fails = collections.Counter(), []
    for _ in range(args.n):
        kvh = int(rng.choice([1, 2]))
        cfg = ModelConfig(vocab_size=int(rng.integers(16, 257)), hidden_size=int(rng.choice([8, 16, 32])),
                          intermediate_size=int(rng.choice([16, 32, 64])), num_layers=int(rng.integers(1, 3)),
                          num_heads=kvh * int(rng.choice([1, 2])), num_kv_heads=kvh, head_dim=int(rng.choice([2, 4, 8])),
                          rope_theta=float(rng.choice([1e6, 1e4, 10.0])))
        model = LoopedModel(cfg, random_weights(cfg, int(rng.integers(0, 4))))
        D = int(rng.integers(2, 7))
        d, n = int(rng.integers(1, D)), int(rng.integers(1, 4))
        prompts = [list(map(int, rng.integers(0, cfg.vocab_size, rng.integers(1, 9)))) for _ in range(n)]
        params = [SP() if rng.random() < .5 else SP(float(rng.choice([.7, 1., 1.3])), seed=int(rng.integers(1000)))
                  for _ in range(n)]
        rounds = [{i: int(rng.integers(1, 7)) for i in range(n)} for _ in range(int(rng.integers(1, 3)))]
        rep, _ = judge_mode(bk, model, Case("random", prompts, params, rounds, d, D), "block")
        runs[cfg.head_dim] += 1
        if not rep.ok:
            fails.append((cfg.head_dim, cfg.hidden_size, cfg.num_layers, d, D, rep.first_failure().detail[:140]))
    print(f"{len(fails)} of {args.n} correct runs failed; by head_dim:",
          {hd: f"{sum(f[0] == hd for f in fails)}/{runs[hd]}" for hd in sorted(runs)})
    for f in fails:
        print("  hd=%d H=%d L=%d d=%d D=%d: %s" % f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
