PY ?= python

.PHONY: install test test-parallel check gpu-parity gpu-parity-full bench golden

install:
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e .

test:
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q --hypothesis-show-statistics tests property_tests meta_tests
	ORACLE_BACKEND=torch-cpu HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q property_tests

# The test paths of `make test`'s first line, spread over every core (pytest-xdist).
test-parallel:
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n auto --hypothesis-show-statistics tests property_tests meta_tests

check:
	$(PY) -m oracle check

gpu-parity:
	ORACLE_BACKEND=$${ORACLE_BACKEND:-torch-cuda} $(PY) -m pytest -q -m gpu gpu_tests

# The BF16 rounds at the ouro-1.4b shape judged by the JAX FP32 judge on the GPU.
gpu-parity-full:
	$(PY) scripts/gpu_parity_full.py --preset ouro-1.4b --backend torch-cuda --time-judge

bench:
	$(PY) scripts/bench_tiny_rounds.py

golden:
	$(PY) scripts/regen_golden.py
