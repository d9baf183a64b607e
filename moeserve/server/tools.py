"""The chat endpoint's `tools` and `tool_choice` (OpenAI's function tools).

`tool_choice` "none": the tools reach the chat template, nothing is parsed as a call. "auto" (the
default when tools are given): the model decides, and the server's `--tool-call-parser` finds the calls
in its text. "required" and a named function: a grammar built from the tools' parameter schemas
(`forced_schema`) makes the model write calls, as JSON read back by parsers/forced.py, so they hold
for any model: "required" writes `[{"name": ..., "parameters": {...}}, ...]`, a named function its
arguments object alone. "required" writes one call unless the request says `parallel_tool_calls: true`
(OpenAI's default is true): a small model that never closes the list writes calls until max_tokens
runs out, and the last one is cut.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from moeserve.engine import chat_prompt
from moeserve.server.api_errors import bad_request, clip, refusing

_NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}  # OpenAI: parameters omitted


@dataclass
class ToolRequest:
    tools: list[dict[str, Any]]  # as the client sent them (OpenAI's shape), checked
    choice: str  # "none", "auto", "required", or "function" with `name`
    name: str | None = None
    parallel: bool = True
    one_call: bool = False  # parallel_tool_calls: false (OpenAI's "at most one call"; "auto" keeps the first)

    @property
    def forced(self) -> bool:
        return self.choice in ("required", "function")

    def parameters(self, name: str) -> dict[str, Any]:
        fn = next(t["function"] for t in self.tools if t["function"]["name"] == name)
        return fn.get("parameters") or _NO_PARAMETERS


def tool_request(req: Any, tool_call_parser: str | None) -> ToolRequest | None:
    """The request's tools and choice, checked; None when it has no tools."""
    choice = req.tool_choice
    if not req.tools:
        if choice not in (None, "none"):
            raise bad_request("tool_choice needs tools", param="tool_choice")
        return None
    names = refusing(chat_prompt.check_tools, req.tools)
    # OpenAI's default is true; here several calls under "required" are opt-in: a model that never
    # closes the list (the built-in one) would write calls until max_tokens, the last one cut
    parallel = req.parallel_tool_calls is True
    if choice is None or choice == "auto":
        if tool_call_parser is None:
            raise bad_request("tool_choice 'auto' (the default with tools) needs the server started with "
                              "--tool-call-parser (hermes, deepseek_v3, glm45, openai); 'required' or a named function "
                              "work with any model", param="tool_choice")
        return ToolRequest(req.tools, "auto", parallel=parallel, one_call=req.parallel_tool_calls is False)
    if choice in ("none", "required"):
        return ToolRequest(req.tools, choice, parallel=parallel)
    name = _named(choice)
    if name not in names:
        raise bad_request(f"tool_choice names the function '{clip(name)}', which is not in tools", param="tool_choice")
    return ToolRequest(req.tools, "function", name, parallel)


def _named(choice: Any) -> str:
    """The function a named tool_choice asks for ({"type": "function", "function": {"name": ...}})."""
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
    raise bad_request("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                      "{\"name\": ...}}", param="tool_choice")


def forced_schema(tools: ToolRequest) -> dict[str, Any]:
    """The JSON schema the output of a "required" or named tool_choice follows."""
    if tools.choice == "function":
        return tools.parameters(tools.name)
    defs, cases = {}, []
    for i, tool in enumerate(tools.tools):
        name = tool["function"]["name"]
        defs[f"tool{i}"] = _rebase(copy.deepcopy(tools.parameters(name)), f"#/$defs/tool{i}")
        cases.append({"type": "object", "properties": {"name": {"type": "string", "enum": [name]},
                                                       "parameters": {"$ref": f"#/$defs/tool{i}"}},
                      "required": ["name", "parameters"], "additionalProperties": False})
    schema = {"type": "array", "minItems": 1, "items": {"anyOf": cases}, "$defs": defs}
    if not tools.parallel:
        schema["maxItems"] = 1
    return schema


def _rebase(schema: Any, base: str) -> Any:
    """A tool's schema moved under `base`: its own references ("#", "#/$defs/X", ...) point there."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                node["$ref"] = base + ref[1:]
            stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default", "examples"))
        elif isinstance(node, list):
            stack.extend(node)
    return schema
