"""vLLM's extra sampling controls against transformers' own logits processors, end to end through the
LLM API on a tiny Mixtral: greedy with repetition_penalty equals `generate(repetition_penalty=)`;
min_tokens with the end-of-sequence forced by a logit bias equals `generate(min_new_tokens=,
sequence_bias=)`."""
from __future__ import annotations

import pytest
import torch

from moeserve import LLM, SamplingParams
from tiny_models import make_checkpoint

NEW = 12
PROMPTS = [[5, 9, 9, 31, 7], [40, 41, 42, 43, 44, 45, 46, 47], [3]]
EOS = 2


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    hf, path = make_checkpoint("mixtral", tmp_path_factory.mktemp("mixtral"))
    hf.generation_config.eos_token_id = EOS
    hf.config.eos_token_id = EOS
    (path / "generation_config.json").write_text(f'{{"eos_token_id": {EOS}}}')
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=16)
    yield hf, llm
    llm.shutdown()


def _hf(hf, prompt: list[int], **kw) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                          pad_token_id=0, **kw)
    return out[0, len(prompt):].tolist()


def test_repetition_penalty_matches_transformers(model):
    hf, llm = model
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=NEW, ignore_eos=True, repetition_penalty=1.8))
    plain = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=NEW, ignore_eos=True))
    hf.generation_config.eos_token_id = None
    try:
        expected = [_hf(hf, p, repetition_penalty=1.8) for p in PROMPTS]
    finally:
        hf.generation_config.eos_token_id = EOS
    assert [o.token_ids for o in outs] == expected
    assert [o.token_ids for o in outs] != [o.token_ids for o in plain]  # the penalty changed something


def test_min_tokens_holds_back_a_forced_eos_as_transformers_does(model):
    hf, llm = model
    params = SamplingParams(temperature=0.0, max_tokens=NEW, min_tokens=5, logit_bias={EOS: 100.0})
    outs = llm.generate(PROMPTS, params)
    expected = [_hf(hf, p, min_new_tokens=5, sequence_bias={(EOS,): 100.0}) for p in PROMPTS]
    assert [o.token_ids for o in outs] == expected
    assert all(len(o.token_ids) == 6 and o.token_ids[-1] == EOS and o.finish_reason == "stop" for o in outs)
    unforced = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=NEW, logit_bias={EOS: 100.0}))
    assert all(o.token_ids == [EOS] for o in unforced)  # without min_tokens the bias ends it at once
