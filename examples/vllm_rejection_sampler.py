"""vLLM 0.33's RejectionSampler (vllm/v1/sample/rejection_sampler.py) through the sampler contract
(oracle/sampler/contract.py), on the CPU under the Triton interpreter:

    scripts/vllm_sampler_env.sh [judge options]     # or: make vllm-sampler

which makes the venv (/work/vllm-venv; vLLM never enters this repository's environment, and CI
never needs it) and runs `python -m oracle sampler --backend examples.vllm_rejection_sampler:make_sampler`
with TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES="" and the repository on PYTHONPATH. vLLM is imported
when the factory runs, never when this module is imported.

What it covers: one forward() of vLLM's own RejectionSampler per batch, its four Triton kernels
included: greedy requests, sampled requests with draft probabilities (draft logits are handed over
as q = the oracle's filtered_probs of them, what a draft model gives vLLM) and n-gram drafts
(draft_probs=None). The bonus token comes from vLLM's Sampler, as in the engine. Each request
gets its own torch.Generator seeded from the request's seed (SamplingMetadata.generators); vLLM
draws its own uniforms, so takes_uniforms is False (distributional verdicts only).

What it cannot on the CPU, and refuses through `refuses` (the judge skips and lists such cases):
  top-k, top-p: vLLM's apply_top_k_top_p takes its Triton path whenever Triton imports, and that
      asks the platform for num_compute_units, which the CPU does not implement;
  min-p: vLLM 0.33 refuses it with speculative decoding (SamplingParams._validate_spec_decode:
      "not yet supported"); its RejectionSampler applies no argmax-invariant logits processor, so
      min-p would reach the bonus token only;
  the mask (banned/allowed token ids): not built here.
`make_sampler_pytorch_topk` takes top-k and top-p through vLLM's PyTorch implementation
(apply_top_k_top_p_pytorch, the path vLLM takes where Triton is absent), not the Triton one a GPU
runs: `VLLM_FACTORY=make_sampler_pytorch_topk scripts/vllm_sampler_env.sh`. Verdicts, draws and
times: docs/results.md, "vLLM 0.33 RejectionSampler through the sampler judge".
"""

from __future__ import annotations

import os

import numpy as np

REFUSALS = (
    ("top_k", "top-k: vLLM's Triton top-k/top-p asks for num_compute_units, not implemented on the CPU"),
    ("top_p", "top-p: vLLM's Triton top-k/top-p asks for num_compute_units, not implemented on the CPU"),
    ("min_p", "min-p: vLLM 0.33 refuses it with speculative decoding (SamplingParams._validate_spec_decode)"),
    ("banned_token_ids", "banned/allowed token ids: vLLM's allowed_token_ids_mask is not built by this adapter"),
    ("allowed_token_ids", "banned/allowed token ids: vLLM's allowed_token_ids_mask is not built by this adapter"),
)


def refusal(params, filters: bool = False) -> str | None:
    """Why the adapter does not take a request with these params, or None. filters: top-k and
    top-p are taken (vLLM's PyTorch implementation)."""
    for field, why in REFUSALS[2 if filters else 0 :]:
        v = getattr(params, field)
        if field == "top_p" and v is not None and v >= 1:
            continue
        if v not in (None, (), 0, 0.0):
            return why
    return None


class VllmRejectionSampler:
    """One vLLM RejectionSampler (and the Sampler it draws bonus tokens with) on the CPU."""

    name = "vllm-0.33-rejection-sampler"
    takes_uniforms = False
    max_batch = 256  # the Triton interpreter runs each request's program in Python

    def __init__(self, pytorch_topk: bool = False):
        import torch
        from vllm.v1.sample.logits_processor import LogitsProcessors
        from vllm.v1.sample.metadata import SamplingMetadata
        from vllm.v1.sample.rejection_sampler import RejectionSampler
        from vllm.v1.sample.sampler import Sampler
        from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

        self.torch, self.SamplingMetadata, self.SpecDecodeMetadata = torch, SamplingMetadata, SpecDecodeMetadata
        self.LogitsProcessors = LogitsProcessors
        self.sampler = RejectionSampler(Sampler())
        self.filters = pytorch_topk
        if pytorch_topk:  # apply_top_k_top_p reads HAS_TRITON at each call
            from vllm.v1.sample.ops import topk_topp_sampler

            topk_topp_sampler.HAS_TRITON = False
            self.name += "+pytorch-topk-topp"

    def refuses(self, req) -> str | None:
        return refusal(req.params, self.filters)

    def sample(self, batch) -> list[list[int]]:
        """One forward() over the batch. Requests of different kinds (greedy, draft probs,
        n-gram) go in separate calls: vLLM takes draft_probs for the whole batch or not at all."""
        out: list = [None] * len(batch)
        groups: dict = {}
        for i, req in enumerate(batch):
            why = refusal(req.params, self.filters)
            if why:
                raise RuntimeError(f"request {i}: {why}")
            groups.setdefault(req.kind in ("probs", "logits"), []).append(i)
        for with_probs, idx in groups.items():
            for i, toks in zip(idx, self._forward([batch[i] for i in idx], with_probs)):
                out[i] = toks
        return out

    def _forward(self, reqs, with_probs: bool) -> list[list[int]]:
        torch = self.torch
        V = reqs[0].V
        drafts = [list(map(int, r.draft_tokens)) for r in reqs]
        meta = self._spec_metadata(drafts)
        # logits: [num_tokens + batch_size, V], each request's K + 1 offsets in a row
        logits = torch.from_numpy(np.concatenate([r.target_logits for r in reqs]).astype(np.float32))
        probs = None
        if with_probs:  # [num_tokens, V]; greedy requests' rows are never read
            probs = torch.from_numpy(np.concatenate([_draft_probs(r) for r in reqs]).reshape(-1, V))
        res = self.sampler(meta, probs, logits, self._sampling_metadata(reqs))
        toks, _ = self.sampler.parse_output(res.sampled_token_ids, V)
        return toks

    def _spec_metadata(self, drafts: list[list[int]]):
        """SpecDecodeMetadata for requests laid out as [d_0 .. d_{K-1}, bonus] each."""
        torch = self.torch
        K = [len(d) for d in drafts]
        cu_draft = np.cumsum(K, dtype=np.int32)
        cu_sampled = np.cumsum([k + 1 for k in K], dtype=np.int32)
        starts = cu_sampled - np.array(K, np.int32) - 1
        target = np.concatenate([s + np.arange(k, dtype=np.int32) for s, k in zip(starts, K)])
        bonus = (cu_sampled - 1).astype(np.int32)
        return self.SpecDecodeMetadata(
            draft_token_ids=torch.tensor(sum(drafts, []), dtype=torch.int32),
            num_draft_tokens=K,
            cu_num_draft_tokens=torch.from_numpy(cu_draft),
            cu_num_sampled_tokens=torch.from_numpy(cu_sampled),
            target_logits_indices=torch.from_numpy(target.astype(np.int32)),
            bonus_logits_indices=torch.from_numpy(bonus),
            logits_indices=torch.arange(int(cu_sampled[-1]), dtype=torch.int32),
        )

    def _sampling_metadata(self, reqs):
        torch = self.torch
        temps = [float(r.params.temperature) for r in reqs]
        gens = {}
        for i, r in enumerate(reqs):
            if not r.params.greedy:
                gens[i] = torch.Generator().manual_seed(int(r.seed))
        n, V = len(reqs), reqs[0].V
        top_k = [r.params.top_k or V for r in reqs]  # V: off
        top_p = [r.params.top_p or 1.0 for r in reqs]  # 1: off
        return self.SamplingMetadata(
            temperature=torch.tensor(temps, dtype=torch.float32),
            all_greedy=all(t == 0 for t in temps),
            all_random=all(t > 0 for t in temps),
            top_p=torch.tensor(top_p, dtype=torch.float32) if any(p < 1 for p in top_p) else None,
            top_k=torch.tensor(top_k, dtype=torch.int32) if any(k < V for k in top_k) else None,
            generators=gens,
            max_num_logprobs=None,
            no_penalties=True,
            prompt_token_ids=None,
            frequency_penalties=torch.zeros(n),
            presence_penalties=torch.zeros(n),
            repetition_penalties=torch.ones(n),
            output_token_ids=[[] for _ in reqs],
            allowed_token_ids_mask=None,
            bad_words_token_ids={},
            logitsprocs=self.LogitsProcessors(),
        )


def _draft_probs(req) -> np.ndarray:
    """[K, V] float32: q of each offset (contract.draft_dist), zeros for greedy requests."""
    from oracle.sampler.contract import draft_dist

    q = np.zeros((req.K, req.V), np.float32)
    for o in range(req.K if not req.params.greedy else 0):
        q[o] = draft_dist(req, o)
    return q


def make_sampler() -> VllmRejectionSampler:
    """The factory `--backend examples.vllm_rejection_sampler:make_sampler` calls."""
    _check_env()
    return VllmRejectionSampler()


def make_sampler_pytorch_topk() -> VllmRejectionSampler:
    """The same, with top-k and top-p through vLLM's PyTorch implementation (the docstring)."""
    _check_env()
    return VllmRejectionSampler(pytorch_topk=True)


def _check_env() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1" or os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        raise RuntimeError('vLLM\'s sampler runs on the CPU only with TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""')
