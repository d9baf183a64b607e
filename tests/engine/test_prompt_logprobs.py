"""SamplingParams(prompt_logprobs=N): every prompt token after the first scored against transformers'
log_softmax(model(input_ids).logits), with chunked prefill, with prompts that share a cached prefix,
after preemption, and through a multi-rank layout."""
from __future__ import annotations

import random

import pytest
import torch

from moeserve import LLM, SamplingParams
from tiny_models import make_checkpoint

TOP_N = 3


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    hf, path = make_checkpoint("mixtral", tmp_path_factory.mktemp("mixtral_prompt_lp"))
    rng = random.Random(5)
    vocab = hf.config.vocab_size
    prefix = [rng.randrange(3, vocab) for _ in range(29)]
    # two prompts share a 29-token prefix (the second would hit the prefix cache), one is a single
    # token (no prompt logprob at all), one is longer than a chunk several times over
    prompts = [prefix + [rng.randrange(3, vocab) for _ in range(6)], prefix + [rng.randrange(3, vocab) for _ in range(3)],
               [rng.randrange(3, vocab)], [rng.randrange(3, vocab) for _ in range(53)]]
    with torch.no_grad():
        oracle = [torch.log_softmax(hf(torch.tensor([p])).logits[0].float(), dim=-1) for p in prompts]
    return path, prompts, oracle


def _rank_bounds(row, value, tol=1e-4):
    """The ranks a logprob `value` may have in `row` (vLLM's count of entries at least as likely),
    allowing fp32 noise between two computations of the same row."""
    return int((row > value + tol).sum()) + 1, int((row >= value - tol).sum())


def _check(outputs, prompts, oracle):
    for out, prompt, ref in zip(outputs, prompts, oracle):
        assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(prompt)
        assert out.prompt_logprobs[0] is None  # vLLM's dicts of the engine's entries (test_llm_vllm_api.py)
        ranked = out.sequences[0].prompt_logprobs  # the engine's entries: (logprob, top, rank)
        assert len(ranked) == len(prompt) and ranked[0] is None
        for pos in range(1, len(prompt)):
            lp, top, _ = ranked[pos]
            assert out.prompt_logprobs[pos][prompt[pos]].logprob == pytest.approx(lp, abs=1e-6)
            want = ref[pos - 1]  # the logits at position pos-1 score token pos
            assert abs(lp - float(want[prompt[pos]])) <= 1e-4, (out.request_id, pos)
            low, high = _rank_bounds(want, float(want[prompt[pos]]))
            assert low <= ranked[pos][2] <= high, (out.request_id, pos)
            assert len(top) == TOP_N
            ids = want.topk(TOP_N).indices.tolist()
            assert sorted(t for t, _ in top) == sorted(ids)
            for t, v in top:
                assert abs(v - float(want[t])) <= 1e-4


def _params(**kw):
    return SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True, prompt_logprobs=TOP_N, **kw)


def test_prompt_logprobs_match_transformers_with_chunks_and_prefix_cache(mixtral):
    path, prompts, oracle = mixtral
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=12)
    try:
        # the first prompt alone, so its blocks are cached before the second one arrives
        first = llm.generate([prompts[0]], _params())
        rest = llm.generate(prompts[1:], _params(logprobs=1))
        plain = llm.generate([prompts[1]], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))[0]
        stats = llm.engine.stats()
    finally:
        llm.shutdown()
    _check(first + rest, prompts, oracle)
    assert rest[0].num_cached_prompt_tokens == 0  # it asked for prompt logprobs: computed in full
    assert plain.num_cached_prompt_tokens > 0 and plain.prompt_logprobs is None  # others still hit the cache
    assert stats["prefix_cache_hit_tokens"] > 0
    assert rest[0].token_ids == plain.token_ids  # generation is unchanged by asking
    assert all(len(o.logprobs) == 3 for o in rest)


def test_prompt_logprobs_survive_preemption(mixtral):
    path, prompts, oracle = mixtral
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=12, kv_cache_blocks=20)
    try:
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, prompt_logprobs=TOP_N))
        assert llm.engine.stats()["num_preemptions"] > 0
    finally:
        llm.shutdown()
    _check(outs, prompts, oracle)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_prompt_logprobs_through_two_ranks(mixtral):
    path, prompts, oracle = mixtral
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=12, ep=2, tp=1)
    try:
        outs = llm.generate(prompts, _params())
    finally:
        llm.shutdown()
    _check(outs, prompts, oracle)


def test_prompt_logprobs_is_validated():
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=-2)  # the upper bound is the engine's --max-logprobs (tests/server)
