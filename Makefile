PY ?= python
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

.PHONY: install test test-backends-full test-parallel test-serial check gpu-parity gpu-parity-full bench golden

# torch from pip (its CPU build lies on this machine's disk, where pip looks), then the project and
# the rest with uv (the same resolution as pip's: jax 0.10.2, triton 3.7.1; 4-6 s against pip's 27 s
# on a fresh venv, 2026-12-05), byte-compiled as pip would. An editable install compiles nothing of
# the project: its bytecode is written here, once (with PYTHONDONTWRITEBYTECODE set, as on CI's
# machines, every run would compile the sources again).
install:
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install uv
	$(PY) -m uv pip install --python $(PY) --compile-bytecode -e ".[test]"
	$(PY) -m compileall -q oracle kernels bench judge_jax property_tests examples tests meta_tests gpu_tests scripts > /dev/null

# ruff's lint and format check (seconds), then one xdist session with a worker more than the cores
# (a worker waiting on a subprocess or a timer leaves its core to the others: 193% CPU on 2 cores
# against 184% with 2 workers, 2026-12-05) and worksteal (the long tests do not leave a core idle
# at the end): unit tests, the property suite and its meta-tests on the reference,
# and first, as tests of that session (tests/test_backend_suites.py), the property suite against every
# named backend CI can run (the backends and profiles `python -m oracle.runtime.backends` lists, from
# oracle/runtime/backends.py NAMED and SUITE_PROFILES): torch FP32, BF16 and invariant BF16 on the CPU
# and the JAX FP32 backend, each in ci-slow-backend (a quarter of the ci examples; `make
# test-backends-full`: all of them), each a pytest process of its own with one torch thread.
# PYTHONDONTWRITEBYTECODE is unset for the session: its first process writes pytest's rewritten test
# modules' bytecode, which its other processes (the workers, every nested pytest) then read instead
# of rewriting them (collection 7.7 s -> 4.8 s a process, 2026-12-05).
test:
	$(PY) -m ruff check . && $(PY) -m ruff format --check .
	env -u PYTHONDONTWRITEBYTECODE HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n $(WORKERS) --dist worksteal tests property_tests meta_tests

# The property suite against every named CPU backend at the full ci budget (make test runs a quarter).
test-backends-full:
	$(PY) scripts/backend_suites.py --profile ci

# `make test` already spreads over every core (pytest-xdist -n auto); the name the README uses
# for the timing on a many-core host.
test-parallel: test

# `make test`'s pytest line without xdist, with Hypothesis statistics (one process; the backends'
# suites still run as processes of their own).
test-serial:
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q --hypothesis-show-statistics tests property_tests meta_tests

check:
	$(PY) -m oracle check

# Both GPU targets stop first, with one line "no CUDA device: ...", where torch sees no GPU.
gpu-parity:
	@$(PY) scripts/require_cuda.py
	ORACLE_BACKEND=$${ORACLE_BACKEND:-torch-cuda} $(PY) -m pytest -q -m gpu gpu_tests

# The BF16 rounds at the ouro-1.4b shape judged by the JAX FP32 judge on the GPU. The judge's own
# round time is a benchmark (`bash scripts/gpu_run.sh judge`), not part of this check.
gpu-parity-full:
	@$(PY) scripts/require_cuda.py
	$(PY) scripts/gpu_parity_full.py --preset ouro-1.4b --backend torch-cuda

bench:
	$(PY) scripts/bench_tiny_rounds.py

golden:
	$(PY) scripts/regen_golden.py

# vLLM 0.33's RejectionSampler through the sampler judge, on the CPU (Triton interpreter), in a
# venv of its own outside the repository (VLLM_VENV, default /work/vllm-venv; made on first use).
# Never part of install or test. JUDGE_ARGS: the judge's options.
.PHONY: vllm-sampler
vllm-sampler:
	bash scripts/vllm_sampler_env.sh $(JUDGE_ARGS)
