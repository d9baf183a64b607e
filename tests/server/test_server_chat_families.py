"""The chat endpoint renders each family's own chat template, as its checkpoint ships it (family_tokenizers:
gpt-oss's harmony format in chat_template.jinja, GLM-4.5's in tokenizer_config.json, MiniMax-M2's as named
templates), in-process (ASGI) against a fake engine: the prompt /v1/chat/completions serves is the
template's rendering (as /tokenize reports it and as transformers renders it), OpenAI's reasoning_effort
reaches harmony's variable, and a template's raise_exception is a 400 with its message."""
from __future__ import annotations

import asyncio

import pytest
from family_tokenizers import FAMILIES, save_tokenizer
from server_fakes import FakeEngine, make_app

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me more."}]


async def _posts(tokenizer, *requests: tuple[str, dict]):
    http, client, _ = await make_app(FakeEngine(max_waiting=100), tokenizer=tokenizer)
    try:
        return [await http.post(path, json=body) for path, body in requests]
    finally:
        await client.shutdown(1.0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_chat_prompt_is_the_familys_template(family, tmp_path):
    tokenizer = save_tokenizer(family, tmp_path)
    want = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert want == tokenizer.apply_chat_template(  # the family's own text, not the server default
        MESSAGES, chat_template=FAMILIES[family].template, add_generation_prompt=True, tokenize=False)
    ids = tokenizer.encode(want, add_special_tokens=False)
    chat, counted = asyncio.run(_posts(
        tokenizer, ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2, "return_token_ids": True}),
        ("/tokenize", {"messages": MESSAGES})))
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens"] == len(ids)
    assert chat.json()["prompt_token_ids"] == ids
    assert counted.json()["tokens"] == ids


def test_harmony_variables_and_exceptions(tmp_path):
    tokenizer = save_tokenizer("gpt_oss", tmp_path)
    user = [{"role": "user", "content": "Hi"}]
    effort, kwargs, default, refused = asyncio.run(_posts(
        tokenizer, ("/tokenize", {"messages": user, "reasoning_effort": "low"}),
        ("/tokenize", {"messages": user, "chat_template_kwargs": {"reasoning_effort": "high"}}),
        ("/tokenize", {"messages": user}),
        ("/v1/chat/completions", {"messages": [*user, {"role": "assistant", "content": "<|channel|>analysis"}]})))
    text = [tokenizer.decode(r.json()["tokens"], skip_special_tokens=False) for r in (effort, kwargs, default)]
    assert text[0].startswith("<|start|>system<|message|>Current date: ") and "Reasoning: low<|end|>" in text[0]
    assert "Reasoning: high<|end|>" in text[1] and "Reasoning: medium<|end|>" in text[2]
    assert text[0].endswith("<|start|>user<|message|>Hi<|end|><|start|>assistant")
    assert refused.status_code == 400 and "pass analysis in the thinking field" in refused.json()["error"]["message"]
    bad = asyncio.run(_posts(tokenizer, ("/v1/chat/completions", {"messages": user, "reasoning_effort": "extreme"})))[0]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "reasoning_effort"


def test_glm_thinking_switch_and_minimax_named_templates(tmp_path):
    glm = save_tokenizer("glm4_moe", tmp_path / "glm")
    user = [{"role": "user", "content": "Hi"}]
    on, off = asyncio.run(_posts(glm, ("/tokenize", {"messages": user}),
                                 ("/tokenize", {"messages": user, "chat_template_kwargs": {"enable_thinking": False}})))
    assert glm.decode(on.json()["tokens"], skip_special_tokens=False) == "[gMASK]<sop><|user|>\nHi<|assistant|>"
    assert glm.decode(off.json()["tokens"], skip_special_tokens=False).endswith("<|assistant|>\n<think></think>")
    minimax = save_tokenizer("minimax_m2", tmp_path / "minimax")
    assert isinstance(minimax.chat_template, dict)  # named templates: the server lets transformers pick "default"
    r = asyncio.run(_posts(minimax, ("/tokenize", {"messages": user})))[0]
    assert minimax.decode(r.json()["tokens"], skip_special_tokens=False) == "]~!b[]~b]user\nHi[e~[\n]~b]ai\n<think>\n"
