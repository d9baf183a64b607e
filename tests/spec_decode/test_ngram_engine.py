"""N-gram speculative decoding through the engine on the built-in model: greedy text identical to
decoding without drafts (with chunked prefill, prefix caching, preemption, stop strings and ids,
max_tokens, logprobs and penalties in the same batches), and drafts accepted on repetitive prompts."""
from __future__ import annotations

import pytest

from moeserve import LLM, SamplingParams

pytestmark = pytest.mark.slow  # engines on the built-in model, ~10-20 s each: left out of the quick run

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
PROMPTS = [
    "I am sure I am sure I am sure that I am sure",
    "The capital of France is",
    "said he, and she said, and he said, and she said,",
    "It was a truth universally acknowledged, that a single man in possession of a good fortune",
    "Emma Woodhouse, handsome, clever, and rich,",
    "Mr. Darcy",
]


def _run(spec: dict | None, params: list[SamplingParams], prompts=PROMPTS, **kw):
    kw.setdefault("max_num_batched_tokens", 32)  # prompts are chunked and mixed with verifies
    llm = LLM(speculative_config=spec, block_size=4, **kw)
    try:
        outs = llm.generate(prompts, params)
        return outs, llm.engine.stats()
    finally:
        llm.shutdown()


def _same(a, b) -> None:
    for x, y in zip(a, b):
        assert (x.token_ids, x.text, x.finish_reason, x.stop_reason) == (y.token_ids, y.text, y.finish_reason, y.stop_reason)


@pytest.fixture(scope="module")
def greedy():
    params = [SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)] * len(PROMPTS)
    return params, _run(None, params)


def test_greedy_text_identical_and_drafts_accepted(greedy):
    params, (plain, _) = greedy
    outs, stats = _run(NGRAM, params)
    _same(outs, plain)
    assert stats["spec_decode_num_drafts"] > 0 and stats["spec_decode_num_accepted_tokens"] > 0
    assert stats["spec_decode_mean_acceptance_length"] > 1.5  # greedy output of a small model loops
    assert len(stats["spec_decode_num_accepted_tokens_per_pos"]) == 3
    assert stats["spec_decode_num_accepted_tokens"] == sum(stats["spec_decode_num_accepted_tokens_per_pos"])


def test_preemption_and_prefix_caching_change_nothing(greedy):
    params, (plain, _) = greedy
    prompts = PROMPTS + [PROMPTS[3] + " must be in want"]  # shares a cached prefix with prompt 3
    outs, stats = _run(NGRAM, params + [params[0]], prompts, kv_cache_blocks=40)
    _same(outs[: len(PROMPTS)], plain)
    assert stats["num_preemptions"] > 0 and stats["prefix_cache_hit_tokens"] > 0
    alone, _ = _run(None, [params[0]], prompts[-1:])
    _same(outs[-1:], alone)


def test_stops_max_tokens_logprobs_and_penalties_with_drafts_in_flight():
    """Stops inside an accepted run of drafts end the request there, as without drafts."""
    params = [
        SamplingParams(temperature=0.0, max_tokens=40, stop=["much in the world"], ignore_eos=True),
        SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True),  # max_tokens inside a verify
        SamplingParams(temperature=0.0, max_tokens=30, stop=["the first, and the first"], include_stop_str_in_output=True,
                       ignore_eos=True),
        SamplingParams(temperature=0.0, max_tokens=30, logprobs=3, ignore_eos=True),
        SamplingParams(temperature=0.0, max_tokens=30, presence_penalty=0.5, frequency_penalty=0.3, ignore_eos=True),
        SamplingParams(temperature=0.0, max_tokens=30, min_tokens=10, repetition_penalty=1.2),
    ]
    plain, _ = _run(None, params)
    outs, stats = _run(NGRAM, params)
    _same(outs, plain)
    assert stats["spec_decode_num_accepted_tokens"] > 0
    assert plain[0].finish_reason == "stop" and plain[2].stop_reason == "the first, and the first" and len(outs[1].token_ids) == 7
    for got, want in zip(outs[3].logprobs, plain[3].logprobs):
        assert abs(got[0] - want[0]) < 1e-4
        assert [t for t, _ in got[1]] == [t for t, _ in want[1]]
    # the stop token id path: the prompt's own loop token stops it at once
    stop_id = outs[0].token_ids[1]
    sp = [SamplingParams(temperature=0.0, max_tokens=30, stop_token_ids=[stop_id], ignore_eos=True)]
    _same(_run(NGRAM, sp, PROMPTS[:1])[0], _run(None, sp, PROMPTS[:1])[0])


def test_seeded_sampling_is_reproducible_with_drafts():
    params = [SamplingParams(temperature=0.8, top_p=0.9, max_tokens=30, seed=11 + i, ignore_eos=True)
              for i in range(len(PROMPTS))]
    first, stats = _run(NGRAM, params)
    again, _ = _run(NGRAM, params)
    _same(first, again)
    assert stats["spec_decode_num_drafts"] > 0
