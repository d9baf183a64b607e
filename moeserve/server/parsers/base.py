"""What output parsers share: their results, the held-back marker suffix, and an incremental JSON scanner.

Every parser reads the text a choice has streamed so far (it only grows) and says what it holds:
`parse(text, final)`. Between calls a parser keeps a cursor past what is settled, so a long output is
read once, not once per step. While `final` is False, text that may still turn into a marker (a
suffix that begins one) is held back; with `final` everything is settled.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ParsedCall:
    """One tool call as far as it has streamed: `name` None until known; `arguments` is the JSON text
    of the arguments so far (it only grows); `complete` once its end was read."""

    name: str | None = None
    arguments: str = ""
    complete: bool = False


@dataclass
class ToolParse:
    content: str = ""
    calls: list[ParsedCall] = field(default_factory=list)


def held_back(text: str, markers: tuple[str, ...]) -> int:
    """How many characters at the end of `text` begin one of `markers` (0 if none): not yet safe to
    show as plain text, as the next characters may complete the marker."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best


def function_names(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """name -> parameters schema of the request's function tools (OpenAI's `tools` shape)."""
    out = {}
    for tool in tools or []:
        fn = tool.get("function") or {}
        if isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters") or {}
    return out


class JsonValue:
    """Finds where one JSON value ends in a growing text, reading each character once.

    `advance(text)` reads on from where it stopped; `end` is the index after the value once it is
    complete (a scalar completes at the character after it, or at the end of a final text). Nothing
    is validated beyond brackets and strings: the text is the model's, shown as written."""

    def __init__(self, start: int):
        self.start = start  # the value's first non-space character, or where to look for it
        self.pos = start
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.kind = ""  # "" until the first character: "{" "[" '"' or "scalar"
        self.end: int | None = None

    def advance(self, text: str, final: bool = False) -> None:
        while self.end is None and self.pos < len(text):
            ch = text[self.pos]
            if not self.kind:
                if ch in " \t\r\n":
                    self.pos += 1
                    self.start = self.pos
                    continue
                self.kind = ch if ch in '{["' else "scalar"
                self.in_string = ch == '"'
                self.depth = 1 if ch in "{[" else 0
                self.pos += 1
                continue
            self._step(ch)
        if final and self.end is None and self.kind:
            self.end = len(text)

    def _step(self, ch: str) -> None:
        if self.kind == "scalar":
            if ch in ",}] \t\r\n":
                self.end = self.pos
                return
        elif self.in_string:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = False
                if self.kind == '"':
                    self.end = self.pos + 1
        elif ch == '"':
            self.in_string = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            if self.depth == 0:
                self.end = self.pos + 1
        self.pos += 1


class JsonMembers:
    """The top-level members of one JSON object in a growing text: key -> JsonValue, in order.
    `end` is the index after its closing brace; `failed` when the text is not an object."""

    def __init__(self, start: int):
        self.pos = start
        self.state = "open"  # open -> key -> colon -> value -> comma -> ... -> done | failed
        self.members: dict[str, JsonValue] = {}
        self._key: JsonValue | None = None
        self._value: JsonValue | None = None
        self.end: int | None = None
        self.failed = False

    def advance(self, text: str, final: bool = False) -> None:
        while self.end is None and not self.failed and self.pos < len(text):
            if self._value is not None:
                self._value.advance(text, final)
                if self._value.end is None:
                    return
                self.pos, self._value, self.state = self._value.end, None, "comma"
                continue
            ch = text[self.pos]
            if ch in " \t\r\n":
                self.pos += 1
            elif self.state == "open":
                self._expect(ch == "{", "key")
            elif self.state == "key":
                if ch == "}" and not self.members:
                    self.end = self.pos + 1
                    return
                self._read_key(text)
            elif self.state == "colon":
                self._expect(ch == ":", "value")
                if self.state == "value":
                    self._value = self.members[self._key_name] = JsonValue(self.pos)
            elif self.state == "comma":
                if ch == "}":
                    self.end = self.pos + 1
                    return
                self._expect(ch == ",", "key")
            else:
                self.failed = True

    def _expect(self, ok: bool, state: str) -> None:
        if ok:
            self.pos += 1
            self.state = state
        else:
            self.failed = True

    def _read_key(self, text: str) -> None:
        if self._key is None:
            if text[self.pos] != '"':
                self.failed = True
                return
            self._key = JsonValue(self.pos)
        self._key.advance(text)
        if self._key.end is None:
            self.pos = len(text)
            return
        try:
            self._key_name = json.loads(text[self._key.start:self._key.end])
        except ValueError:
            self.failed = True
            return
        self.pos, self._key, self.state = self._key.end, None, "colon"

    def raw(self, text: str, key: str) -> tuple[str, bool] | None:
        """(the value's text so far, complete) of member `key`, or None if it has not begun."""
        value = self.members.get(key)
        if value is None or not value.kind:
            return None
        end = value.end if value.end is not None else len(text)
        return text[value.start:end], value.end is not None

    def string(self, text: str, key: str) -> str | None:
        """Member `key` decoded once complete, if it is a string (a tool's name)."""
        raw = self.raw(text, key)
        if raw is None or not raw[1]:
            return None
        try:
            value = json.loads(raw[0])
        except ValueError:
            return None
        return value if isinstance(value, str) else None
