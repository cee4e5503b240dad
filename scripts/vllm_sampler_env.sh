#!/usr/bin/env bash
# The CPU-only environment in which vLLM 0.33.0's RejectionSampler runs under the Triton interpreter,
# in a venv of its own outside the repository (never installed by `make install`; CI never needs it),
# then the sampler judge on examples/vllm_rejection_sampler.py. Idempotent: a venv that already
# imports the sampler is kept. Usage: scripts/vllm_sampler_env.sh [judge options...]
# Environment: VLLM_VENV (default /work/vllm-venv), PYTHON (default python3.11), VLLM_PKGS (the package
# list, default ../shared/data/vllm-0.33-cpu-venv.txt beside the repository), VLLM_FACTORY (default
# make_sampler; make_sampler_pytorch_topk takes top-k/top-p through vLLM's PyTorch implementation).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VLLM_VENV:-/work/vllm-venv}"
pkgs="${VLLM_PKGS:-$repo/../shared/data/vllm-0.33-cpu-venv.txt}"
[ -f "$pkgs" ] || pkgs=/work/shared/data/vllm-0.33-cpu-venv.txt
export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""

probe() { "$venv/bin/python" -c 'from vllm.v1.sample.rejection_sampler import RejectionSampler; import scipy' 2>/dev/null; }

if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3.11}" -m venv "$venv"
fi
if ! probe; then
    pip=("$venv/bin/python" -m pip install -q)
    "${pip[@]}" torch==2.13.0
    "${pip[@]}" --no-deps vllm==0.33.0
    # The list is a pip freeze: every package pinned, so --no-deps installs exactly it. torch and vllm
    # are in already. The PyPI package `kernels` is left out: its name collides with this repository's
    # kernels/, which comes first on sys.path here. vLLM's import reaches transformers, whose
    # is_kernels_available() then reads the PyPI package's version but imports ours, and
    # `from kernels import CUDAProperties` fails: vLLM does not import. Without it, transformers
    # finds no version for kernels/, takes the hub kernels as absent, and vLLM imports.
    req="$(mktemp)"
    grep -Ev '^(#|torch==|vllm==|kernels==)' "$pkgs" | sed 's/ *#.*//' | grep -v '^$' > "$req"
    "${pip[@]}" --no-deps -r "$req"
    rm -f "$req"
    # The oracle's own needs (it runs from the repository through PYTHONPATH, not installed).
    "${pip[@]}" scipy threadpoolctl
    probe || { echo "vllm_sampler_env: vLLM's RejectionSampler does not import in $venv" >&2; exit 1; }
fi

cd "$repo"
PYTHONPATH="$repo" exec "$venv/bin/python" -m oracle sampler \
    --backend "examples.vllm_rejection_sampler:${VLLM_FACTORY:-make_sampler}" "$@"
