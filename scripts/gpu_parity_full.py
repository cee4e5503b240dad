"""Parity at the real Ouro-1.4B shape: a backend under test against the JAX FP32 judge
(gpu_tests/parity_full.py, whose docstring gives the options and the memory bound).

    python scripts/gpu_parity_full.py                       # ouro-1.4b, random weights, on the GPU
    python scripts/gpu_parity_full.py --time-judge          # + the judge's round time, C=16, ctx 1024
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_tests.parity_full import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
