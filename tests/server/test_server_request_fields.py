"""Request fields whose meaning comes from OpenAI's spec or vLLM: nullable fields, the chat template
switches, text parts, and logprobs JSON can carry."""
from __future__ import annotations

import json
import math

import httpx
import pytest
from conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}
C, CHAT = "/v1/completions", "/v1/chat/completions"


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=120)


def test_null_means_the_default_for_nullable_openai_fields(server):
    """OpenAI types n, stream, echo and (chat) logprobs as 'X or null'; some SDKs send every unset field."""
    base = {"prompt": "Hello", "max_tokens": 4, "temperature": 0}
    plain = post(server, C, base)
    nulls = post(server, C, dict(base, n=None, stream=None, echo=None, logprobs=None))
    assert nulls.status_code == 200, nulls.text
    assert nulls.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]
    assert len(nulls.json()["choices"]) == 1 and nulls.json()["choices"][0]["logprobs"] is None
    chat = post(server, CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "n": None,
                               "logprobs": None, "stream": None})
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["logprobs"] is None


def _prompt_ids(server, body: dict) -> list[int]:
    r = post(server, CHAT, dict(body, max_tokens=1, return_token_ids=True))
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["prompt_token_ids"]


def test_chat_template_switches_follow_vllm(server, llm):
    tok = llm.tokenizer
    msgs = [{"role": "user", "content": "Tell me"}, {"role": "assistant", "content": "Once upon"}]

    def rendered(**kw) -> list[int]:
        from moeserve.engine.builtin_model import CHAT_TEMPLATE

        text = tok.apply_chat_template(msgs, chat_template=tok.chat_template or CHAT_TEMPLATE, tokenize=False, **kw)
        return tok.encode(text, add_special_tokens=False)

    opened = _prompt_ids(server, {"messages": msgs})
    closed = _prompt_ids(server, {"messages": msgs, "add_generation_prompt": False})
    continued = _prompt_ids(server, {"messages": msgs, "add_generation_prompt": False, "continue_final_message": True})
    assert opened == rendered(add_generation_prompt=True)
    assert closed == rendered(add_generation_prompt=False)
    assert continued == rendered(add_generation_prompt=False, continue_final_message=True)
    assert continued != closed and tok.decode(continued).rstrip().endswith("Once upon")
    tokenized = post(server, "/tokenize", {"messages": msgs, "add_generation_prompt": False, "continue_final_message": True})
    assert tokenized.json()["tokens"] == continued


def test_text_parts_join_with_newlines(server):
    """vLLM joins a message's text parts with newlines: the same prompt as the joined string."""
    parts = [{"type": "text", "text": "first line"}, {"type": "text", "text": "second line"}]
    as_parts = _prompt_ids(server, {"messages": [{"role": "user", "content": parts}]})
    as_text = _prompt_ids(server, {"messages": [{"role": "user", "content": "first line\nsecond line"}]})
    assert as_parts == as_text


@pytest.mark.parametrize("stream", [False, True])
def test_logprobs_stay_valid_json_when_every_token_is_a_stop_id(server, llm, stream):
    """min_tokens with stop ids covering the vocabulary: nothing is masked into an all -inf row, and
    every logprob in the response is a finite JSON number (NaN and -inf are not JSON)."""
    vocab = len(llm.tokenizer)
    body = {"prompt": "The cat", "max_tokens": 3, "temperature": 0, "min_tokens": 2, "ignore_eos": True,
            "stop_token_ids": list(range(vocab)), "logprobs": 1, "stream": stream}
    r = post(server, C, body)
    assert r.status_code == 200, r.text
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        values = [v for e in events for c in e["choices"] for v in c["logprobs"]["token_logprobs"]]
    else:
        values = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    assert values and all(math.isfinite(v) for v in values)


def _stream_deltas(server, body: dict) -> list[dict]:
    r = post(server, CHAT, dict(body, stream=True))
    assert r.status_code == 200, r.text
    return [json.loads(line[6:])["choices"][0]["delta"] for line in r.text.splitlines()
            if line.startswith("data: {") and json.loads(line[6:])["choices"]]


def test_chat_echo_prefixes_the_continued_assistant_message(server):
    """vLLM's chat `echo`: the content starts with the last message's when that message is the
    assistant's (the turn being continued); streamed, the echo is the first content delta."""
    msgs = [{"role": "user", "content": "Tell me a story"}, {"role": "assistant", "content": "Once upon"}]
    body = {"messages": msgs, "add_generation_prompt": False, "continue_final_message": True, "max_tokens": 6,
            "temperature": 0, "ignore_eos": True}
    plain = post(server, CHAT, body).json()["choices"][0]["message"]["content"]
    echoed = post(server, CHAT, dict(body, echo=True))
    assert echoed.status_code == 200, echoed.text
    assert echoed.json()["choices"][0]["message"]["content"] == "Once upon" + plain
    assert echoed.json()["usage"]["completion_tokens"] == 6  # the echo is not generated
    deltas = _stream_deltas(server, dict(body, echo=True))
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "Once upon"}
    assert "".join(d.get("content", "") for d in deltas) == "Once upon" + plain
    # the last message is the user's: nothing to echo
    user_last = dict(body, messages=msgs[:1], add_generation_prompt=True, continue_final_message=False)
    no_echo = post(server, CHAT, user_last).json()["choices"][0]["message"]["content"]
    assert post(server, CHAT, dict(user_last, echo=True)).json()["choices"][0]["message"]["content"] == no_echo
    assert "".join(d.get("content", "") for d in _stream_deltas(server, dict(user_last, echo=True))) == no_echo
