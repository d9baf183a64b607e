"""Client mistakes an adversarial review of the HTTP API found served, or served wrongly: each is now a
4xx in the OpenAI error shape, and the right form of the same request still works. In-process (ASGI)
against a fake engine."""
from __future__ import annotations

import asyncio
import json

import pytest
from server_fakes import FakeEngine, FakeTokenizer, make_app

from moeserve.sampling_params import MAX_LOGIT_BIAS_ENTRIES, SamplingParamsError, StructuredOutputsParams
from moeserve.server.config_file import ServerConfig

CHAT = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def _send(requests: list[tuple[str, str, dict]], tokenizer=None, config: ServerConfig | None = None) -> list:
    """(path, body as JSON text or bytes, headers) -> responses, one app for them all."""

    async def main():
        http, client, _ = await make_app(FakeEngine(max_waiting=100), tokenizer=tokenizer, config=config)
        try:
            return [await http.post(path, content=body if isinstance(body, bytes) else json.dumps(body), headers=headers)
                    for path, body, headers in requests]
        finally:
            await http.aclose()
            await client.shutdown(1.0)

    return asyncio.run(main())


def _refused(r, status: int, param: str | None) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param, err
    return err["message"]


JSON = {"Content-Type": "application/json"}


def test_a_choice_constraint_must_be_a_list_of_strings():
    """`choice: "ab"` was read as list("ab"): the output was constrained to "a" or "b", silently."""
    with pytest.raises(SamplingParamsError, match="choice must be a non-empty list"):
        StructuredOutputsParams(choice="ab")
    body = {"prompt": [1, 2], "max_tokens": 2}
    text, listed = _send([("/v1/completions", {**body, "structured_outputs": {"choice": "ab"}}, JSON),
                          ("/v1/completions", {**body, "structured_outputs": {"choice": ["ab", "cd"]}}, JSON)])
    assert "choice must be a non-empty list" in _refused(text, 400, "structured_outputs")
    assert listed.status_code == 200, listed.text


def test_logit_bias_entries_are_bounded():
    """A whole vocabulary of logit_bias (130k entries, 1.7 MB) was taken: Python work per entry per
    choice in the front end, per sub-request in the engine and per row in every decode step."""
    most = {str(i): -1.0 for i in range(MAX_LOGIT_BIAS_ENTRIES)}
    too_many = {**most, str(MAX_LOGIT_BIAS_ENTRIES): -1.0}
    body = {"prompt": [1, 2], "max_tokens": 2}
    over, chat_over, at = _send([
        ("/v1/completions", {**body, "logit_bias": too_many}, JSON),
        ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "logit_bias": too_many}, JSON),
        ("/v1/completions", {**body, "logit_bias": most}, JSON),
    ])
    assert f"at most {MAX_LOGIT_BIAS_ENTRIES}" in _refused(over, 400, "logit_bias")
    _refused(chat_over, 400, "logit_bias")
    assert at.status_code == 200, at.text


BODY = json.dumps({"prompt": [1, 2], "max_tokens": 2}).encode()


@pytest.mark.parametrize("content_type", ["text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/xml"])
def test_bodies_that_say_they_are_not_json_are_a_415(content_type):
    """A web page may POST text/plain, form and multipart bodies to any origin without a preflight:
    read as JSON whatever they said, they made a server without --api-key generate for any page the
    user visited (FastAPI refuses them, so vLLM does)."""
    headers = {"Content-Type": content_type, "Origin": "https://evil.example"}
    completion, trace, nowhere = _send([("/v1/completions", BODY, headers), ("/v1/trace/start", b"", headers),
                                        ("/v1/nothing", BODY, headers)])
    assert "application/json" in _refused(completion, 415, None)
    _refused(trace, 415, None)
    _refused(nowhere, 404, None)


def test_json_bodies_are_served_with_or_without_a_content_type():
    answers = _send([("/v1/completions", BODY, {"Content-Type": ct}) for ct in
                     ("application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json")]
                    + [("/v1/completions", BODY, {})])
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]


def test_the_key_is_checked_before_the_content_type():
    """Without the key a client learns nothing else about what it sent."""
    config = ServerConfig(api_key="sk-1")
    (r,) = _send([("/v1/completions", BODY, {"Content-Type": "text/plain"})], config=config)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


class ToolsTokenizer(FakeTokenizer):
    """A template that renders the tools it is given, as Qwen3's, Hermes' and DeepSeek's do."""

    def apply_chat_template(self, messages, chat_template=None, add_generation_prompt=True, continue_final_message=False,
                            tokenize=False, tools=None) -> str:
        shown = "".join(f"tool {t['function']['name']}\n" for t in tools or [])
        return shown + super().apply_chat_template(messages, chat_template, add_generation_prompt, continue_final_message)


def test_tokenize_renders_tools_as_the_chat_endpoint_does():
    """/tokenize left `tools` out (its request had no such field): its count was short of the prompt the
    chat endpoint serves for the same messages and tools."""
    counted, served, plain = _send([
        ("/tokenize", {"messages": CHAT, "tools": TOOLS}, JSON),
        ("/v1/chat/completions", {"messages": CHAT, "tools": TOOLS, "tool_choice": "none", "max_tokens": 1,
                                  "return_token_ids": True}, JSON),
        ("/tokenize", {"messages": CHAT}, JSON),
    ], tokenizer=ToolsTokenizer())
    assert counted.status_code == served.status_code == 200, (counted.text, served.text)
    assert counted.json()["tokens"] == served.json()["prompt_token_ids"]
    assert counted.json()["count"] > plain.json()["count"]


@pytest.mark.parametrize("body, param", [
    ({"messages": CHAT, "tools": [{"type": "function"}]}, "tools.0.function"),
    ({"messages": CHAT, "tools": TOOLS * 2}, f"tools.{len(TOOLS)}.function.name"),
    ({"messages": CHAT, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
     "tools.0.function.parameters"),
    # vLLM tokenizes the prompt, which the chat endpoint would not serve: neither is the answer
    ({"messages": CHAT, "prompt": "hi"}, "prompt"),
])
def test_tokenize_refuses_what_the_chat_endpoint_would(body, param):
    (r,) = _send([("/tokenize", body, JSON)], tokenizer=ToolsTokenizer())
    _refused(r, 400, param)
