"""MTP speculative decoding end to end on tiny DeepSeek-V3 checkpoints with an MTP layer (random
weights, written by mtp_checkpoints.py): greedy tokens equal transformers' greedy generate (which
ignores the MTP layer) for 1, 2 and 3 draft tokens, on one rank and at --ep 2 (every rank runs the
MTP layer's MoE in lockstep), with chunked prefill, a shared cached prefix and preemption."""
from __future__ import annotations

import random

import pytest
from mtp_checkpoints import make_mtp_checkpoint
from tiny_models import hf_greedy

from moeserve import LLM, SamplingParams

pytestmark = pytest.mark.slow  # DeepSeek engines, some on two ranks: left out of the quick run

NEW_TOKENS = 24


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    path = tmp_path_factory.mktemp("v3-mtp")
    hf, _ = make_mtp_checkpoint(path)
    rng = random.Random(5)
    prefix = [rng.randrange(3, 96) for _ in range(29)]
    prompts = [prefix + [rng.randrange(3, 96) for _ in range(3)], prefix + [7, 8],
               [rng.randrange(3, 96) for _ in range(4)] * 3, [rng.randrange(3, 96) for _ in range(22)], [42]]
    return path, prompts, hf_greedy(hf, prompts, NEW_TOKENS)


def _generate(path, prompts, k: int, **kw):
    kw.setdefault("max_num_batched_tokens", 24)
    llm = LLM(model=str(path), block_size=4, speculative_config={"method": "mtp", "num_speculative_tokens": k}, **kw)
    try:
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True))
        return [o.token_ids for o in outs], llm.engine.stats()
    finally:
        llm.shutdown()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_greedy_tokens_equal_transformers(case, k):
    path, prompts, expected = case
    got, stats = _generate(path, prompts, k)
    assert got == expected
    assert stats["spec_decode_num_drafts"] > 0 and stats["spec_decode_num_draft_tokens"] > 0
    assert stats["prefix_cache_hit_tokens"] > 0


def test_preemption_changes_nothing(case):
    path, prompts, expected = case
    got, stats = _generate(path, prompts, 2, kv_cache_blocks=20)
    assert got == expected
    assert stats["num_preemptions"] > 0 and stats["spec_decode_num_draft_tokens"] > 0


def test_glm45_mtp_layer(tmp_path):
    hf, _ = make_mtp_checkpoint(tmp_path, "glm4_moe")
    rng = random.Random(6)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (3, 11, 26)]
    got, stats = _generate(tmp_path, prompts, 2)
    assert got == hf_greedy(hf, prompts, NEW_TOKENS)
    assert stats["spec_decode_num_draft_tokens"] > 0


@pytest.mark.timeout(600)
def test_expert_parallel_ranks_draft_in_lockstep(case):
    path, prompts, expected = case
    got, stats = _generate(path, prompts, 2, ep=2)
    assert got == expected
    assert stats["spec_decode_num_draft_tokens"] > 0


def test_triton_set_verifies_through_the_mla_decode_kernel(case, monkeypatch):
    """Under the Triton interpreter: verify steps' MLA runs the decode kernel with several query tokens
    a sequence ([b, k + 1, h, R]), and greedy tokens still equal transformers'."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    path, prompts, expected = case
    llm = LLM(model=str(path), block_size=4, kernels="triton", max_num_batched_tokens=24,
              speculative_config={"method": "mtp", "num_speculative_tokens": 2})
    kernels = llm.engine.executor.worker.runner.kernels
    queries, decode = [], kernels.mla_decode
    monkeypatch.setattr(kernels, "mla_decode", lambda q, *a: queries.append(q.dim() == 4 and q.shape[1]) or decode(q, *a))
    try:
        outs = llm.generate(prompts[:3], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    finally:
        llm.shutdown()
    assert [o.token_ids for o in outs] == [e[:8] for e in expected[:3]]
    assert 3 in queries  # a verify of two drafts: three queries a sequence through the kernel
