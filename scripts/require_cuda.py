"""Exit 1 with one line `no CUDA device: ...` on stderr unless torch sees a CUDA device; exit 0
(silently) if it does. The GPU make targets (`make gpu-parity`, `make gpu-parity-full`) call it
first, so that without a GPU they stop at once instead of printing "15 skipped" (which reads
as a pass) or failing after building a 1.4B model.

It only asks the driver for the device count (torch.cuda.is_available, NVML-based where torch
supports it): no CUDA context is created and nothing is allocated.

    python scripts/require_cuda.py
"""

from __future__ import annotations

import argparse
import sys


def cuda_problem() -> str | None:
    """Why no CUDA device can be used, or None."""
    try:
        import torch
    except ImportError as e:
        return f"torch is not installed ({e})"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no device (CUDA_VISIBLE_DEVICES, driver?)"
    return None


def main(argv=None) -> int:
    argparse.ArgumentParser(
        description="Exit 1 with one line 'no CUDA device: ...' unless torch sees a CUDA "
        "device (the GPU make targets call it first)."
    ).parse_args(argv)
    problem = cuda_problem()
    if problem:
        print(f"no CUDA device: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
