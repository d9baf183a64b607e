"""Tool-call and reasoning parsers on recorded text of each family (the formats their chat templates
and model cards document), whole and streamed: one token at a time (special markers whole, other text
by character and by word) and in chunks that cut markers apart. The deltas must add up to the whole."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from moeserve.server.api_errors import ApiError
from moeserve.server.chat_output import OutputFormats, plan_output
from moeserve.server.parsers import TOOL_PARSERS
from moeserve.server.parsers.forced import NamedCallParser, RequiredCallsParser
from moeserve.server.parsers.reasoning import ANSWER, MODEL, REASONING, REASONING_FAMILIES
from moeserve.server.parsers.stream import ChoiceParser
from moeserve.server.tools import tool_request

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "units": {"type": "string", "enum": ["c", "f"]}}}}},
           {"type": "function", "function": {"name": "get_time", "parameters": {
               "type": "object", "properties": {"zone": {"type": "string"}}}}}]

# special markers of every family: a tokenizer has each as one token
_MARKERS = re.compile("|".join(re.escape(m) for m in sorted({
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
    "<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>", "<|call|>", "<|return|>"}, key=len, reverse=True)))


def tokens(text: str, by: str) -> list[str]:
    """The text cut as a tokenizer would: markers whole, the rest by character or by word."""
    out, pos = [], 0
    for m in _MARKERS.finditer(text):
        out += _pieces(text[pos:m.start()], by) + [m.group()]
        pos = m.end()
    return out + _pieces(text[pos:], by)


def _pieces(text: str, by: str) -> list[str]:
    return list(text) if by == "char" else re.findall(r"\s*\S+|\s+", text)


def chunks(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def streamed(make, pieces: list[str]) -> dict:
    """The deltas of feeding `pieces` one at a time, merged as a client merges them."""
    parser, text = make(), ""
    merged = {"reasoning_content": "", "content": "", "tool_calls": {}}
    deltas = []
    for i, piece in enumerate(pieces):
        text += piece
        deltas.append(parser.delta(text, final=i == len(pieces) - 1))
    if not pieces:
        deltas.append(parser.delta("", final=True))
    for d in deltas:
        assert d.get("reasoning") == d.get("reasoning_content"), "the reasoning under both its names (vLLM's and the older)"
        merged["reasoning_content"] += d.get("reasoning_content", "")
        merged["content"] += d.get("content", "")
        for call in d.get("tool_calls", []):
            got = merged["tool_calls"].setdefault(call["index"], {"id": None, "name": None, "arguments": ""})
            if "id" in call:
                assert got["id"] is None, "a call's id is sent once"
                got.update(id=call["id"], name=call["function"]["name"])
            else:
                assert got["id"] is not None, "arguments before the call's name"
            got["arguments"] += call["function"]["arguments"]
    return merged


def check_all_ways(make, text: str) -> dict:
    """The whole message, after checking that every way of streaming `text` adds up to it."""
    whole = make().message(text)
    assert whole.get("reasoning") == whole.get("reasoning_content")  # vLLM 0.32's name and the older one
    ways = [tokens(text, "char"), tokens(text, "word")] + [chunks(text, n) for n in (1, 2, 3, 5, 7, 11, 64)]
    for pieces in ways:
        got = streamed(make, pieces)
        assert got["content"] == (whole["content"] or ""), pieces
        assert got["reasoning_content"] == (whole.get("reasoning_content") or ""), pieces
        calls = [got["tool_calls"][i] for i in sorted(got["tool_calls"])]
        assert [(c["name"], c["arguments"]) for c in calls] == [
            (c["function"]["name"], c["function"]["arguments"]) for c in whole.get("tool_calls", [])], pieces
    return whole


def calls_of(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])]


def tool_parser(name: str):
    return lambda: ChoiceParser(None, TOOL_PARSERS[name](WEATHER))


# ---- hermes (Qwen2.5 / Qwen3, Hermes) ----------------------------------------------------------------
HERMES_TWO_CALLS = ('I will check both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
                    '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "Europe/Paris"}}\n</tool_call>')


def test_hermes_two_calls_and_content():
    whole = check_all_ways(tool_parser("hermes"), HERMES_TWO_CALLS)
    assert whole["content"] == "I will check both.\n"
    assert calls_of(whole) == [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"zone": "Europe/Paris"})]
    assert len({c["id"] for c in whole["tool_calls"]}) == 2


def test_hermes_plain_text_and_markup_in_strings():
    whole = check_all_ways(tool_parser("hermes"), "No tools needed: 2 < 3 and <b>bold</b>.")
    assert whole["content"] == "No tools needed: 2 < 3 and <b>bold</b>." and "tool_calls" not in whole
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a \\"quoted\\" } city"}}\n</tool_call>'
    whole = check_all_ways(tool_parser("hermes"), text)
    assert whole["content"] is None and calls_of(whole) == [("get_weather", {"city": 'a "quoted" } city'})]


def test_hermes_cut_off_and_malformed_blocks():
    cut = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'  # max_tokens ran out
    whole = check_all_ways(tool_parser("hermes"), cut)
    assert whole["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Par'}
    whole = check_all_ways(tool_parser("hermes"), "Before <tool_call>not json</tool_call> after")
    assert whole["content"] == "Before <tool_call>not json</tool_call> after" and "tool_calls" not in whole
    # cut before its arguments: none were written, so none are made up ("{}" would call the function)
    whole = check_all_ways(tool_parser("hermes"), '<tool_call>\n{"name": "get_time", "argument')
    assert whole["tool_calls"][0]["function"] == {"name": "get_time", "arguments": ""}
    whole = check_all_ways(tool_parser("hermes"), '<tool_call>\n{"name": "get_time"}\n</tool_call>')
    assert whole["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}  # a call without arguments


# ---- deepseek_v3 (V3, R1; V3.1 without the type and fence) ------------------------------------------
DEEPSEEK_V3 = ("Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
               '{"city": "Tokyo", "units": "c"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>'
               'get_time\n```json\n{"zone": "Asia/Tokyo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
DEEPSEEK_V31 = ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Tokyo"}<｜tool▁call▁end｜>'
                "<｜tool▁calls▁end｜>")


def test_deepseek_v3_calls():
    whole = check_all_ways(tool_parser("deepseek_v3"), DEEPSEEK_V3)
    assert whole["content"] == "Let me look."
    assert calls_of(whole) == [("get_weather", {"city": "Tokyo", "units": "c"}), ("get_time", {"zone": "Asia/Tokyo"})]
    whole = check_all_ways(tool_parser("deepseek_v3"), DEEPSEEK_V31)
    assert whole["content"] is None and calls_of(whole) == [("get_weather", {"city": "Tokyo"})]
    whole = check_all_ways(tool_parser("deepseek_v3"), "The answer is 4.")
    assert whole["content"] == "The answer is 4." and "tool_calls" not in whole


# ---- glm45 (GLM-4.5 / 4.6) ---------------------------------------------------------------------------
GLM45 = ("I'll check.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>北京</arg_value>\n"
         "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call><tool_call>get_time\n"
         "<arg_key>zone</arg_key>\n<arg_value>Asia/Shanghai</arg_value>\n</tool_call>")


def test_glm45_calls_typed_by_the_schema():
    whole = check_all_ways(tool_parser("glm45"), GLM45)
    assert whole["content"] == "I'll check."
    assert calls_of(whole) == [("get_weather", {"city": "北京", "days": 3}), ("get_time", {"zone": "Asia/Shanghai"})]
    # a string parameter keeps text that looks like JSON; an unknown one is read as JSON when it is
    text = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>123</arg_value>\n<arg_key>extra</arg_key>\n" \
           "<arg_value>[1, 2]</arg_value>\n</tool_call>"
    assert calls_of(check_all_ways(tool_parser("glm45"), text)) == [("get_weather", {"city": "123", "extra": [1, 2]})]
    no_args = check_all_ways(tool_parser("glm45"), "<tool_call>get_time\n</tool_call>")
    assert calls_of(no_args) == [("get_time", {})]


def test_glm45_string_arguments_stream_while_written():
    parser = ChoiceParser(None, TOOL_PARSERS["glm45"](WEATHER))
    text = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rio de Jan"
    first = parser.delta(text)
    assert first["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Rio de Jan'}


# ---- openai (gpt-oss harmony) ------------------------------------------------------------------------
HARMONY_CALL = ("<|channel|>analysis<|message|>The user asks for the weather; call the tool.<|end|>"
                "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                '{"city": "San Francisco"}')  # <|call|> ends generation and is not in the text
HARMONY_ANSWER = ("<|channel|>analysis<|message|>Simple arithmetic.<|end|><|start|>assistant<|channel|>final"
                  "<|message|>2 + 2 = 4.")


def harmony(tools=WEATHER):
    family = REASONING_FAMILIES["openai"]
    return lambda: ChoiceParser(family.parser(REASONING), TOOL_PARSERS["openai"](tools))


def test_harmony_reasoning_and_call():
    whole = check_all_ways(harmony(), HARMONY_CALL)
    assert whole["reasoning_content"] == "The user asks for the weather; call the tool."
    assert whole["content"] is None and calls_of(whole) == [("get_weather", {"city": "San Francisco"})]
    whole = check_all_ways(harmony(), HARMONY_ANSWER)
    assert whole["reasoning_content"] == "Simple arithmetic." and whole["content"] == "2 + 2 = 4."


def test_harmony_preamble_recipient_in_role_and_builtin_tools():
    text = ("<|channel|>commentary<|message|>Checking the forecast.<|end|><|start|>assistant to=functions.get_time"
            "<|channel|>commentary json<|message|>{\"zone\": \"UTC\"}<|call|><|start|>assistant to=browser.search"
            "<|channel|>analysis<|message|>{\"query\": \"x\"}<|end|>")
    whole = check_all_ways(harmony(), text)
    assert whole["content"] == "Checking the forecast." and calls_of(whole) == [("get_time", {"zone": "UTC"})]
    answer_only = lambda: ChoiceParser(REASONING_FAMILIES["openai"].parser(REASONING),  # noqa: E731
                                       TOOL_PARSERS["openai"](None, calls=False))
    whole = check_all_ways(answer_only, HARMONY_CALL)  # no tools offered: a call is not an answer
    assert whole["content"] == "" and "tool_calls" not in whole
    whole = check_all_ways(harmony(), "Plain text from a model that does not write harmony.")
    assert whole["content"] == "Plain text from a model that does not write harmony."


# ---- reasoning: deepseek_r1, qwen3, glm45 --------------------------------------------------------------
def think(name: str, mode: str, tools: str | None = None):
    family = REASONING_FAMILIES[name]
    return lambda: ChoiceParser(family.parser(mode), TOOL_PARSERS[tools](WEATHER) if tools else None)


@pytest.mark.parametrize("name", ["deepseek_r1", "qwen3", "glm45"])
def test_think_tags(name):
    whole = check_all_ways(think(name, MODEL if name != "deepseek_r1" else REASONING),
                           "<think>\nLet me add: 2 + 2.\n</think>\n\nThe answer is 4.")
    assert whole["reasoning_content"] == "\nLet me add: 2 + 2.\n" and whole["content"] == "\n\nThe answer is 4."
    cut = check_all_ways(think(name, REASONING), "Still thinking about <b>it")  # the prompt opened <think>
    assert cut["reasoning_content"] == "Still thinking about <b>it" and cut["content"] == ""


def test_where_the_output_starts_follows_the_prompt():
    r1, qwen, glm = (REASONING_FAMILIES[n] for n in ("deepseek_r1", "qwen3", "glm45"))
    assert r1.mode("<｜User｜>hi<｜Assistant｜><think>\n") == REASONING
    assert r1.mode("<｜User｜>hi<｜Assistant｜>") == REASONING  # R1 thinks, <think> written or not
    assert qwen.mode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") == MODEL
    assert qwen.mode("<|im_start|>assistant\n<think>\n\n</think>\n\n") == ANSWER  # enable_thinking=False
    # an earlier turn's closed reasoning does not count: GLM-4.5 keeps <think></think> in history
    assert glm.mode("<|assistant|>\n<think></think>\nHello<|user|>\nhi<|assistant|>") == MODEL
    answer = check_all_ways(think("qwen3", MODEL), "The answer is 4.")  # no <think>: all answer
    assert answer["content"] == "The answer is 4." and answer["reasoning_content"] is None
    assert check_all_ways(think("qwen3", ANSWER), "<think>x</think>y")["content"] == "<think>x</think>y"


def test_reasoning_then_tool_calls():
    text = "<think>The user wants weather.</think>\n\n" + HERMES_TWO_CALLS
    whole = check_all_ways(think("qwen3", MODEL, tools="hermes"), text)
    assert whole["reasoning_content"] == "The user wants weather."
    assert whole["content"] == "\n\nI will check both.\n" and len(whole["tool_calls"]) == 2


# ---- tool_choice "required" and a named function ---------------------------------------------------------
def test_required_and_named_calls():
    text = '[{"name": "get_weather", "parameters": {"city": "Oslo", "days": 2}}, {"name": "get_time", "parameters": {}}]'
    whole = check_all_ways(lambda: ChoiceParser(None, RequiredCallsParser()), text)
    assert calls_of(whole) == [("get_weather", {"city": "Oslo", "days": 2}), ("get_time", {})]
    whole = check_all_ways(lambda: ChoiceParser(None, NamedCallParser("get_time")), '{"zone": "UTC"}')
    assert calls_of(whole) == [("get_time", {"zone": "UTC"})] and whole["content"] is None


def test_parallel_tool_calls_false_keeps_the_first_call():
    """OpenAI's parallel_tool_calls: false is at most one call; a model that writes two (tool_choice
    "auto") has the first reported, as vLLM does."""
    whole = check_all_ways(lambda: ChoiceParser(None, TOOL_PARSERS["hermes"](WEATHER), max_calls=1), HERMES_TWO_CALLS)
    assert calls_of(whole) == [("get_weather", {"city": "Paris", "days": 3})] and whole["content"] == "I will check both.\n"
    formats = OutputFormats.of("hermes", None, None)
    for parallel, calls in ((False, 1), (None, 2), (True, 2)):
        req = SimpleNamespace(tools=WEATHER, tool_choice="auto", parallel_tool_calls=parallel)
        plan = plan_output(formats, tool_request(req, "hermes"), "", None)
        assert len(plan.new_parser().message(HERMES_TWO_CALLS)["tool_calls"]) == calls
    with pytest.raises(ApiError) as e:
        tool_request(SimpleNamespace(tools=[{"type": "custom"}], tool_choice="required", parallel_tool_calls=None), None)
    assert e.value.message.endswith('"parameters": {...}}} (function tools are the only kind served)')


# ---- the server's plan for a request ---------------------------------------------------------------------
class _Tok:
    """A tokenizer whose harmony and think markers are single special tokens."""

    SPECIAL = ["<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>", "<think>", "</think>"]

    def encode(self, text, add_special_tokens=False):
        pieces = re.split("(" + "|".join(re.escape(m) for m in self.SPECIAL) + ")", text)
        return [i for p in pieces for i in ([100 + self.SPECIAL.index(p)] if p in self.SPECIAL else map(ord, p))]

    def decode(self, ids, skip_special_tokens=True):
        return "".join("" if i >= 100 and skip_special_tokens else self.SPECIAL[i - 100] if i >= 100 else chr(i) for i in ids)


def test_the_plan_gates_the_grammar_and_keeps_special_markers(caplog):
    from moeserve.sampling_params import StructuredOutputsParams
    from moeserve.server.chat_output import OutputFormats, plan_output

    qwen = OutputFormats.of(None, "qwen3", _Tok())
    assert qwen.keep_special_tokens  # <think> is special in _Tok: detokenizing would drop it
    plan = plan_output(qwen, None, "<|im_start|>assistant\n", StructuredOutputsParams(regex="[0-9]+"))
    assert plan.reasoning_mode == MODEL and plan.keep_special_tokens
    assert plan.constraint.reasoning_start == 105 and plan.constraint.reasoning_end == [[106]]
    assert not plan.constraint.in_reasoning
    off = plan_output(qwen, None, "<|im_start|>assistant\n<think>\n\n</think>\n\n", StructuredOutputsParams(regex="a"))
    assert off.constraint.reasoning_end == [] and off.reasoning_mode == ANSWER
    gpt = plan_output(OutputFormats.of("openai", "openai", _Tok()), None, "<|start|>assistant",
                      StructuredOutputsParams(json_object=True))
    assert gpt.constraint.in_reasoning and gpt.constraint.reasoning_end == [[100, *map(ord, "final"), 101]]
    assert gpt.new_parser().message("<|channel|>final<|message|>{}")["content"] == "{}"
    from moeserve.engine.builtin_model import build_tokenizer

    with caplog.at_level("WARNING"):
        hermes = OutputFormats.of("hermes", None, build_tokenizer())  # not Qwen's tokenizer: warned, not kept
    assert "<tool_call> is not one token" in caplog.text and not hermes.keep_special_tokens
