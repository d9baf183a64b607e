"""Chat messages to a prompt: the chat template applied to the messages, then tokenized.

One code path for the HTTP server's /v1/chat/completions and /tokenize (server/chat.py, which turns
its errors into 400s) and `LLM.chat`, so the same messages give the same prompt token ids in both.
The template is the checkpoint's (the one its tokenizer loads; of named templates, transformers'
choice: "default"), else the documented default (moeserve.engine.builtin_model.CHAT_TEMPLATE).

Messages are plain dicts, as OpenAI's API takes them: "role" (system, developer, user, assistant,
tool), "content" (a str, or a list of {"type": "text", "text": ...} parts; an assistant's
{"type": "refusal", "refusal": ...} parts read as text; only an assistant turn may omit it), and
optionally "name", "tool_calls", "tool_call_id", "function_call", which reach the template as given
(a tool call's arguments as an object, {} where they are not one, as vLLM hands them to templates), and on an
assistant turn its earlier reasoning as "reasoning" or "reasoning_content" (vLLM's name and the older
one), which reaches the template under both names, as vLLM hands it over (interleaved thinking).
"""
from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from moeserve.engine.builtin_model import CHAT_TEMPLATE

log = logging.getLogger(__name__)

ROLES = ("system", "developer", "user", "assistant", "tool")
# OpenAI's rule for a response format's JSON schema name: "a-z, A-Z, 0-9, or underscores and dashes, with a
# maximum length of 64". Function names are taken more loosely (MAX_TOOL_NAME_CHARS, no spaces), as vLLM takes
# them: tool sets written for open models (MCP bridges among them) use dots and longer names
MAX_TOOL_NAME_CHARS = 256
OPENAI_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# apply_chat_template's own arguments: chat_template_kwargs may add template variables, not set these
RESERVED_TEMPLATE_KWARGS = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs",
})
_OPTIONAL_FIELDS = {"name": str, "tool_calls": list, "tool_call_id": str, "function_call": dict, "reasoning": str,
                    "reasoning_content": str}
_REASONING = ("reasoning", "reasoning_content")  # an assistant turn's reasoning: vLLM's name, and the older one


class ChatPromptError(ValueError):
    """Messages, tools or template variables the template cannot take; `param` names the field
    (`messages.1.content`), as the HTTP API's error does."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def _clip(value: object, limit: int = 40) -> str:  # a client's value quoted in a message
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_message_types(messages: Any) -> None:
    """The shape the HTTP API's schema checks (server/protocol.py), for messages from Python: a
    non-empty list of dicts with a known role, content a str, None or a list of part dicts, and no
    other keys than those of the module docstring."""
    if not isinstance(messages, list) or not messages:
        raise ChatPromptError(f"messages must be a non-empty list of {{'role', 'content'}} dicts, got "
                              f"{_clip(repr(messages))}", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ChatPromptError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}",
                                  f"messages.{i}")
        unknown = sorted(map(str, set(m) - {"role", "content", *_OPTIONAL_FIELDS}))
        if unknown:
            raise ChatPromptError(f"messages[{i}] has unknown keys {unknown}", f"messages.{i}")
        if m.get("role") not in ROLES:
            raise ChatPromptError(f"messages[{i}]['role'] must be one of {', '.join(ROLES)}, got "
                                  f"{_clip(repr(m.get('role')))}", f"messages.{i}.role")
        content = m.get("content")
        if not (content is None or isinstance(content, str)
                or (isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content))):
            raise ChatPromptError(f"messages[{i}]['content'] must be a string or a list of content parts "
                                  "({'type': 'text', 'text': ...})", f"messages.{i}.content")
        for key, kind in _OPTIONAL_FIELDS.items():
            if m.get(key) is not None and not isinstance(m[key], kind):
                raise ChatPromptError(f"messages[{i}]['{key}'] must be a {kind.__name__}, got {type(m[key]).__name__}",
                                      f"messages.{i}.{key}")


def check_messages(messages: Sequence[dict[str, Any]], add_generation_prompt: bool, continue_final_message: bool) -> None:
    """Refuses what the template cannot take: missing content, parts other than text (and an
    assistant's refusal), continuing a final message while also opening a new assistant turn."""
    if continue_final_message and add_generation_prompt:
        raise ChatPromptError("continue_final_message needs add_generation_prompt: false", "continue_final_message")
    for i, m in enumerate(messages):
        content = m.get("content")
        if content is None and m["role"] != "assistant":  # OpenAI: only an assistant turn may omit content
            raise ChatPromptError(f"messages[{i}] ({m['role']}) has no content", f"messages.{i}.content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            _check_part(m["role"], part, f"messages[{i}].content[{j}]", f"messages.{i}.content.{j}")


def _check_part(role: str, part: dict[str, Any], where: str, param: str) -> None:
    """A text part with its text, or a refusal part with its refusal on an assistant message (OpenAI's
    schema allows refusals there only; vLLM reads them as text)."""
    kind = part["type"]
    if kind == "refusal" and role != "assistant":
        raise ChatPromptError(f"{where} is a 'refusal' part; only assistant messages may hold one (this is a {role} "
                              "message)", f"{param}.type")
    if kind not in ("text", "refusal"):
        raise ChatPromptError(f"{where} is a '{_clip(kind)}' part; only text parts are supported", f"{param}.type")
    if not isinstance(part.get(kind), str):
        raise ChatPromptError(f"{where} is a {kind} part without '{kind}'", f"{param}.{kind}")


def content_text(content: str | list[dict[str, Any]] | None) -> str:
    """A message's content as the template sees it: parts joined with newlines, as vLLM joins them."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.get(part["type"]) or "" for part in content)


def check_tools(tools: list[Any]) -> list[str]:
    """Refuses tools that are not OpenAI function tools of distinct names with an object schema of
    their arguments; returns their names. Whether the grammar could enforce a schema is checked where
    it becomes one (tool_choice "required" or a named function: engine/grammar.py), not here: under
    "auto" the schema only reaches the chat template, and vLLM takes any schema there."""
    if not isinstance(tools, list):
        raise ChatPromptError(f"tools must be a list of function tools, got {type(tools).__name__}", "tools")
    names: list[str] = []
    for i, tool in enumerate(tools):
        name = _check_tool(tool, i)
        if name in names:
            raise ChatPromptError(f"tools.{i}.function.name: tools.{names.index(name)} has the name '{name}' already; "
                                  "each function needs its own", f"tools.{i}.function.name")
        names.append(name)
    return names


def _check_tool(tool: Any, i: int) -> str:
    where = f"tools.{i}"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise ChatPromptError(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\": ..., \"parameters\": "
                              "{...}}} (function tools are the only kind served)", where)
    fn = tool.get("function")
    if not isinstance(fn, dict):
        raise ChatPromptError(f"{where}.function is required: {{\"name\": ..., \"parameters\": {{...}}}}", f"{where}.function")
    name = fn.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_TOOL_NAME_CHARS or any(c.isspace() for c in name):
        raise ChatPromptError(f"{where}.function.name must be a non-empty name without spaces of at most "
                              f"{MAX_TOOL_NAME_CHARS} characters, got {_clip(json.dumps(name))}", f"{where}.function.name")
    _check_parameters(fn.get("parameters"), f"{where}.function.parameters")
    return name


def _check_parameters(params: Any, where: str) -> None:
    """A function's parameters: absent, or a JSON schema of the arguments object."""
    if params is None:
        return
    if not isinstance(params, dict):
        raise ChatPromptError(f"{where} must be a JSON schema (an object)", where)
    if "type" in params and params["type"] != "object":
        raise ChatPromptError(f"{where} must describe the arguments object (\"type\": \"object\"), got \"type\": "
                              f"{_clip(json.dumps(params['type']))}", where)


def check_template_kwargs(kwargs: dict[str, Any] | None, own_arguments: Sequence[str], where: str) -> dict[str, Any]:
    """chat_template_kwargs may add template variables, not set an argument of the template call;
    `own_arguments` are those the caller takes as arguments of their own (`where` says where)."""
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ChatPromptError(f"chat_template_kwargs must be a dict, got {type(kwargs).__name__}", "chat_template_kwargs")
    for key in kwargs or {}:
        if key in own_arguments:
            raise ChatPromptError(f"set {key} as {where}, not in chat_template_kwargs", "chat_template_kwargs")
        if key in RESERVED_TEMPLATE_KWARGS:
            raise ChatPromptError(f"chat_template_kwargs may only add template variables; '{_clip(key)}' is an argument "
                                  "of the template call", "chat_template_kwargs")
    return kwargs or {}


def template_turns(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages (checked by `check_messages`) as the template sees them: role, content (a string, or
    its text parts as {"type": "text", "text": ...}: `render` gives the template the form it reads),
    and whichever of name, tool_calls, tool_call_id and function_call they carry."""
    turns = []
    for m in messages:
        turn: dict[str, Any] = {"role": m["role"], "content": _content_value(m.get("content"))}
        for key in _OPTIONAL_FIELDS:
            if m.get(key) is not None and key not in _REASONING and key != "tool_calls":
                turn[key] = m[key]
        reasoning = next((m[key] for key in _REASONING if m.get(key) is not None), None)
        if reasoning is not None and m["role"] == "assistant":  # templates read either name (GLM's, Qwen3's: the older)
            turn["reasoning"] = turn["reasoning_content"] = reasoning
        # an empty list is left out, as vLLM leaves it: templates that test for the key (DeepSeek's) took it for calls
        if m.get("tool_calls"):
            turn["tool_calls"] = [_call_for_template(call) for call in m["tool_calls"]]
        turns.append(turn)
    return turns


def _content_value(content: str | list[dict[str, Any]] | None) -> str | list[dict[str, str]]:
    """A string as it is ("" for none); parts as text parts (a refusal part's text is its refusal)."""
    if content is None or isinstance(content, str):
        return content or ""
    return [{"type": "text", "text": part.get(part["type"]) or ""} for part in content]


CONTENT_FORMATS = ("auto", "string", "openai")


@functools.lru_cache(maxsize=32)
def content_format(template: str) -> str:
    """How a template reads a message's content, as vLLM's --chat-template-content-format auto decides:
    "openai" (a list of {"type": "text", "text": ...} parts) when it loops over a message's content
    (`{% for part in message['content'] %}`, directly or through a variable set from it), else "string".
    A template that loops over parts, given a string, loops over its characters and renders no text."""
    from jinja2 import Environment, TemplateSyntaxError, nodes

    # transformers renders with loop controls ({% break %}) and its {% generation %} block tag (assistant
    # masks), which a plain environment cannot parse: the tag is dropped, its body kept
    text = re.sub(r"{%-?\s*(end)?generation\s*-?%}", "", template)
    try:
        tree = Environment(extensions=["jinja2.ext.loopcontrols"]).parse(text)
    except TemplateSyntaxError:
        return "string"  # rendering will say what is wrong with it

    def is_content(node: Any, names: set[str]) -> bool:
        if isinstance(node, nodes.Filter):  # message['content'] | selectattr(...), and the like
            return is_content(node.node, names)
        if isinstance(node, nodes.Getitem):
            return isinstance(node.arg, nodes.Const) and node.arg.value == "content"
        if isinstance(node, nodes.Getattr):
            return node.attr == "content"
        return isinstance(node, nodes.Name) and node.name in names

    names: set[str] = set()
    for assign in tree.find_all(nodes.Assign):  # {% set content = message['content'] %}
        if isinstance(assign.target, nodes.Name) and is_content(assign.node, names):
            names.add(assign.target.name)
    return "openai" if any(is_content(loop.iter, names) for loop in tree.find_all(nodes.For)) else "string"


def _as_format(turns: list[dict[str, Any]], fmt: str) -> list[dict[str, Any]]:
    """Each turn's content as a string (parts joined with newlines, as vLLM joins them) or as parts."""
    out = []
    for turn in turns:
        content = turn["content"]
        if fmt == "openai" and isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        elif fmt == "string" and not isinstance(content, str):
            content = content_text(content)
        out.append(dict(turn, content=content))
    return out


def _call_for_template(call: dict[str, Any]) -> dict[str, Any]:
    """An earlier turn's tool call with its arguments as an object, as vLLM hands them to templates
    (GLM-4.5's iterates them; Qwen3's writes either). Arguments that are not a JSON object (invalid JSON, a
    number, a list, empty) become {}, as vLLM makes them: they live in the conversation's history, and a
    template that iterates them would fail this turn and every later one."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or isinstance(fn.get("arguments"), dict):
        return call
    arguments: Any = fn.get("arguments")
    if isinstance(arguments, str) and arguments:
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = None
    if not isinstance(arguments, dict):
        log.warning("tool call %r in the conversation: arguments are not a JSON object; the template gets {}",
                    fn.get("name"))
        arguments = {}
    return {**call, "function": {**fn, "arguments": arguments}}


def render(tokenizer: Any, turns: list[dict[str, Any]], *, add_generation_prompt: bool, continue_final_message: bool,
           variables: dict[str, Any], add_special_tokens: bool = False, chat_template: str | None = None,
           check: Callable[[str], None] | None = None, content_form: str = "auto") -> tuple[str, list[int]]:
    """The template applied to `turns` (template_turns), and its token ids. `variables`: tools,
    documents and chat_template_kwargs for the template; `chat_template` replaces the checkpoint's;
    `check` sees the text before it is tokenized (and may refuse it); `content_form`: each message's
    content as a "string", as "openai" parts, or "auto" (the form the template reads: content_format).
    Raises ChatPromptError."""
    from jinja2 import TemplateError

    if chat_template is None:
        # the tokenizer's own template(s): None lets transformers pick among named ones (a dict), which it
        # cannot take as `chat_template` itself
        chat_template = None if getattr(tokenizer, "chat_template", None) else CHAT_TEMPLATE
    template = _chosen_template(tokenizer, chat_template, "tools" in variables)
    turns = _as_format(turns, content_format(template) if content_form == "auto" else content_form)
    if not knows_developer(template):
        turns = developer_as_system(turns)
    try:
        text = tokenizer.apply_chat_template(
            turns, chat_template=chat_template, add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, tokenize=False, **variables)
    except (TemplateError, TypeError) as e:  # TypeError: a template doing arithmetic on a request's value
        raise ChatPromptError(f"the chat template rejected the messages: {str(e)[:200]}", "messages") from None
    except ValueError as e:  # e.g. continue_final_message on a template that does not end the turn with its content
        if continue_final_message:
            raise ChatPromptError(f"the chat template cannot continue the final message: {str(e)[:200]}",
                                  "continue_final_message") from None
        raise ChatPromptError(f"the chat template rejected the messages: {str(e)[:200]}", "messages") from None
    if check is not None:
        check(text)
    ids = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    if not ids:
        raise ChatPromptError("the messages render to an empty prompt", "messages")
    return text, ids


def knows_developer(template: str) -> bool:
    """Whether a template names OpenAI's "developer" role (gpt-oss's does), the test vLLM applies."""
    return '"developer"' in template or "'developer'" in template


def _chosen_template(tokenizer: Any, chat_template: str | None, tools: bool) -> str:
    """The template text transformers renders: `chat_template`, else the tokenizer's own, of named ones
    "tool_use" when tools are given and it has one, else "default"."""
    if chat_template is not None:
        return chat_template
    own = tokenizer.chat_template
    if isinstance(own, dict):
        return own.get("tool_use") if tools and "tool_use" in own else own.get("default", "")
    return own


def developer_as_system(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI's "developer" messages (its newer name for system instructions) as "system" ones, for a
    template that does not know the role: rendered as written, it showed the model a role it was never
    trained on, and templates that check roles refuse it. When that leaves a system message anywhere but
    first, or more than one, they become one first message, their contents joined by blank lines
    (templates such as Qwen's take a system message first only). As vLLM renders them."""
    if not any(t["role"] == "developer" for t in turns):
        return turns
    turns = [dict(t, role="system") if t["role"] == "developer" else t for t in turns]
    systems = [i for i, t in enumerate(turns) if t["role"] == "system"]
    if systems == [0]:
        return turns
    if all(isinstance(turns[i]["content"], str) for i in systems):
        joined: Any = "\n\n".join(turns[i]["content"] for i in systems if turns[i]["content"])
    else:  # parts (content_format "openai"): one message holding every part, in order
        joined = [part for i in systems for part in turns[i]["content"]]
    return [{"role": "system", "content": joined}] + [t for t in turns if t["role"] != "system"]
