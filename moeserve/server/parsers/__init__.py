"""Output parsers of the chat endpoint: tool calls (`--tool-call-parser`) and reasoning
(`--reasoning-parser`), by model family, read from the text as it streams (docs/structured_outputs.md).

Tool parsers: `hermes` (Hermes, Qwen2.5, Qwen3), `deepseek_v3` (DeepSeek-V3, R1, V3.1), `glm45`
(GLM-4.5, 4.6), `openai` (gpt-oss harmony). Reasoning parsers: `deepseek_r1`, `qwen3`, `glm45`, `openai`.
"""
from __future__ import annotations

from typing import Any

from moeserve.errors import ConfigError
from moeserve.server.parsers.deepseek_v3 import DeepSeekV3ToolParser
from moeserve.server.parsers.glm45 import Glm45ToolParser
from moeserve.server.parsers.harmony import HarmonyToolParser
from moeserve.server.parsers.hermes import HermesToolParser
from moeserve.server.parsers.reasoning import REASONING_FAMILIES

TOOL_PARSERS: dict[str, Any] = {
    "hermes": HermesToolParser,
    "deepseek_v3": DeepSeekV3ToolParser,
    "glm45": Glm45ToolParser,
    "openai": HarmonyToolParser,
}
# each family's markers: a server checks that its tokenizer has them as tokens (server/output_formats.py)
TOOL_MARKERS: dict[str, tuple[str, ...]] = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "deepseek_v3": ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"),
    "glm45": ("<tool_call>", "</tool_call>", "<arg_key>", "<arg_value>"),
    "openai": ("<|channel|>", "<|message|>", "<|start|>", "<|call|>"),
}
REASONING_CHOICES = tuple(REASONING_FAMILIES)


def check_parser_names(tool_parser: str | None, reasoning_parser: str | None) -> None:
    """ConfigError naming the valid choices for an unknown --tool-call-parser / --reasoning-parser."""
    if tool_parser is not None and tool_parser not in TOOL_PARSERS:
        raise ConfigError(f"--tool-call-parser {tool_parser!r} is not one of: {', '.join(TOOL_PARSERS)}")
    if reasoning_parser is not None and reasoning_parser not in REASONING_FAMILIES:
        raise ConfigError(f"--reasoning-parser {reasoning_parser!r} is not one of: {', '.join(REASONING_FAMILIES)}")
