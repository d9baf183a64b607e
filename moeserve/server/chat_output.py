"""How a chat request's output is read: which parsers split it into reasoning, content and tool
calls, and where a structured output's grammar starts (after the reasoning).

`OutputFormats` is the server's choice (`--tool-call-parser`, `--reasoning-parser`), checked against
its tokenizer once; `plan_output` turns it, the request's tools and constraint and the rendered
prompt into a `ChoicePlan`: the constraint to send (with the reasoning gate filled in), whether the
text must keep special tokens (harmony's markers are special tokens, which detokenizing would
drop), and a fresh ChoiceParser per choice.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from moeserve.sampling_params import StructuredOutputsParams
from moeserve.server.parsers import TOOL_MARKERS, TOOL_PARSERS
from moeserve.server.parsers.forced import NamedCallParser, RequiredCallsParser
from moeserve.server.parsers.reasoning import ANSWER, REASONING_FAMILIES
from moeserve.server.parsers.stream import ChoiceParser
from moeserve.server.tools import ToolRequest

logger = logging.getLogger("moeserve.server")


@dataclass(frozen=True)
class OutputFormats:
    tool_parser: str | None = None
    reasoning: Any = None  # a family of parsers/reasoning.py
    tokenizer: Any = None
    keep_special_tokens: bool = False  # some marker of a chosen parser is a special token

    @classmethod
    def of(cls, tool_parser: str | None, reasoning_parser: str | None, tokenizer: Any) -> "OutputFormats":
        reasoning = REASONING_FAMILIES[reasoning_parser] if reasoning_parser else None
        markers = (TOOL_MARKERS[tool_parser] if tool_parser else ()) + (reasoning.markers if reasoning else ())
        keep = False
        for marker in markers if tokenizer is not None else ():
            ids = tokenizer.encode(marker, add_special_tokens=False)
            if len(ids) != 1:
                logger.warning("%s is not one token of this tokenizer: is the model of the family --tool-call-parser %s / "
                               "--reasoning-parser %s read?", marker, tool_parser, reasoning_parser)
            keep = keep or tokenizer.decode(ids, skip_special_tokens=True) != marker
        return cls(tool_parser, reasoning, tokenizer, keep)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)


@dataclass
class ChoicePlan:
    constraint: StructuredOutputsParams | None
    keep_special_tokens: bool
    reasoning_mode: str | None  # where the output starts (parsers/reasoning.py), None without a reasoning parser
    formats: OutputFormats
    tools: ToolRequest | None

    @property
    def parsed(self) -> bool:
        """Whether the output goes through parsers (else it is all content, as before)."""
        return self.reasoning_mode is not None or (self.tools is not None and self.tools.choice != "none")

    def new_parser(self) -> ChoiceParser:
        reasoning = self.formats.reasoning.parser(self.reasoning_mode) if self.reasoning_mode is not None else None
        one = self.tools is not None and self.tools.choice == "auto" and self.tools.one_call
        return ChoiceParser(reasoning, self._tool_parser(reasoning), max_calls=1 if one else None)

    def _tool_parser(self, reasoning: Any) -> Any:
        tools = self.tools
        if tools is not None and tools.choice == "required":
            return RequiredCallsParser()
        if tools is not None and tools.choice == "function":
            return NamedCallParser(tools.name)
        if tools is not None and tools.choice == "auto":
            return TOOL_PARSERS[self.formats.tool_parser](tools.tools)
        if self.formats.reasoning is not None and self.formats.reasoning.name == "openai":
            return TOOL_PARSERS["openai"](None, calls=False)  # harmony's answer is its final channel
        return None


def plan_output(formats: OutputFormats, tools: ToolRequest | None, prompt: str,
                constraint: StructuredOutputsParams | None) -> ChoicePlan:
    """The plan of a chat request whose template rendered `prompt`."""
    mode = formats.reasoning.mode(prompt) if formats.reasoning is not None else None
    if constraint is not None and mode is not None and mode != ANSWER:
        constraint = dataclasses.replace(constraint, **formats.reasoning.gate(mode, formats.encode))
    parsing = mode is not None or (tools is not None and tools.choice == "auto")
    return ChoicePlan(constraint, formats.keep_special_tokens and parsing, mode, formats, tools)
