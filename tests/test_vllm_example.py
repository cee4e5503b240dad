"""examples/vllm_rejection_sampler.py without vLLM (CI never has it): the module imports nothing
of vLLM until its factory runs, the factory refuses to run outside the Triton interpreter's CPU
setting, and the requests it cannot take on the CPU are named."""

import subprocess
import sys

import pytest

from examples import vllm_rejection_sampler as ex
from oracle.sampling_params import SamplingParams


def test_import_needs_no_vllm():
    code = "import sys, examples.vllm_rejection_sampler; print(sorted(m for m in sys.modules if 'vllm' == m[:4]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_factory_refuses_without_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    for factory in (ex.make_sampler, ex.make_sampler_pytorch_topk):
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            factory()


@pytest.mark.parametrize(
    "kw,why,why_with_filters",
    [
        ({}, None, None),
        ({"temperature": 0.7}, None, None),
        ({"temperature": 0.7, "top_p": 1.0}, None, None),
        ({"temperature": 0.7, "top_k": 3}, "top-k", None),
        ({"temperature": 0.7, "top_p": 0.9}, "top-p", None),
        ({"temperature": 0.7, "top_k": 3, "min_p": 0.1}, "top-k", "min-p"),
        ({"temperature": 0.7, "min_p": 0.1}, "min-p", "min-p"),
        ({"banned_token_ids": (2,)}, "banned", "banned"),
        ({"allowed_token_ids": (0, 1)}, "banned/allowed", "banned/allowed"),
    ],
)
def test_refusals_name_the_reason(kw, why, why_with_filters):
    p = SamplingParams(**kw)
    for got, want in ((ex.refusal(p), why), (ex.refusal(p, filters=True), why_with_filters)):
        assert (got is None) if want is None else got.startswith(want)
