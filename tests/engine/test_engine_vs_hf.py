"""End to end through the LLM API against transformers' greedy `generate`, for every architecture:
8 prompts of different lengths submitted together (two share a long prefix), a small token budget
so prefill is chunked and mixed with decodes, prefix caching on; then a tiny KV pool that forces
preemption by recompute must give the same tokens."""
from __future__ import annotations

import random

import pytest

from moeserve import LLM, SamplingParams
from tiny_models import ALL_ARCHITECTURES, arch_params, hf_greedy, make_any_checkpoint, make_checkpoint

NEW_TOKENS = 32


def _prompts(vocab: int) -> list[list[int]]:
    rng = random.Random(0)
    prefix = [rng.randrange(3, vocab) for _ in range(37)]
    prompts = [prefix + [rng.randrange(3, vocab) for _ in range(5)], prefix + [rng.randrange(3, vocab) for _ in range(2)]]
    prompts += [[rng.randrange(3, vocab) for _ in range(n)] for n in (1, 4, 9, 17, 26, 40)]
    return prompts


@pytest.fixture(scope="module", params=arch_params(ALL_ARCHITECTURES))
def case(request, tmp_path_factory):
    hf, path = make_any_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    prompts = _prompts(hf.config.vocab_size)
    return path, prompts, hf_greedy(hf, prompts, NEW_TOKENS)


def _generate(path, prompts, cost=None, **kw) -> list[list[int]]:
    kw.setdefault("max_num_batched_tokens", 24)
    llm = LLM(model=str(path), block_size=4, **kw)
    if cost is not None:  # a known step cost, so bursts are split from the first step
        for group in llm.engine.scheduler.groups:
            group.step_cost = cost
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outs = llm.generate(prompts, params)
    assert all(o.finish_reason == "length" and [c.token_ids for c in o.outputs] == [o.token_ids] for o in outs)
    stats = llm.engine.stats()
    llm.shutdown()
    return [o.token_ids for o in outs], stats


def test_greedy_tokens_identical_to_transformers(case):
    path, prompts, expected = case
    got, stats = _generate(path, prompts)
    assert got == expected
    assert stats["prefix_cache_hit_tokens"] > 0  # the shared prefix was served from the cache


def test_preemption_by_recompute_changes_nothing(case):
    path, prompts, expected = case
    got, stats = _generate(path, prompts, kv_cache_blocks=24)
    assert got == expected
    assert stats["num_preemptions"] > 0


# architectures whose experts add nothing to what the others' runs of the thread and burst tests
# exercise (the same packed loop, the same scheduler): left to the greedy and preemption tests
SAME_AS_OTHERS = {"glm4_moe", "minimax_m2"}


def _skip_same_as_others(request, also: tuple[str, ...] = ()) -> None:
    arch = request.node.callspec.params["case"]
    if arch in SAME_AS_OTHERS or arch in also:
        pytest.skip(f"{arch}: exercised by the other architectures' runs of this test")


def test_experts_split_over_threads_change_nothing(case, request):
    # the tests run torch with 1 thread, so the default leaves the split off: force three chunks
    _skip_same_as_others(request)  # gpt-oss runs: its biases and clamped SwiGLU are in the split loop
    path, prompts, expected = case
    got, _ = _generate(path, prompts, expert_threads=3)
    assert got == expected


class _CostlyPrefill:
    """Prompt tokens 20x a step's overhead: the 8-prompt burst is spread over steps."""

    def estimate(self):
        from moeserve.core.step_cost import StepCost

        return StepCost(overhead_s=0.001, per_token_s=0.02)


def test_bursts_split_over_steps_change_nothing(case, request):
    _skip_same_as_others(request, also=("gpt_oss",))  # a scheduler feature: the model does not matter
    path, prompts, expected = case
    got, stats = _generate(path, prompts, cost=_CostlyPrefill(), split_prefill_bursts=True, max_num_batched_tokens=4096)
    assert got == expected


def test_max_model_len_is_capped_to_what_the_kv_cache_holds(tmp_path):
    # a request longer than the whole pool could never finish: refused up front, not failed midway
    from moeserve.errors import RequestError

    _, path = make_checkpoint("mixtral", tmp_path)
    llm = LLM(model=str(path), block_size=4, kv_cache_blocks=8)
    try:
        assert llm.engine.max_model_len == 32
        # max_tokens past the capped context runs to its end, as vLLM's LLM does (the server refuses it)
        out = llm.generate([list(range(3, 23))], SamplingParams(temperature=0, max_tokens=13, ignore_eos=True))
        assert len(out[0].token_ids) == 12 and out[0].finish_reason == "length"
        with pytest.raises(RequestError, match="no room for a completion") as e:  # no max_tokens would fit
            llm.generate([list(range(3, 35))], SamplingParams(temperature=0, max_tokens=None))
        assert e.value.param == "prompt"
        out = llm.generate([list(range(3, 23))], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))  # what is left
        assert len(out[0].token_ids) == 12 and out[0].finish_reason == "length"
    finally:
        llm.shutdown()
