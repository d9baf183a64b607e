"""One choice's output as the client sees it: reasoning, content and tool calls, and the deltas of
each as it streams (`delta.reasoning_content`, `delta.content`, `delta.tool_calls`). The reasoning is
under both of its names: `reasoning_content` (DeepSeek's API's, which older clients read) and
`reasoning` (the one vLLM answers with, 0.32 with it alone, which newer clients read).

    parser = ChoiceParser(reasoning, tools)          # either may be None
    delta = parser.delta(text_streamed_so_far)       # what is new: {"content": ..., "tool_calls": [...]}
    message = parser.message(final_text)             # the whole: content, reasoning_content, tool_calls

The reasoning parser splits the text first and the tool parser reads what is left. Each call gets its
id when its name is first known; the first delta of a call carries id, type and name, the later ones
only more of its arguments (as OpenAI streams them). A delta never takes back what one before it
said, so the deltas add up to the message.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from moeserve.server.parsers.base import ParsedCall, ToolParse


class ReasoningSplit(Protocol):
    def split(self, text: str, final: bool = False) -> tuple[str, str]: ...


class ToolCalls(Protocol):
    def parse(self, text: str, final: bool = False) -> ToolParse: ...


@dataclass
class _Sent:
    reasoning: int = 0
    content: int = 0
    ids: list[str] = field(default_factory=list)
    arguments: list[int] = field(default_factory=list)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ChoiceParser:
    def __init__(self, reasoning: ReasoningSplit | None = None, tools: ToolCalls | None = None,
                 max_calls: int | None = None):
        self.reasoning_parser = reasoning
        self.tool_parser = tools
        self.max_calls = max_calls  # parallel_tool_calls: false keeps the first call (as vLLM does)
        self._sent = _Sent()

    def parse(self, text: str, final: bool = False) -> tuple[str, str, list[ParsedCall]]:
        """(reasoning, content, calls) of the text so far."""
        reasoning, rest = self.reasoning_parser.split(text, final) if self.reasoning_parser else ("", text)
        if self.tool_parser is None:
            return reasoning, rest, []
        parsed = self.tool_parser.parse(rest, final)
        return reasoning, parsed.content, parsed.calls[: self.max_calls]

    def delta(self, text: str, final: bool = False) -> dict[str, Any]:
        """What the text adds to the deltas sent before: reasoning_content, content and tool_calls,
        each only when there is something new."""
        reasoning, content, calls = self.parse(text, final)
        out: dict[str, Any] = {}
        sent = self._sent
        if len(reasoning) > sent.reasoning:
            out["reasoning_content"] = out["reasoning"] = reasoning[sent.reasoning:]
            sent.reasoning = len(reasoning)
        if len(content) > sent.content:
            out["content"] = content[sent.content:]
            sent.content = len(content)
        tool_deltas = []
        for index, call in enumerate(calls):
            if call.name is None:
                break
            if index == len(sent.ids):
                sent.ids.append(new_call_id())
                sent.arguments.append(len(call.arguments))
                tool_deltas.append({"index": index, "id": sent.ids[index], "type": "function",
                                    "function": {"name": call.name, "arguments": call.arguments}})
            elif len(call.arguments) > sent.arguments[index]:
                tool_deltas.append({"index": index, "function": {"arguments": call.arguments[sent.arguments[index]:]}})
                sent.arguments[index] = len(call.arguments)
        if tool_deltas:
            out["tool_calls"] = tool_deltas
        return out

    def message(self, text: str) -> dict[str, Any]:
        """The whole output: content (None when calls leave only whitespace), reasoning_content (when
        a reasoning parser runs) and tool_calls (when there are any), with the ids the stream gave."""
        reasoning, content, calls = self.parse(text, final=True)
        calls = [c for c in calls if c.name is not None]
        while len(self._sent.ids) < len(calls):
            self._sent.ids.append(new_call_id())
        message: dict[str, Any] = {"role": "assistant", "content": None if calls and not content.strip() else content}
        if self.reasoning_parser is not None:
            message["reasoning_content"] = message["reasoning"] = reasoning or None
        if calls:
            message["tool_calls"] = [{"id": self._sent.ids[i], "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}}
                                     for i, c in enumerate(calls)]
        return message
