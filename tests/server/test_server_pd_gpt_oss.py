"""gpt-oss served as released (MXFP4 experts, the harmony chat template in chat_template.jinja, <|return|>
among the end tokens) by real `moeserve serve` processes: a chat completion renders the harmony prompt,
and the prefill/decode split moves the blocks of a model with attention sinks and sliding-window layers
(prompts shorter and longer than the window) with the tokens of a colocated server."""
from __future__ import annotations

import pytest
from family_tokenizers import HARMONY, save_tokenizer
from server_harness import ROUTER_PREFILL, decoded, metric, pd_pair, post
from tiny_models import make_hf_model, save_checkpoint

if not any(__import__("importlib.util").util.find_spec(m) for m in ("nixl_cu12", "nixl")):
    pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')", allow_module_level=True)

pytestmark = pytest.mark.slow

ARGS = ("--kv-cache-blocks", "64", "--block-size", "8", "--max-num-seqs", "4")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt-oss")
    save_checkpoint(make_hf_model("gpt_oss", vocab_size=128), path, layout="mxfp4")
    save_tokenizer("gpt_oss", path)
    return path


@pytest.fixture(scope="module")
def pd(model_dir):
    with pd_pair("--model", str(model_dir), *ARGS) as pair:
        yield pair


def test_chat_renders_the_harmony_prompt(pd, model_dir):
    from transformers import AutoTokenizer

    prefill, _ = pd
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.chat_template == HARMONY
    messages = [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hello"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, reasoning_effort="low")
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    body = {"model": prefill.model, "messages": messages, "reasoning_effort": "low", "max_tokens": 5,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    chat = post(prefill.url, "/v1/chat/completions", body).json()
    assert chat["usage"]["prompt_tokens"] == len(ids)
    completion = post(prefill.url, "/v1/completions", {"model": prefill.model, "prompt": ids, "max_tokens": 5,
                                                       "temperature": 0, "ignore_eos": True,
                                                       "return_token_ids": True}).json()
    assert chat["choices"][0]["token_ids"] == completion["choices"][0]["token_ids"]


@pytest.mark.parametrize("length", [3, 8, 45])  # inside the window of 5, past it, several blocks of 8
def test_blocks_move_and_tokens_equal_colocated(pd, length):
    prefill, decode = pd
    prompt = [(i * 37 + length) % 120 + 3 for i in range(length)]
    body = {"model": prefill.model, "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    colocated = post(prefill.url, "/v1/completions", body).json()["choices"][0]["token_ids"]
    first = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, min_tokens=1, kv_transfer_params=ROUTER_PREFILL))
    params = first.json()["kv_transfer_params"]
    assert len(params["remote_block_ids"]) == -(-length // 8)
    out = decoded(decode.url, "/v1/completions", dict(body, kv_transfer_params=params))
    assert out["choices"][0]["token_ids"] == colocated
    assert metric(decode.url, "moeserve_kv_blocks_pinned_remote") == 0
