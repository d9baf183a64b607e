"""Structured outputs and tool calls through the official `openai` client against `moeserve serve` on
the built-in model, which never writes JSON by itself: every answer must still validate, at temperature
0.8 with n=2, streamed and not. One server for the module (the parsers are on, as a deployment of a
Qwen3 model would run them; the built-in tokenizer lacks their markers as tokens, which only warns)."""
from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from server_harness import ServerProcess

from moeserve.engine.builtin_model import build_tokenizer

pytestmark = pytest.mark.slow

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]{2,9}$"},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "role": {"type": "string", "enum": ["admin", "editor", "viewer"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
        "address": {"type": "object", "additionalProperties": False, "required": ["city", "zip"],
                    "properties": {"city": {"type": "string", "maxLength": 24}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["name", "age", "role", "tags", "address", "score"],
    "additionalProperties": False,
}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                            "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "days", "units"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Forecast for a city", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": {
             "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}}]
ASK = [{"role": "user", "content": "Tell me about a person."}]


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--max-model-len", "1024", "--kv-cache-blocks", "256", "--max-num-seqs", "8",
                       "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def chat(client, server, stream: bool, **kw) -> list[dict]:
    """Each choice as {"content", "reasoning", "tool_calls": [(id, name, arguments)], "finish"}, in index order."""
    kw.setdefault("messages", ASK)
    kw.setdefault("temperature", 0.8)
    kw.setdefault("max_tokens", 400)
    if not stream:
        resp = client.chat.completions.create(model=server.model, **kw)
        return [{"content": c.message.content, "reasoning": c.message.model_extra.get("reasoning_content"),
                 "tool_calls": [(t.id, t.function.name, t.function.arguments) for t in c.message.tool_calls or []],
                 "finish": c.finish_reason} for c in sorted(resp.choices, key=lambda c: c.index)]
    out: dict[int, dict] = {}
    for chunk in client.chat.completions.create(model=server.model, stream=True, **kw):
        for c in chunk.choices:
            got = out.setdefault(c.index, {"content": "", "reasoning": "", "calls": {}, "finish": None})
            got["content"] += c.delta.content or ""
            got["reasoning"] += (c.delta.model_extra or {}).get("reasoning_content") or ""
            for t in c.delta.tool_calls or []:
                call = got["calls"].setdefault(t.index, ["", "", ""])
                if t.id:
                    assert not call[0], "a call's id comes once"
                    call[0], call[1] = t.id, t.function.name
                call[2] += t.function.arguments or ""
            got["finish"] = c.finish_reason or got["finish"]
    return [{"content": o["content"], "reasoning": o["reasoning"], "finish": o["finish"],
             "tool_calls": [tuple(o["calls"][i]) for i in sorted(o["calls"])]} for _, o in sorted(out.items())]


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_answers_validate(client, server, stream):
    choices = chat(client, server, stream, n=2, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    assert len(choices) == 2
    for c in choices:
        assert c["finish"] == "stop", c
        jsonschema.validate(json.loads(c["content"]), PERSON)
    assert choices[0]["content"] != choices[1]["content"]  # two samples


def test_pydantic_model_through_parse(client, server):
    class Address(BaseModel):
        city: str = Field(max_length=20)
        zip: str = Field(pattern=r"^[0-9]{5}$")

    class Person(BaseModel):
        name: str = Field(max_length=16)
        age: int = Field(ge=0, le=120)
        address: Address

    resp = client.beta.chat.completions.parse(model=server.model, messages=ASK, response_format=Person,
                                              temperature=0.8, max_tokens=300)
    person = resp.choices[0].message.parsed
    assert isinstance(person, Person) and 0 <= person.age <= 120 and re.fullmatch(r"[0-9]{5}", person.address.zip)


@pytest.mark.parametrize("stream", [False, True])
def test_completions_json_regex_choice_and_grammar(client, server, stream):
    def complete(constraint: dict) -> list[str]:
        resp = client.completions.create(model=server.model, prompt="Once upon a time", n=2, temperature=0.8,
                                         max_tokens=300, stream=stream, extra_body={"structured_outputs": constraint})
        if not stream:
            return [c.text for c in sorted(resp.choices, key=lambda c: c.index)]
        texts: dict[int, str] = {}
        for chunk in resp:
            for c in chunk.choices:
                texts[c.index] = texts.get(c.index, "") + c.text
        return [texts[i] for i in sorted(texts)]

    for text in complete({"json": PERSON}):
        jsonschema.validate(json.loads(text), PERSON)
    pattern = r"[A-Z][a-z]{2,8} (is|was) [0-9]{1,3} (years|days) old\."
    assert all(re.fullmatch(pattern, t) for t in complete({"regex": pattern}))
    choices = ["happily ever after", "in a castle", "never"]
    assert all(t in choices for t in complete({"choice": choices}))
    grammar = 'root ::= greeting " " name\ngreeting ::= "Hello" | "Goodbye"\nname ::= [A-Z] [a-z]+ "!"'
    assert all(re.fullmatch(r"(Hello|Goodbye) [A-Z][a-z]+!", t) for t in complete({"grammar": grammar}))


def test_stop_strings_and_max_tokens_cut_a_constrained_answer(client, server):
    """The user's limits still apply: a stop string ends the answer where it occurs, max_tokens cuts it."""
    pattern = r"[a-z]{2,6}( and [a-z]{2,6}){2,3}\."
    resp = client.completions.create(model=server.model, prompt="We bought", n=2, temperature=0.8, max_tokens=60,
                                     stop=[" and "], extra_body={"structured_outputs": {"regex": pattern}})
    for c in resp.choices:
        assert re.fullmatch(r"[a-z]{2,6}", c.text) and c.finish_reason == "stop" and c.model_extra["stop_reason"] == " and "
    cut = client.completions.create(model=server.model, prompt="We bought", max_tokens=6, temperature=0.8,
                                    extra_body={"structured_outputs": {"json": PERSON}})
    assert cut.choices[0].finish_reason == "length" and '{"name": "'.startswith(cut.choices[0].text[:10])


def test_json_object_and_chat_regex(client, server):
    # the built-in model writes prose: `"` ends a string and `}` closes an object only if the model ever
    # picks them, so a logit bias asks for both (the grammar still decides where they may go), and a seed
    # keeps the sample the same from run to run
    tok = build_tokenizer()
    bias = {str(tok.convert_tokens_to_ids(c)): 8 for c in ('"', "}")}
    for c in chat(client, server, False, n=2, seed=3, response_format={"type": "json_object"}, logit_bias=bias):
        assert isinstance(json.loads(c["content"]), dict) and c["finish"] == "stop"
    for c in chat(client, server, True, n=2, extra_body={"structured_outputs": {"regex": r"(yes|no), [a-z]{3,10}\."}}):
        assert re.fullmatch(r"(yes|no), [a-z]{3,10}\.", c["content"]), c


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_required_and_named(client, server, stream):
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for c in chat(client, server, stream, n=2, tools=TOOLS, tool_choice="required"):
        assert c["finish"] == "tool_calls" and len(c["tool_calls"]) == 1 and not c["content"], c
        for call_id, name, arguments in c["tool_calls"]:
            assert call_id.startswith("call_")
            jsonschema.validate(json.loads(arguments), schemas[name])
    named = {"type": "function", "function": {"name": "get_weather"}}
    for c in chat(client, server, stream, n=2, tools=TOOLS, tool_choice=named):
        (call_id, name, arguments), = c["tool_calls"]
        assert name == "get_weather" and c["finish"] == "stop"  # OpenAI's (and vLLM's) answer to a named tool_choice
        jsonschema.validate(json.loads(arguments), WEATHER)
    several = chat(client, server, stream, tools=TOOLS, tool_choice="required", parallel_tool_calls=True, max_tokens=200)
    for call_id, name, arguments in several[0]["tool_calls"][:-1]:  # the last one may be cut by max_tokens
        jsonschema.validate(json.loads(arguments), schemas[name])


@pytest.mark.parametrize("stream", [False, True])
def test_auto_tool_calls_and_reasoning_are_parsed(client, server, stream):
    """The parsers on real server output: a regex makes the model write Qwen3's reasoning and hermes calls."""
    call = r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "[A-Z][a-z]{2,8}", "days": [1-7], "units": "celsius"\}\}\n</tool_call>'
    forced = {"regex": r"<think>[a-z ]{5,30}</think>\n\nLet me check\.\n" + call}
    (c,) = chat(client, server, stream, tools=TOOLS, extra_body={"structured_outputs": forced})
    assert re.fullmatch(r"[a-z ]{5,30}", c["reasoning"]) and c["content"] == "\n\nLet me check.\n"
    (call_id, name, arguments), = c["tool_calls"]
    assert name == "get_weather" and c["finish"] == "tool_calls"
    jsonschema.validate(json.loads(arguments), WEATHER)
    (plain,) = chat(client, server, stream, tools=TOOLS, tool_choice="none", max_tokens=8)
    assert plain["content"] and not plain["tool_calls"]


def test_what_cannot_be_enforced_is_a_400(client, server):
    def refused(**kw) -> openai.BadRequestError:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=server.model, messages=ASK, max_tokens=5, **kw)
        return e.value

    e = refused(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}}})
    assert "uniqueItems" in e.message and e.body["param"] == "response_format"
    e = refused(extra_body={"structured_outputs": {"regex": "(?<=a)b"}})
    assert "Lookbehind" in e.message and e.body["param"] == "structured_outputs"
    e = refused(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}})
    assert "strin" in e.message
    e = refused(extra_body={"guided_json": {"type": "object"}})
    assert "structured_outputs" in e.message and e.body["param"] == "guided_json"
    e = refused(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    assert e.body["param"] == "tool_choice"
    e = refused(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"})
    assert "both constrain" in e.message
