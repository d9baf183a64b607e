"""n samples of a prompt cost about one prefill (core/siblings.py): sample 0 computes the prompt, the
others take its blocks from the prefix cache one step later; their tokens are those they had when
every sample computed the prompt (greedy: n=1's; seeded: the same seeds' samples)."""
from __future__ import annotations

import dataclasses

from moeserve import SamplingParams
from moeserve.sampling_params import engine_seed

TEXT = ("In the story of the {}, the old lighthouse keeper climbed the stairs every evening, counting the "
        "steps aloud, and watched the ships pass the rocks where his father had once rescued a crew.")


def _prompt(llm, tag: str) -> list[int]:
    """A prompt no earlier test cached (the session's LLM is shared)."""
    return llm.tokenizer.encode(TEXT.format(tag))


def _generate(llm, ids: list[int], params: SamplingParams):
    before = llm.engine.stats()["prompt_tokens_computed"]
    out = llm.generate({"prompt_token_ids": ids}, params, use_tqdm=False)[0]
    return out, llm.engine.stats()["prompt_tokens_computed"] - before


def _no_prefix_cache(llm, monkeypatch) -> None:
    for group in llm.engine.scheduler.groups:
        monkeypatch.setattr(group.blocks, "enable_prefix_caching", False)


def test_greedy_samples_share_the_prefill_and_match_n_1(llm):
    ids = _prompt(llm, "fishermen")
    block = llm.engine.scheduler.block_size
    full = (len(ids) - 1) // block * block
    assert full >= 2 * block  # the prompt spans several blocks
    out, computed = _generate(llm, ids, SamplingParams(n=3, temperature=0.0, max_tokens=6, ignore_eos=True))
    assert [s.num_cached_prompt_tokens for s in out.sequences] == [0, full, full]
    assert out.num_cached_tokens == full
    assert computed == len(ids) + 2 * (len(ids) - full)  # one prefill, not three
    one, _ = _generate(llm, ids, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    assert [c.token_ids for c in out.outputs] == [one.token_ids] * 3


def test_seeded_samples_are_those_of_separate_prefills(llm, monkeypatch):
    """The same seeds give the same samples whether they share the prefill or each compute the prompt
    (as all did before sharing, and still do without prefix caching)."""
    params = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=6, ignore_eos=True)
    shared, computed = _generate(llm, _prompt(llm, "sailors"), params)
    assert [s.num_cached_prompt_tokens > 0 for s in shared.sequences] == [False, True, True]
    ids = _prompt(llm, "sailors")
    alone = [_generate(llm, ids, dataclasses.replace(params, n=1, seed=engine_seed(5, i)))[0].token_ids for i in range(3)]
    with monkeypatch.context() as m:
        _no_prefix_cache(llm, m)
        separate, computed_separately = _generate(llm, ids, params)
    assert [s.num_cached_prompt_tokens for s in separate.sequences] == [0, 0, 0]
    assert computed_separately == 3 * len(ids) > computed
    samples = [c.token_ids for c in shared.outputs]
    assert len(set(map(tuple, samples))) == 3
    assert samples == [c.token_ids for c in separate.outputs] == alone
