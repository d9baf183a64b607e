"""`glm45`: tool calls as GLM-4.5 and GLM-4.6 write them, the name then key/value pairs in tags:

    Let me check.<tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Beijing</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

Values are text: a parameter the tool's schema types "string" keeps its text as written; any other
is read as JSON (3, true, [1, 2]) and kept as a string when it is not JSON. The arguments are the
JSON object of the pairs, built as they arrive: a string value streams while it is written, other
values once their pair is complete.
"""
from __future__ import annotations

import json
from typing import Any

from moeserve.server.parsers.base import ParsedCall, function_names, held_back
from moeserve.server.parsers.regions import RegionToolParser

START, END = "<tool_call>", "</tool_call>"
KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"


class Glm45ToolParser(RegionToolParser):
    markers = (START, END)

    def __init__(self, tools: list[dict[str, Any]] | None = None):
        super().__init__(START, END)
        self.schemas = function_names(tools)

    def read_region(self, text: str, start: int, stop: int | None, final: bool) -> ParsedCall | None:
        body = text[start:stop] if stop is not None else text[start:]
        closed = stop is not None or final
        cut = [i for i in (body.find("\n"), body.find(KEY)) if i != -1]
        if not cut and not closed:
            return None
        name = body[: min(cut) if cut else len(body)].strip()
        if not name:
            return None
        call = ParsedCall(name, "{")
        pos, pairs = (min(cut) if cut else len(body)), []
        while True:
            k = body.find(KEY, pos)
            k_end = body.find(KEY_END, k) if k != -1 else -1
            v = body.find(VALUE, k_end) if k_end != -1 else -1
            if v == -1:
                break
            key = body[k + len(KEY):k_end].strip()
            v_end = body.find(VALUE_END, v)
            raw = body[v + len(VALUE):] if v_end == -1 else body[v + len(VALUE):v_end]
            if v_end != -1:
                pairs.append(f"{json.dumps(key, ensure_ascii=False)}: {self._value(name, key, raw)}")
                pos = v_end + len(VALUE_END)
                continue
            if self._is_string(name, key) and not closed:  # stream the open string value
                raw = raw[: len(raw) - held_back(raw, (VALUE_END, END))]
                pairs.append(f"{json.dumps(key, ensure_ascii=False)}: \"{json.dumps(raw, ensure_ascii=False)[1:-1]}")
            elif closed:  # the region ended inside a value: take what there is
                pairs.append(f"{json.dumps(key, ensure_ascii=False)}: {self._value(name, key, raw)}")
            break
        call.arguments += ", ".join(pairs) + ("}" if closed else "")
        return call

    def _is_string(self, name: str, key: str) -> bool:
        prop = (self.schemas.get(name) or {}).get("properties", {}).get(key) or {}
        return prop.get("type") == "string"

    def _value(self, name: str, key: str, raw: str) -> str:
        if self._is_string(name, key):
            return json.dumps(raw, ensure_ascii=False)
        try:
            return json.dumps(json.loads(raw.strip()), ensure_ascii=False)
        except ValueError:
            return json.dumps(raw.strip(), ensure_ascii=False)
