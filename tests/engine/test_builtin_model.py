"""The shipped built-in model: a small Mixtral checkpoint in the package (no training or cache at start-up),
its config is what the layout check assumes, its tokenizer is the trained BPE with the ChatML tokens, and
moeserve serves its float16 weights as transformers computes them in float32."""
from __future__ import annotations

import json

import pytest
import torch

from moeserve.engine import builtin_model as bm

TEXT = "It was a bright cold day in April, and the clocks were striking thirteen."


def test_the_checkpoint_ships_in_the_package_and_is_small():
    path = bm.builtin_model_dir()
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    assert sum(p.stat().st_size for p in path.iterdir()) <= 25 * 2**20


def test_config_is_what_the_layout_check_assumes():
    on_disk = json.loads((bm.builtin_model_dir() / "config.json").read_text())
    for key, value in bm.builtin_config_fields().items():
        assert on_disk[key] == value, key
    assert on_disk["num_local_experts"] == 16 and on_disk["num_key_value_heads"] % 4 == 0


def test_tokenizer_is_the_trained_bpe_with_chatml_tokens():
    tok = bm.build_tokenizer()
    assert len(tok) == bm.VOCAB_SIZE
    assert [tok.convert_tokens_to_ids(t) for t in bm.SPECIAL_TOKENS] == [0, 1, 2]
    assert tok.eos_token == "<|endoftext|>" and tok.chat_template == bm.CHAT_TEMPLATE
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT
    assert len(TEXT.encode()) / len(ids) >= 3.0  # English compresses: a BPE trained on English prose
    odd = "naïve café 東京 \x7f"
    assert tok.decode(tok.encode(odd)) == odd  # byte-level: any text round-trips
    chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_generation_ends_at_either_end_token():
    from transformers import GenerationConfig

    gen = GenerationConfig.from_pretrained(bm.builtin_model_dir())
    assert gen.eos_token_id == [0, 2] and gen.pad_token_id == 0


def _hf_greedy(model, ids: list[int], n: int) -> list[int]:
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(torch.tensor([ids + out])).logits[0, -1].argmax())
            out.append(nxt)
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_moeserve_serves_the_float16_weights_as_transformers_computes_them():
    from transformers import MixtralForCausalLM

    from moeserve import LLM, SamplingParams

    tok = bm.build_tokenizer()
    prompts = [tok.encode("The capital of France is"), tok.encode(TEXT)]
    hf = MixtralForCausalLM.from_pretrained(bm.builtin_model_dir(), dtype=torch.float32).eval()
    expected = [_hf_greedy(hf, p, 12) for p in prompts]
    llm = LLM(max_model_len=128, kv_cache_blocks=32)
    try:
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    finally:
        llm.shutdown()
    assert [o.token_ids for o in outs] == expected
