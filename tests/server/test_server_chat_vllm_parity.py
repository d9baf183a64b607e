"""/v1/chat/completions where it answered differently from vLLM (0.32) on the same request, found by
sending both servers the same requests: each test holds vLLM's behaviour, read from its source and
seen on its server. In-process (ASGI) against a fake engine, so vLLM is not needed."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from family_tokenizers import save_tokenizer
from server_fakes import FakeEngine, FakeTokenizer, make_app

from moeserve.engine import chat_prompt
from moeserve.outputs import RequestOutput

CHAT = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["tz"]}}}]


async def _posts(tokenizer, *requests: tuple[str, dict]):
    http, client, _ = await make_app(FakeEngine(max_waiting=100), tokenizer=tokenizer)
    try:
        return [await http.post(path, json=body) for path, body in requests]
    finally:
        await http.aclose()
        await client.shutdown(1.0)


def _post(body: dict, tokenizer=None, path: str = "/v1/chat/completions"):
    return asyncio.run(_posts(tokenizer, (path, body)))[0]


def _chunks(r) -> list:
    return [json.loads(line[6:]) if line != "data: [DONE]" else "[DONE]"
            for line in r.text.splitlines() if line.startswith("data: ")]


DEVELOPER = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
             {"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "More?"}]


def test_a_developer_message_is_a_system_one_for_a_template_without_the_role(tmp_path):
    """GLM-4.5's template (as most) has no "developer" role: the prompt held `<|developer|>`, a role the
    model never saw; vLLM renders the message as a system one, joined with the other system message
    first (templates such as Qwen's take a system message first only)."""
    tokenizer = save_tokenizer("glm4_moe", tmp_path)
    as_system = [{"role": "system", "content": "Be brief.\n\nAnswer in French."}, *DEVELOPER[1:2], DEVELOPER[3]]
    want = tokenizer.encode(tokenizer.apply_chat_template(as_system, add_generation_prompt=True, tokenize=False),
                            add_special_tokens=False)
    counted, served = asyncio.run(_posts(tokenizer, ("/tokenize", {"messages": DEVELOPER}),
                                         ("/v1/chat/completions", {"messages": DEVELOPER, "max_tokens": 1})))
    assert counted.status_code == served.status_code == 200, (counted.text, served.text)
    assert counted.json()["tokens"] == want
    assert served.json()["usage"]["prompt_tokens"] == len(want)


def test_a_template_that_knows_the_developer_role_gets_it(tmp_path):
    """gpt-oss's harmony template renders developer messages itself: they reach it unchanged."""
    tokenizer = save_tokenizer("gpt_oss", tmp_path)
    want = tokenizer.encode(tokenizer.apply_chat_template(DEVELOPER, add_generation_prompt=True, tokenize=False),
                            add_special_tokens=False)
    counted = _post({"messages": DEVELOPER}, tokenizer, "/tokenize")
    assert counted.status_code == 200, counted.text
    assert counted.json()["tokens"] == want


@pytest.mark.parametrize("turns, want", [
    ([{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}],
     [{"role": "system", "content": "d"}, {"role": "user", "content": "u"}]),
    ([{"role": "user", "content": "u"}, {"role": "developer", "content": "d"}],
     [{"role": "system", "content": "d"}, {"role": "user", "content": "u"}]),
    ([{"role": "developer", "content": ""}, {"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
     [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]),
    ([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
     [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]),
])
def test_developer_as_system(turns, want):
    assert chat_prompt.developer_as_system(turns) == want


def test_top_logprobs_zero_without_logprobs_is_accepted():
    """`top_logprobs: 0` asks for nothing (vLLM's default value, which clients that send every field send);
    vLLM serves it, moeserve answered 400 "top_logprobs needs logprobs: true". A positive one still needs it."""
    zero = _post({"messages": CHAT, "max_tokens": 2, "top_logprobs": 0})
    assert zero.status_code == 200, zero.text
    assert zero.json()["choices"][0]["logprobs"] is None
    one = _post({"messages": CHAT, "max_tokens": 2, "top_logprobs": 1})
    assert one.status_code == 400 and one.json()["error"]["param"] == "top_logprobs", one.text


class ScriptedEngine(FakeEngine):
    """Every request's output is SCRIPT, one character a step, ending by itself ("stop")."""

    SCRIPT = '{"tz": "UTC"}'

    def step(self):
        outs = []
        for rid, (prompt, _, toks) in list(self.requests.items()):
            tok = ord(self.SCRIPT[len(toks)])
            toks.append(tok)
            done = len(toks) == len(self.SCRIPT)
            outs.append(RequestOutput(rid, prompt, list(toks), text=self.SCRIPT[:len(toks)], new_token_ids=[tok],
                                      delta_text=chr(tok), finish_reason="stop" if done else None))
            if done:
                del self.requests[rid]
        return outs


class ToolsTokenizer(FakeTokenizer):
    def apply_chat_template(self, messages, tools=None, **kw) -> str:
        return super().apply_chat_template(messages, **kw)


async def _chat(body: dict, engine: ScriptedEngine, **app) -> Any:
    """One chat request to the front end over `engine` (make_app's keywords in `app`)."""
    http, client, _ = await make_app(engine, **app)
    try:
        return await http.post("/v1/chat/completions", json=body)
    finally:
        await http.aclose()
        await client.shutdown(1.0)


async def _scripted(body: dict):
    return await _chat(body, ScriptedEngine(max_waiting=100), tokenizer=ToolsTokenizer())


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_tool_choice_finishes_with_stop(stream):
    """OpenAI answers a named tool_choice's call with finish_reason "stop" ("tool_calls" is for "auto" and
    "required"), and vLLM follows it; moeserve said "tool_calls"."""
    named = {"type": "function", "function": {"name": "get_time"}}
    r = asyncio.run(_scripted({"messages": CHAT, "max_tokens": 50, "tools": TOOLS, "tool_choice": named,
                               "stream": stream}))
    assert r.status_code == 200, r.text
    if stream:
        chunks = [c for c in _chunks(r) if c != "[DONE]"]
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]]
        calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
        assert finishes == ["stop"] and calls[0]["function"]["name"] == "get_time"
        assert "".join(tc["function"].get("arguments", "") for tc in calls) == ScriptedEngine.SCRIPT
    else:
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        assert choice["message"]["tool_calls"][0]["function"] == {"name": "get_time", "arguments": ScriptedEngine.SCRIPT}


def test_required_tool_choice_still_finishes_with_tool_calls():
    ScriptedEngine.SCRIPT = '[{"name": "get_time", "parameters": {"tz": "UTC"}}]'
    try:
        r = asyncio.run(_scripted({"messages": CHAT, "max_tokens": 80, "tools": TOOLS, "tool_choice": "required"}))
    finally:
        ScriptedEngine.SCRIPT = '{"tz": "UTC"}'
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls", r.text


@pytest.mark.parametrize("stream", [False, True])
def test_return_token_ids_puts_the_prompt_ids_at_the_top_level(stream):
    """vLLM's chat response carries `prompt_token_ids` at its top level (a stream: on the role chunk),
    where RL rollout clients read them; moeserve put them in each choice, as completions do, and a
    stream carried none."""
    r = _post({"messages": CHAT, "max_tokens": 2, "n": 2, "return_token_ids": True, "stream": stream})
    assert r.status_code == 200, r.text
    want = _post({"messages": CHAT}, path="/tokenize").json()["tokens"]
    if stream:
        chunks = [c for c in _chunks(r) if c != "[DONE]"]
        roles = [c for c in chunks if "role" in c["choices"][0]["delta"]]
        assert len(roles) == 2 and all(c["prompt_token_ids"] == want for c in roles)
        assert not any("prompt_token_ids" in c for c in chunks if c not in roles)
        assert not any("prompt_token_ids" in c["choices"][0] for c in chunks)
    else:
        body = r.json()
        assert body["prompt_token_ids"] == want
        assert all("prompt_token_ids" not in c and len(c["token_ids"]) == 2 for c in body["choices"])


class ReasoningTokenizer(FakeTokenizer):
    """Renders an assistant turn's reasoning as GLM-4.5's and Qwen3's templates do (`reasoning_content`)
    and as newer ones read it (`reasoning`)."""

    def apply_chat_template(self, messages, **kw) -> str:
        shown = [dict(m, content=f"{m['content']}|rc={m.get('reasoning_content')}|r={m.get('reasoning')}") for m in messages]
        return super().apply_chat_template(shown, **kw)


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_an_assistant_turns_reasoning_reaches_the_template(key):
    """A reasoning model's earlier thinking, sent back on its assistant turn (interleaved thinking in tool
    loops: GLM-4.5, MiniMax-M2), was dropped before the template; vLLM hands it over as `reasoning` and
    `reasoning_content` both. Other roles' reasoning fields change nothing."""
    messages = [{"role": "user", "content": "q", key: "ignored"}, {"role": "assistant", "content": "a", key: "because"},
                {"role": "user", "content": "next"}]
    r = _post({"messages": messages, "max_tokens": 1, "return_token_ids": True}, ReasoningTokenizer())
    assert r.status_code == 200, r.text
    text = "".join(chr(i) for i in r.json()["prompt_token_ids"])  # FakeTokenizer: one id per character, % 100
    want = "user: q|rc=None|r=None\nassistant: a|rc=because|r=because\nuser: next|rc=None|r=None\nassistant:"
    assert text == "".join(chr(ord(c) % 100) for c in want)


def test_a_streamed_tool_call_sends_every_token_id():
    """Streamed with return_token_ids, the steps whose text the tool parser held back (a call being
    written) sent no chunk, so their token ids were missing from the stream; vLLM sends them (as
    moeserve already did with logprobs)."""
    named = {"type": "function", "function": {"name": "get_time"}}
    r = asyncio.run(_scripted({"messages": CHAT, "max_tokens": 50, "tools": TOOLS, "tool_choice": named,
                               "stream": True, "return_token_ids": True}))
    assert r.status_code == 200, r.text
    ids = [t for c in _chunks(r) if c != "[DONE]" for t in c["choices"][0].get("token_ids", [])]
    assert ids == [ord(c) for c in ScriptedEngine.SCRIPT]


class KeysTokenizer(FakeTokenizer):
    """Shows which keys each message hands the template (DeepSeek-V3's tests `'tool_calls' in message`)."""

    def apply_chat_template(self, messages, **kw) -> str:
        return "".join(f"{m['role']}:{','.join(sorted(m))}\n" for m in messages)


def test_an_empty_tool_calls_list_does_not_reach_the_template():
    """`tool_calls: []` on an assistant turn (some SDKs send it) reached the template, which a template
    testing for the key took for a turn with calls; vLLM drops it."""
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "tool_calls": []},
                {"role": "user", "content": "next"}]
    r = _post({"messages": messages}, KeysTokenizer(), "/tokenize")
    assert r.status_code == 200, r.text
    want = "user:content,role\nassistant:content,role\nuser:content,role\n"
    assert r.json()["tokens"] == [ord(c) % 100 for c in want]


async def _reasoning(body: dict, script: str):
    from moeserve.server.config_file import ServerConfig

    engine = ScriptedEngine(max_waiting=100)
    engine.SCRIPT = script
    return await _chat(body, engine, config=ServerConfig(reasoning_parser="qwen3"))


@pytest.mark.parametrize("stream", [False, True])
def test_include_reasoning_false_leaves_the_reasoning_out(stream):
    """vLLM's `include_reasoning: false` (default true) answers without the reasoning; moeserve ignored
    the field and sent it. The answer is the same either way."""
    script = "<think>hmm</think>answer"
    for include in (True, False):
        r = asyncio.run(_reasoning({"messages": CHAT, "max_tokens": 50, "stream": stream,
                                    "include_reasoning": include}, script))
        assert r.status_code == 200, r.text
        if stream:
            deltas = [c["choices"][0]["delta"] for c in _chunks(r) if c != "[DONE]"]
            got = {k: "".join(d.get(k) or "" for d in deltas) for k in ("content", "reasoning", "reasoning_content")}
        else:
            message = r.json()["choices"][0]["message"]
            got = {k: message.get(k) or "" for k in ("content", "reasoning", "reasoning_content")}
        thought = "hmm" if include else ""
        assert got == {"content": "answer", "reasoning": thought, "reasoning_content": thought}, got


def test_reasoning_effort_takes_openais_values_and_none_turns_thinking_off(tmp_path):
    """vLLM takes OpenAI's efforts ("none", "minimal", "xhigh" besides low/medium/high; and "max") and
    sets enable_thinking from them (false for "none") unless chat_template_kwargs does: moeserve refused
    "none" and "minimal" with a 400, and an effort never reached a template switched by enable_thinking
    (GLM-4.5's, Qwen3's)."""
    tokenizer = save_tokenizer("glm4_moe", tmp_path)
    user = [{"role": "user", "content": "Hi"}]
    none, minimal, forced, plain = asyncio.run(_posts(
        tokenizer, ("/tokenize", {"messages": user, "reasoning_effort": "none"}),
        ("/tokenize", {"messages": user, "reasoning_effort": "minimal"}),
        ("/tokenize", {"messages": user, "reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}}),
        ("/tokenize", {"messages": user})))
    assert all(r.status_code == 200 for r in (none, minimal, forced, plain)), none.text
    text = [tokenizer.decode(r.json()["tokens"], skip_special_tokens=False) for r in (none, minimal, forced, plain)]
    assert text[0].endswith("<|assistant|>\n<think></think>")  # GLM's template: thinking off
    assert text[1] == text[2] == text[3] and text[3].endswith("<|assistant|>")
