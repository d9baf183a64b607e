"""`deepseek_v3`: tool calls as DeepSeek-V3 and R1 write them (one block of calls, each typed, the
arguments in a JSON code fence):

    Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time
    ```json
    {"zone": "CET"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

and as DeepSeek-V3.1 writes them, without the type and the fence:
`<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>`. The text before the
block is content; arguments stream as written, less the fence.
"""
from __future__ import annotations

from typing import Any

from moeserve.server.parsers.base import ParsedCall, held_back
from moeserve.server.parsers.regions import RegionToolParser

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
FENCE_OPEN, FENCE_CLOSE = "```json\n", "\n```"


class DeepSeekV3ToolParser(RegionToolParser):
    markers = (CALL_BEGIN, CALL_END)
    ignore = (CALLS_BEGIN, CALLS_END)

    def __init__(self, tools: list[dict[str, Any]] | None = None):
        super().__init__(CALL_BEGIN, CALL_END)

    def read_region(self, text: str, start: int, stop: int | None, final: bool) -> ParsedCall | None:
        body = text[start:stop] if stop is not None else text[start:]
        closed = stop is not None or final
        sep = body.find(SEP)
        if sep == -1:
            return None
        head, rest = body[:sep].strip(), body[sep + len(SEP):]
        if head != "function":  # V3.1: the name, then the arguments as they are
            args = rest if closed else rest[: len(rest) - held_back(rest, (CALL_END,))]
            return ParsedCall(head, args.strip() if closed else args.lstrip()) if head else None
        newline = rest.find("\n")
        if newline == -1:
            return ParsedCall(rest.strip(), "{}") if closed and rest.strip() else None
        call = ParsedCall(rest[:newline].strip())
        args = rest[newline + 1:]
        if args.startswith(FENCE_OPEN):
            args = args[len(FENCE_OPEN):]
        elif FENCE_OPEN.startswith(args) and not closed:
            return call  # the fence is still being written
        end = args.find(FENCE_CLOSE)
        if end != -1:
            args = args[:end]
        elif closed:
            args = args.removesuffix("```").rstrip("\n")
        else:
            args = args[: len(args) - held_back(args, (FENCE_CLOSE, CALL_END))]
        call.arguments = args
        return call
