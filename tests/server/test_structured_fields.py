"""The request-time checks of response_format's json_schema and of tools (server/structured.py,
server/tools.py, engine/chat_prompt.py): each bad field is a 400 in the OpenAI shape naming it, before
anything is tokenized or compiled. Model-free."""
from __future__ import annotations

import json

import pytest

from moeserve.engine import chat_prompt
from moeserve.server.api_errors import ApiError
from moeserve.server.protocol import ChatCompletionRequest
from moeserve.server.structured import request_constraint
from moeserve.server.tools import tool_request

ASK = [{"role": "user", "content": "hi"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}}, "required": ["city"]}


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=ASK, **fields)


def refused(fn, *args) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*args)
    assert e.value.status == 400 and e.value.type == "invalid_request_error"
    assert set(e.value.body()["error"]) == {"message", "type", "param", "code"}
    return e.value


def schema_format(name) -> dict:
    spec = {"schema": {"type": "object"}} if name is ... else {"name": name, "schema": {"type": "object"}}
    return {"type": "json_schema", "json_schema": spec}


@pytest.mark.parametrize("name", ["person", "Person_v2-x", "a" * 64, "0"])
def test_a_json_schema_name_of_openais_pattern_is_taken(name):
    spec, source = request_constraint(chat(response_format=schema_format(name)))
    assert json.loads(spec.json) == {"type": "object"} and source == "response_format"


@pytest.mark.parametrize("name", [..., None, "", "my schema", "a.b", "a" * 65, "naïve", 123, ["x"]])
def test_a_json_schema_name_openai_refuses_is_a_400_naming_it(name):
    e = refused(request_constraint, chat(response_format=schema_format(name)))
    assert e.param == "response_format.json_schema.name"
    assert "response_format.json_schema.name" in e.message and "64" in e.message


def tool(name="get_weather", parameters=WEATHER) -> dict:
    fn = {"name": name, "description": "forecast"}
    if parameters is not None:
        fn["parameters"] = parameters
    return {"type": "function", "function": fn}


CHOICES = ["auto", "none", "required", {"type": "function", "function": {"name": "get_weather"}}]


def tools_of(tools: list, choice) -> ChatCompletionRequest:
    return chat(tools=tools, tool_choice=choice)


@pytest.mark.parametrize("choice", CHOICES)
def test_good_tools_are_taken_under_every_choice(choice):
    tools = [tool(), tool("no_args", None), tool("any-args_2", {"type": "object", "additionalProperties": True})]
    got = tool_request(tools_of(tools, choice), tool_call_parser="hermes")
    assert got is not None and [t["function"]["name"] for t in got.tools] == ["get_weather", "no_args", "any-args_2"]


UNENFORCEABLE = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_a_tool_schema_only_the_template_reads_is_taken_as_vllm_takes_it(choice):
    """Under "auto" and "none" no grammar is made of the schema (pydantic writes uniqueItems for a set):
    it is not refused for keywords the grammar could not enforce; "required" compiles it, and refuses."""
    got = tool_request(tools_of([tool("get_weather"), tool("tagger", UNENFORCEABLE)], choice), "hermes")
    assert got is not None and [t["function"]["name"] for t in got.tools] == ["get_weather", "tagger"]


@pytest.mark.parametrize("choice", CHOICES)
@pytest.mark.parametrize("parameters, says", [({"type": "string"}, "\"type\": \"object\""), ("{}", "JSON schema")])
def test_parameters_that_are_not_an_object_schema_are_a_400_whatever_the_choice(choice, parameters, says):
    tools = [tool("get_weather"), tool("second", parameters)]
    e = refused(tool_request, tools_of(tools, choice), "hermes")
    assert e.param == "tools.1.function.parameters" and says in e.message


@pytest.mark.parametrize("name", ["get weather", "", "x" * 257, None, 7])
def test_a_function_name_that_is_empty_spaced_or_too_long_is_a_400_naming_it(name):
    e = refused(tool_request, tools_of([tool(name)], "none"), None)
    assert e.param == "tools.0.function.name" and "256" in e.message


@pytest.mark.parametrize("name", ["server.get_weather", "x" * 65, "f()"])
def test_function_names_openai_would_refuse_are_taken_as_vllm_takes_them(name):
    got = tool_request(tools_of([tool(name)], "none"), None)
    assert got is not None and got.tools[0]["function"]["name"] == name


def test_two_functions_of_one_name_name_the_second():
    e = refused(tool_request, tools_of([tool("f"), tool("g"), tool("f")], "none"), None)
    assert e.param == "tools.2.function.name" and "tools.0" in e.message


@pytest.mark.parametrize("bad, param", [
    ({"type": "function"}, "tools.0.function"),
    ({"type": "function", "function": "get_weather"}, "tools.0.function"),
    ({"type": "code_interpreter"}, "tools.0"),
    ("get_weather", "tools.0"),
])
def test_a_tool_without_its_function_is_a_400_naming_it(bad, param):
    assert refused(tool_request, tools_of([bad], "none"), None).param == param


def test_llm_chat_shares_the_tool_checks():
    """LLM.chat calls chat_prompt.check_tools: the same refusals, as ChatPromptError naming the field."""
    with pytest.raises(chat_prompt.ChatPromptError) as e:
        chat_prompt.check_tools([tool("ok"), tool("bad", {"type": "array"})])
    assert e.value.param == "tools.1.function.parameters"
    assert chat_prompt.check_tools([tool("ok"), tool("also_ok", None), tool("set", UNENFORCEABLE)]) == [
        "ok", "also_ok", "set"]
