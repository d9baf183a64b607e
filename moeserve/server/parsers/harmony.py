"""`openai`: gpt-oss's harmony format, for both reasoning and tool calls.

The prompt ends with `<|start|>assistant`; the output is messages, each a header and a body:

    <|channel|>analysis<|message|>The user wants the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
    ... or <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

(without the newlines). The `analysis` channel is reasoning; `final` is the answer; `commentary`
addressed `to=functions.NAME` (in the channel part or the role part of the header) is a call of NAME
with the body as its arguments, and without a recipient a preamble shown as content. Other
recipients (the built-in browser and python tools) are not function calls and are left out. Text
outside any message (a model not writing harmony) is content. The output's last token (`<|call|>`,
`<|return|>`) ends generation and is not in the text; a message then ends with the text. Harmony's
markers are special tokens: a server using these parsers keeps special tokens in the text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from moeserve.server.parsers.base import ParsedCall, ToolParse, held_back

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
TERMINATORS = ("<|end|>", "<|call|>", "<|return|>")
MARKERS = (START, CHANNEL, MESSAGE, "<|constrain|>", *TERMINATORS)
FINAL_HEADER = "<|channel|>final<|message|>"  # reasoning is over once the output holds it
_RECIPIENT = re.compile(r"to=(\S+?)(?=\s|<\||$)")


@dataclass
class Message:
    start: int  # its first character in the text
    channel: str | None  # None: text outside any harmony message
    recipient: str | None
    body_start: int
    body_end: int | None = None  # None while its body is still being written
    end: int | None = None  # after its terminator


class HarmonyReader:
    """The messages of a growing text; complete ones are read once."""

    def __init__(self) -> None:
        self.done: list[Message] = []
        self._pos = 0

    def read(self, text: str, final: bool) -> tuple[list[Message], Message | None]:
        """(complete messages, the one being written or None). A message whose header is unfinished
        is not returned: its channel is not known yet."""
        while self._pos < len(text):
            message = self._message(text, self._pos, final)
            if message is None:
                return self.done, None
            if message.end is None:
                return self.done, message
            self.done.append(message)
            self._pos = message.end
        return self.done, None

    def _message(self, text: str, pos: int, final: bool) -> Message | None:
        for terminator in TERMINATORS:  # a stray terminator between messages
            if text.startswith(terminator, pos):
                return Message(pos, None, None, pos, pos, pos + len(terminator))
        if text.startswith(START, pos) or text.startswith(CHANNEL, pos):
            header_end = text.find(MESSAGE, pos)
            if header_end == -1:  # an unfinished header: nothing yet, nothing at all at the end
                return Message(pos, "", None, len(text), len(text), len(text)) if final else None
            header = text[pos:header_end]
            channel_part = header.split(CHANNEL, 1)[1] if CHANNEL in header else ""
            channel = channel_part.split("<|", 1)[0].strip().split(" ", 1)[0] or None
            found = _RECIPIENT.search(header)
            return self._body(text, Message(pos, channel or "", found.group(1) if found else None,
                                            header_end + len(MESSAGE)), final)
        return self._body(text, Message(pos, None, None, pos), final)

    @staticmethod
    def _body(text: str, message: Message, final: bool) -> Message:
        ends = [(i, m) for m in (START, CHANNEL, *TERMINATORS) if (i := text.find(m, message.body_start)) != -1]
        if ends:
            i, marker = min(ends)
            message.body_end, message.end = i, i + (len(marker) if marker in TERMINATORS else 0)
        elif final:
            message.body_end = message.end = len(text)
        return message


def body(text: str, message: Message) -> str:
    """A message's body so far (less a suffix that may begin a marker, while it is being written)."""
    if message.body_end is not None:
        return text[message.body_start:message.body_end]
    piece = text[message.body_start:]
    return piece[: len(piece) - held_back(piece, MARKERS)]


class HarmonyReasoningParser:
    """Reasoning: the analysis messages' bodies. The rest: every other message as written (their
    headers kept, for the tool parser)."""

    def __init__(self) -> None:
        self._reader = HarmonyReader()

    def split(self, text: str, final: bool = False) -> tuple[str, str]:
        done, current = self._reader.read(text, final)
        reasoning, rest = [], []
        for m in done + ([current] if current is not None else []):
            if m.channel == "analysis":
                reasoning.append(body(text, m))
            elif m.end is not None:
                rest.append(text[m.start:m.end])
            else:
                rest.append(text[m.start:m.body_start] + body(text, m))
        return "".join(reasoning), "".join(rest)


class HarmonyToolParser:
    """Content: final messages, preambles (commentary without a recipient) and text outside messages.
    Calls: messages addressed to functions.NAME."""

    def __init__(self, tools: list[dict[str, Any]] | None = None, calls: bool = True):
        self._reader = HarmonyReader()
        self.calls = calls  # False: the final answer only (no tools offered), calls left out

    def parse(self, text: str, final: bool = False) -> ToolParse:
        done, current = self._reader.read(text, final)
        out = ToolParse()
        for m in done + ([current] if current is not None else []):
            if m.recipient is not None and m.recipient.startswith("functions."):
                if not self.calls:
                    continue
                args = body(text, m).strip()
                out.calls.append(ParsedCall(m.recipient[len("functions."):], args or ("{}" if m.end else ""),
                                            complete=m.end is not None))
            elif m.recipient is None and m.channel in (None, "final", "commentary"):
                out.content += body(text, m)
        return out
