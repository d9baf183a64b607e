"""OpenAI request bodies: parsing and validation into pydantic models (strict types).

Strict mode: "5" is not an integer and true is not a number, as in OpenAI's API; a float with an
integral value (4.0) counts as an integer, as in vLLM. Unknown fields are
ignored (clients add their own). Fields we cannot honour are refused, never silently dropped.
Range checks live in SamplingParams; this module checks JSON shapes and the fields it owns.
"""
from __future__ import annotations

import functools
import json
import re
import typing
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator,
)
from pydantic_core import PydanticCustomError

from moeserve.server.api_errors import ApiError, bad_request, clip

_MAX_INT = 2**63 - 1


def _whole(value: Any) -> Any:
    """3.0 is 3: JSON has one number type, some serializers write every number with a point, and
    vLLM (lax models) accepts it. 3.5, "3" and true stay errors."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# a count field: an integer, or a float with an integral value, in 64 bits (msgpack and torch hold them)
WholeInt = Annotated[int, BeforeValidator(_whole), Field(ge=-_MAX_INT, le=_MAX_INT)]


def _seed_range(value: int) -> int:
    """Signed or unsigned 64-bit, as clients draw seeds (pydantic's own message would print 2**64 - 1
    as a float, a bound above the value it refuses)."""
    if not -(2**63) <= value <= 2**64 - 1:
        raise PydanticCustomError("seed_range", "seed must be an integer in [-2**63, 2**64 - 1]")
    return value


Seed = Annotated[int, BeforeValidator(_whole), AfterValidator(_seed_range)]


# vLLM's older guided decoding fields, which vLLM itself replaced by structured_outputs
_GUIDED = "vLLM's older guided decoding field: send structured_outputs: {{\"{}\": ...}} instead"
# Fields of OpenAI's or vLLM's API that change what is generated and that moeserve does not serve:
# refused by name (unknown fields are otherwise ignored), unless they carry their "off" value.
UNSERVED_FIELDS = {
    "functions": "function calling", "function_call": "function calling", "audio": "audio output",
    "modalities": "text is the only output", "guided_json": _GUIDED.format("json"),
    "guided_regex": _GUIDED.format("regex"), "guided_choice": _GUIDED.format("choice"),
    "guided_grammar": _GUIDED.format("grammar"),
    "guided_whitespace_pattern": "xgrammar takes no whitespace pattern; structured_outputs.disable_any_whitespace "
                                 "chooses between none and any",
    "structural_tag": "structural tags are not served",
    "guided_decoding_backend": "the grammar engine is xgrammar, always",
    # without it, the top `logprobs` alternatives would come back in place of the tokens asked for
    "logprob_token_ids": "logprobs returns the most likely alternatives",
    "use_beam_search": "beam search",
    "logits_processors": "custom logits processors", "prompt_embeds": "prompt embeddings",
    # vLLM refuses it too unless started with --trust-request-chat-template: a template is code
    "chat_template": "a chat template sent with a request is not trusted; the server's template is used (the checkpoint's, or --chat-template's)",
}
_OFF_VALUES = (None, False, [], {}, "none", "", ["text"])
# guided decoding has no "off" value but null: `guided_json: {}` is the schema that allows any JSON
# value, a constraint we would silently not apply (vLLM applies it)
_NULL_ONLY = frozenset({"guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_whitespace_pattern",
                        "structural_tag"})
# fields whose values that change nothing are more than their "off" ones
_ACCEPTED = {"guided_decoding_backend": (None, "xgrammar", "auto")}


class _Strict(BaseModel):
    """`null` for a field that has a default and no null value of its own means that default: OpenAI
    types its optional fields "X or null" and vLLM its extensions Optional[X], and SDKs that serialize
    every unset field send null (`max_tokens: null`, which means "the rest of the context", keeps it)."""

    model_config = ConfigDict(strict=True, extra="ignore")
    # the prompt's or a field's accepted shapes, said when a value has none of them (param -> message)
    shape_hints: ClassVar[dict[str, str]] = {}
    # the UNSERVED_FIELDS this body refuses by name (validate)
    unserved: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        names = _defaulted_on_null(cls)
        if isinstance(data, dict) and any(data.get(k, 0) is None for k in names):
            data = {k: v for k, v in data.items() if not (v is None and k in names)}
        return data


@functools.cache
def _defaulted_on_null(model: type[BaseModel]) -> frozenset[str]:
    """The optional fields of `model` whose type has no null: for them null means the default."""
    return frozenset(name for name, f in model.model_fields.items()
                     if not f.is_required() and f.default is not None and not _accepts_none(f.annotation))


def _accepts_none(annotation: Any) -> bool:
    return annotation is Any or annotation is type(None) or type(None) in typing.get_args(annotation)


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ResponseFormat(_Strict):
    type: str
    json_schema: Any = None  # {"name", "schema", "strict", "description"}: checked in server/structured.py


class _Sampling(_Strict):
    """Fields shared by both endpoints."""

    unserved: ClassVar[tuple[str, ...]] = tuple(UNSERVED_FIELDS)
    shape_hints: ClassVar[dict[str, str]] = {
        "prompt": "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists",
        "stop": "stop must be a string or a list of strings",
        "messages": "messages must be a non-empty list of {role, content} objects",
    }
    model: str | None = None
    # vLLM's: the response's id is the endpoint's prefix and this (an X-Request-Id header wins; common.response_id)
    request_id: str | None = None
    n: WholeInt = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: WholeInt | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0, le=_MAX_INT)]] | None = None
    # signed or unsigned 64-bit, as clients draw them; Generation maps it into the engine's range
    seed: Seed | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None  # vLLM's extensions from here
    min_p: float | None = None
    min_tokens: WholeInt | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: dict[str, float] | None = None
    allowed_token_ids: list[Annotated[int, Field(ge=0, le=_MAX_INT)]] | None = None  # vLLM's: the only tokens to produce
    bad_words: list[str] | None = None  # vLLM's: words the output must not contain (SamplingParams.bad_words)
    user: str | None = None
    return_token_ids: bool = False  # vLLM's extension: choices carry token_ids and prompt_token_ids
    response_format: ResponseFormat | None = None
    structured_outputs: Any = None  # vLLM's: {"json" | "regex" | "choice" | "grammar" | "json_object": ...}
    # vLLM's: keep only the prompt's last k tokens (-1: the last max_model_len); checked in common.py
    truncate_prompt_tokens: WholeInt | None = None
    truncation_side: Literal["left", "right"] | None = None  # vLLM's: which end truncation cuts (default left)
    # vLLM's: score the prompt's tokens (k alternatives each); checked in server/prompt_logprobs.py
    prompt_logprobs: WholeInt | None = None
    # vLLM's prefill/decode split, as vllm-router sends it; checked in server/kv_params.py
    kv_transfer_params: dict[str, Any] | None = None


def _prompt_shape(value: Any) -> str | None:
    """Which shape a prompt has, from its first item: pydantic then validates that shape alone (a
    plain union tried list[str] on every id of a 1.7M-id prompt first, 12x slower). The tags are
    pydantic's own names of union branches, which error locations leave out (`_is_union_tag`)."""
    if isinstance(value, str):
        return "str"
    if not isinstance(value, list):
        return None
    first = value[0] if value else ""
    return {str: "list[str]", list: "list[list[int]]"}.get(type(first), "list[int]")


Prompt = Annotated[
    Union[Annotated[str, Tag("str")], Annotated[list[str], Tag("list[str]")], Annotated[list[int], Tag("list[int]")],
          Annotated[list[list[int]], Tag("list[list[int]]")]],
    Discriminator(_prompt_shape),
]


class CompletionRequest(_Sampling):
    prompt: Prompt
    # null is the default, 16, as in OpenAI's legacy API and vLLM (chat's null is the rest of the context)
    max_tokens: WholeInt = 16
    logprobs: WholeInt | None = None
    echo: bool = False
    best_of: WholeInt | None = None
    suffix: str | None = None
    add_special_tokens: bool = True  # vLLM's: text prompts get the tokenizer's special tokens (BOS)


class ContentPart(_Strict):
    """A content part of a chat message; "text" parts, and "refusal" parts of assistant messages, are
    served (chat.py refuses the others by name, so an image part gets "not supported" rather than a
    type error)."""

    model_config = ConfigDict(strict=True, extra="allow")
    type: str
    text: str | None = None
    refusal: str | None = None


def _content_shape(value: Any) -> str | None:
    return "str" if isinstance(value, str) else "list[ContentPart]" if isinstance(value, list) else None


# told apart by type, so a bad part is reported at its own location, not as "not a string"
Content = Annotated[
    Union[Annotated[str, Tag("str")], Annotated[list[ContentPart], Tag("list[ContentPart]")]],
    Discriminator(_content_shape),
]


class ChatMessage(_Strict):
    """Every field reaches the chat template (chat.py), which renders what it knows: a history's tool
    calls and their results are the template's to show, not ours to drop."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant turn's calls (OpenAI's shape, passed as is)
    tool_call_id: str | None = None  # a tool turn: the call it answers
    function_call: dict[str, Any] | None = None  # the older single-call form of tool_calls
    # an assistant turn's reasoning, sent back for templates that show it (interleaved thinking): vLLM's
    # name, and the older one, which moeserve's answers carry
    reasoning: str | None = None
    reasoning_content: str | None = None


_CHAT_HINTS = {"messages.*.content": "must be a string or a list of content parts"}


# OpenAI's values, and vLLM's "max" (DeepSeek V4's); "none" turns thinking off (server/chat.py)
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ChatCompletionRequest(_Sampling):
    shape_hints: ClassVar[dict[str, str]] = {**_Sampling.shape_hints, **_CHAT_HINTS}
    messages: list[ChatMessage] = Field(min_length=1)
    echo: bool = False  # vLLM's: the content starts with the last message's when it is the assistant's
    max_tokens: WholeInt | None = None
    max_completion_tokens: WholeInt | None = None
    logprobs: bool = False
    top_logprobs: WholeInt | None = None
    tools: list[Any] | None = None  # OpenAI's function tools, checked in server/tools.py
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    add_generation_prompt: bool = True  # vLLM's: end the prompt with the assistant turn's opening
    continue_final_message: bool = False  # vLLM's: leave the last (assistant) message open and continue it
    add_special_tokens: bool = False  # vLLM's: the template writes its own special tokens
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's: more variables for the template
    documents: list[dict[str, Any]] | None = None  # vLLM's: for templates that render retrieved documents
    # OpenAI's, for reasoning models: the template variable of that name (gpt-oss's harmony template reads it)
    reasoning_effort: ReasoningEffort | None = None
    include_reasoning: bool = True  # vLLM's: false leaves the reasoning out of the answer (--reasoning-parser)


class TokenizeRequest(_Strict):
    """POST /tokenize with a prompt (vLLM's extension): the ids /v1/completions would serve."""

    shape_hints: ClassVar[dict[str, str]] = {
        "prompt": "prompt must be a string: /tokenize takes one text prompt (or messages, rendered as chat)"}

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class TokenizeChatRequest(_Strict):
    """POST /tokenize with messages: the ids /v1/chat/completions would serve."""

    unserved: ClassVar[tuple[str, ...]] = ("chat_template",)  # it renders what the chat endpoint would
    shape_hints: ClassVar[dict[str, str]] = {"messages": _Sampling.shape_hints["messages"], **_CHAT_HINTS}

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    documents: list[dict[str, Any]] | None = None
    reasoning_effort: ReasoningEffort | None = None
    tools: list[Any] | None = None  # rendered by templates that show them, as the chat endpoint renders them
    return_token_strs: bool = False


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=-_MAX_INT, le=_MAX_INT)]]


# Nesting allowed in a request body. json.loads itself stops near 1,000 levels, but what reads the
# parsed body may recurse once per level with frames of its own: a chat template rendering 490 levels
# of `chat_template_kwargs`, `tool_calls` or `documents` raised RecursionError (a 500, an independent
# check). OpenAI's own bodies nest a few levels (a tool call's arguments are a string).
MAX_JSON_DEPTH = 64


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply `value` nests lists and objects (a scalar is 0; counting stops past `limit`).
    Level by level, never recursing (the check must not fail on what it guards against), and a list
    of scalars is told from its item types in C (a 5 MB body of token ids is 1.7 million of them)."""
    depth, level = 0, [value] if type(value) in _CONTAINERS else []
    while level and depth <= limit:
        depth += 1
        deeper = []
        for node in level:
            items = node.values() if type(node) is dict else node
            if not _CONTAINERS.isdisjoint(set(map(type, items))):
                deeper.extend(v for v in items if type(v) in _CONTAINERS)
        level = deeper
    return depth


_CONTAINERS = frozenset({list, dict})


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(body: bytes) -> dict[str, Any]:
    """Request bytes -> a JSON object, or a 400 that says what is wrong."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("the request body is not valid UTF-8") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise bad_request("the request body nests too deeply") from None
    except ValueError as e:
        raise bad_request(f"the request body is not valid JSON: {_json_error(e)}") from None
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object")
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH and json_depth(data) > MAX_JSON_DEPTH:
        raise bad_request(f"the request body nests deeper than {MAX_JSON_DEPTH} levels")
    # JSON escapes can smuggle in lone surrogates, which no tokenizer or encoder accepts; valid UTF-8
    # holds none, so only a body with a surrogate escape needs the (slow) full check
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise bad_request("the request contains invalid Unicode (a lone surrogate escape)") from None
    return data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _json_error(e: ValueError) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at line {e.lineno} column {e.colno}"
    if "integer string conversion" in str(e):  # Python's own message advises sys.set_int_max_str_digits
        return "a number has too many digits"
    return str(e)


def refuse_unserved(data: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        offs = (None,) if name in _NULL_ONLY else _ACCEPTED.get(name, _OFF_VALUES)
        if name in data and not any(data[name] == off and type(data[name]) is type(off) for off in offs):
            raise bad_request(f"{name} is not supported by this server ({UNSERVED_FIELDS[name]})", param=name)


def validate(model: type[_Strict], data: dict[str, Any]) -> Any:
    """Validates `data` against `model`; the first problem becomes a 400 naming the field."""
    refuse_unserved(data, model.unserved)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise _validation_error(model, e) from None


def _validation_error(model: type[_Strict], e: ValidationError) -> ApiError:
    err = e.errors(include_url=False, include_input=False, include_context=False)[0]
    path = [part for part in err["loc"] if not _is_union_tag(part)]
    param = _param(model, path) or None
    where = ".".join(clip(part) for part in path)
    if err["type"] == "missing":
        return bad_request(f"'{where}' is required", param=param, code="missing_required_parameter")
    pattern = re.sub(r"\.\d+(?=\.|$)", ".*", param or "")
    if pattern in model.shape_hints:
        hint = model.shape_hints[pattern]
        return bad_request(hint if pattern == param else f"{param} {hint}", param=param)
    return bad_request(f"invalid value for '{where}': {err['msg']}", param=param)


def _param(model: type[BaseModel], path: list[str | int]) -> str:
    """The dotted location of the field at fault, through nested objects ("messages.0.content.1.type");
    list indices and dict keys past that field are left out, so a bad stop_token_ids item or logit_bias
    value names its field, as the semantic checks do."""
    kept, fields = 0, model.model_fields
    for i, part in enumerate(path):
        if isinstance(part, int):
            continue
        if part not in fields:
            break
        kept, fields = i + 1, _object_fields(fields[part].annotation)
    return ".".join(str(part) for part in path[:kept])


def _object_fields(annotation: Any) -> dict[str, Any]:
    """The fields of the object type a field holds, directly or as list items; {} for scalars."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.model_fields
    for arg in typing.get_args(annotation):
        fields = _object_fields(arg)
        if fields:
            return fields
    return {}


def _is_union_tag(part: str | int) -> bool:
    """pydantic names union branches in error locations ("list[int]"); users never wrote those."""
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool", "function-after", "literal"))
