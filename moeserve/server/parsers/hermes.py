"""`hermes`: tool calls as Hermes and Qwen (2.5, 3) write them, one JSON object per call in tags:

    I will look that up.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
    <tool_call>
    {"name": "get_time", "arguments": {"zone": "CET"}}
    </tool_call>

The text before the first call is content. A call's arguments stream as the model writes them (the
raw JSON text of "arguments", or "parameters" as some fine-tunes write it) once its name is known; a
block that is not such an object stays content.
"""
from __future__ import annotations

from typing import Any

from moeserve.server.parsers.base import JsonMembers, ParsedCall, ToolParse, held_back
from moeserve.server.parsers.regions import RegionToolParser

START, END = "<tool_call>", "</tool_call>"
_ARG_KEYS = ("arguments", "parameters")


class HermesToolParser(RegionToolParser):
    markers = (START, END)

    def __init__(self, tools: list[dict[str, Any]] | None = None):
        super().__init__(START, END)
        self._body: JsonMembers | None = None

    def begin_region(self, text: str, start: int) -> None:
        self._body = JsonMembers(start)

    def read_region(self, text: str, start: int, stop: int | None, final: bool) -> ParsedCall | None:
        body = self._body
        inside = text if stop is None else text[:stop]
        body.advance(inside, final or stop is not None)
        name = body.string(inside, "name")
        if body.failed or name is None:
            return None
        call = ParsedCall(name)
        for key in _ARG_KEYS:
            raw = body.raw(inside, key)
            if raw is not None:
                call.arguments = raw[0] if raw[1] else raw[0][: len(raw[0]) - held_back(raw[0], (END,))]
                break
        call.complete = stop is not None or final
        if call.complete and not call.arguments and body.end is not None:  # a whole call without arguments
            call.arguments = "{}"
        return call
