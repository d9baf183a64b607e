"""Earlier tool calls reach the chat template with their arguments as an object, as vLLM hands them over."""
from __future__ import annotations

import pytest

from moeserve.engine.chat_prompt import template_turns

ITERATES = ("{% for m in messages %}{% for c in m.get('tool_calls', []) %}{{ c.function.name }}("
            "{% for k, v in c.function.arguments.items() %}{{ k }}={{ v }};{% endfor %}){% endfor %}{% endfor %}")


def _history(arguments):
    return [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]


def _render(turns) -> str:
    from jinja2 import Environment

    return Environment().from_string(ITERATES).render(messages=turns)


def test_object_arguments_are_parsed_for_the_template():
    turns = template_turns(_history('{"city": "Paris"}'))
    assert turns[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert _render(turns) == "get(city=Paris;)"
    assert template_turns(_history({"city": "Rome"}))[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Rome"}


@pytest.mark.parametrize("bad", ['{"city": "Par', "42", "[1, 2]", "", None, "true"])
def test_arguments_that_are_no_object_become_empty_so_later_turns_render(bad):
    # a model's broken call stays in the history: as text, a template iterating it failed every later turn
    turns = template_turns(_history(bad))
    assert turns[1]["tool_calls"][0]["function"]["arguments"] == {}
    assert _render(turns) == "get()"
