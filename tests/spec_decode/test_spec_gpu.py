"""Speculative decoding on a GPU (mark gpu: run by benchmarks/gpu_check.py where a card is lent):
verify steps and the MTP drafter with weights, KV cache and logits on the device, Triton kernels, in
fp32 so the oracle's tokens are comparable."""
from __future__ import annotations

import random

import pytest
import torch

from moeserve import LLM, SamplingParams

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kernels", ["torch", "triton"])
def test_mtp_greedy_equals_transformers_on_the_gpu(kernels, tmp_path):
    from mtp_checkpoints import make_mtp_checkpoint

    hf, _ = make_mtp_checkpoint(tmp_path)
    rng = random.Random(7)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (4, 13, 29)]
    hf.generation_config.eos_token_id = None
    want = [hf.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, pad_token_id=0)[0, len(p):].tolist()
            for p in prompts]
    llm = LLM(model=str(tmp_path), device="cuda", kernels=kernels, dtype="float32", block_size=4,
              max_num_batched_tokens=24, speculative_config={"method": "mtp", "num_speculative_tokens": 2})
    try:
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
        stats = llm.engine.stats()
    finally:
        llm.shutdown()
    assert [o.token_ids for o in outs] == want
    assert stats["spec_decode_num_draft_tokens"] > 0


def test_ngram_on_the_gpu_keeps_greedy_text_and_samples(tmp_path):
    prompts = ["said he, and she said, and he said, and she said,", "one, two, three, one, two, three, one,"]
    greedy = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    runs = {}
    for spec in (None, {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2}):
        llm = LLM(device="cuda", dtype="float32", speculative_config=spec)
        try:
            runs[spec is None] = [o.token_ids for o in llm.generate(prompts, greedy)]
            sampled = llm.generate(prompts, SamplingParams(temperature=0.8, max_tokens=16, seed=3, ignore_eos=True))
            assert all(len(o.token_ids) == 16 for o in sampled)
            if spec:
                assert llm.engine.stats()["spec_decode_num_accepted_tokens"] > 0
        finally:
            llm.shutdown()
    assert runs[True] == runs[False]
