"""The output of `tool_choice` "required" or a named function: JSON whose shape a grammar enforced
(server/tools.py builds it), read back as tool calls, whatever the model family.

Named: the output is the function's arguments. Required: a JSON array of calls,
`[{"name": "get_weather", "parameters": {"city": "Paris"}}, ...]`; each call's arguments are the text
of its "parameters", streamed as written once its name is complete.
"""
from __future__ import annotations

from moeserve.server.parsers.base import JsonMembers, ParsedCall, ToolParse


class NamedCallParser:
    def __init__(self, name: str):
        self.name = name

    def parse(self, text: str, final: bool = False) -> ToolParse:
        return ToolParse("", [ParsedCall(self.name, text.strip(), complete=final)])


class RequiredCallsParser:
    def __init__(self) -> None:
        self._items: list[JsonMembers] = []
        self._pos = 0
        self._opened = False

    def parse(self, text: str, final: bool = False) -> ToolParse:
        while self._pos < len(text):
            item = self._items[-1] if self._items and self._items[-1].end is None else None
            if item is not None:
                item.advance(text, final)
                if item.end is None:
                    break
                self._pos = item.end
                continue
            ch = text[self._pos]
            if ch == "{" and self._opened:
                self._items.append(JsonMembers(self._pos))
                continue
            self._opened = self._opened or ch == "["
            self._pos += 1  # "[", ",", whitespace and "]"
        calls = []
        for item in self._items:
            name = item.string(text, "name")
            if name is None:
                break
            raw = item.raw(text, "parameters")
            calls.append(ParsedCall(name, raw[0] if raw else "", complete=item.end is not None or final))
        return ToolParse("", calls)
