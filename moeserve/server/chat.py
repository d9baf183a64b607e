"""POST /v1/chat/completions.

The prompt is the checkpoint's chat template applied to the messages: the one its tokenizer loads
(`chat_template.jinja`, or `chat_template` in tokenizer_config.json; of named templates, transformers'
choice: "default"), as each family ships it (gpt-oss's harmony format, GLM-4.5's, MiniMax-M2's, ...).
`reasoning_effort` (OpenAI's field) reaches the template as the variable gpt-oss's template reads.
A checkpoint without a template gets the documented default (moeserve.engine.builtin_model.CHAT_TEMPLATE,
ChatML-like):

    <|im_start|>{role}\\n{content}<|im_end|>\\n ... <|im_start|>assistant\\n
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import JSONResponse
from starlette.requests import Request

from moeserve.engine.builtin_model import CHAT_TEMPLATE
from moeserve.sampling_params import StructuredOutputsParams
from moeserve.server import common, kv_params, structured
from moeserve.server.api_errors import bad_request, clip
from moeserve.server.chat_output import ChoicePlan, plan_output
from moeserve.server.common import ServerState
from moeserve.server.generation import Choice, Generation
from moeserve.server.protocol import ChatCompletionRequest, ChatMessage, ContentPart
from moeserve.server.tools import forced_schema, tool_request


def _content(message: ChatMessage) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    # vLLM joins the parts with newlines; a refusal part (assistant messages only) reads as its text
    return "\n".join((part.refusal if part.type == "refusal" else part.text) or "" for part in message.content)


def render_messages(state: ServerState, req: Any, check: Callable[[str], None] | None = None) -> list[int]:
    """The chat template applied to req.messages (checked by `check_messages`), tokenized; req has
    add_generation_prompt and continue_final_message (a chat or a /tokenize request). `check` sees the
    rendered text before it is tokenized (and may refuse it)."""
    from jinja2 import TemplateError

    tokenizer = common.require_tokenizer(state, "a chat (its template renders text)", "messages")
    turns = [_turn(m) for m in req.messages]
    # the tokenizer's own template(s): None lets transformers pick among named ones (a dict), which it
    # cannot take as `chat_template` itself
    template = None if getattr(tokenizer, "chat_template", None) else CHAT_TEMPLATE
    extra = dict(_template_kwargs(req.chat_template_kwargs))
    if getattr(req, "reasoning_effort", None) is not None:
        extra.setdefault("reasoning_effort", req.reasoning_effort)
    if req.documents is not None:
        extra["documents"] = req.documents
    if getattr(req, "tools", None):
        extra["tools"] = req.tools
    try:
        text = tokenizer.apply_chat_template(
            turns, chat_template=template, add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message, tokenize=False, **extra)
    except (TemplateError, TypeError) as e:  # TypeError: a template doing arithmetic on a request's value
        raise bad_request(f"the chat template rejected the messages: {str(e)[:200]}", param="messages") from None
    except ValueError as e:  # e.g. continue_final_message on a template that does not end the turn with its content
        if req.continue_final_message:
            raise bad_request(f"the chat template cannot continue the final message: {str(e)[:200]}",
                              param="continue_final_message") from None
        raise bad_request(f"the chat template rejected the messages: {str(e)[:200]}", param="messages") from None
    if check is not None:
        check(text)
    ids = tokenizer.encode(text, add_special_tokens=req.add_special_tokens)
    if not ids:
        raise bad_request("the messages render to an empty prompt", param="messages")
    return ids


def message_bytes(req: Any) -> int:
    """About how much text the messages hold (which tokenizer lane renders them: common.tokenize)."""
    return sum(len(_content(m)) for m in req.messages)


def _turn(message: ChatMessage) -> dict[str, Any]:
    """A message as the template sees it: role and content, and whichever of name, tool_calls,
    tool_call_id and function_call it carries (a template that renders tool history needs them)."""
    turn: dict[str, Any] = {"role": message.role, "content": _content(message)}
    for key in ("name", "tool_calls", "tool_call_id", "function_call"):
        value = getattr(message, key)
        if value is not None:
            turn[key] = value
    if message.tool_calls:
        turn["tool_calls"] = [_call_for_template(call) for call in message.tool_calls]
    return turn


def _call_for_template(call: dict[str, Any]) -> dict[str, Any]:
    """An earlier turn's tool call with its arguments as an object, as vLLM hands them to templates
    (GLM-4.5's iterates them; Qwen3's writes either); arguments that are not a JSON object stay text."""
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        arguments = json.loads(fn["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**fn, "arguments": arguments}} if isinstance(arguments, dict) else call


# apply_chat_template's own arguments: chat_template_kwargs may add template variables, not set these
# (the request has fields for the ones a client may choose; the template itself is the checkpoint's)
_RESERVED_TEMPLATE_KWARGS = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs",
})


def _template_kwargs(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    for key in kwargs or {}:
        if key in ("add_generation_prompt", "continue_final_message", "documents"):
            raise bad_request(f"set {key} as a request field, not in chat_template_kwargs", param="chat_template_kwargs")
        if key in _RESERVED_TEMPLATE_KWARGS:
            raise bad_request(f"chat_template_kwargs may only add template variables; '{clip(key)}' is an argument of "
                              "the template call", param="chat_template_kwargs")
    return kwargs or {}


def _refuse_unsupported(req: ChatCompletionRequest) -> None:
    if req.top_logprobs is not None and not req.logprobs:
        raise bad_request("top_logprobs needs logprobs: true", param="top_logprobs")
    if req.top_logprobs is not None and not 0 <= req.top_logprobs <= 20:
        raise bad_request(f"top_logprobs must be an integer in [0, 20], got {req.top_logprobs}", param="top_logprobs")
    check_messages(req)


def check_messages(req: Any) -> None:
    """Refuses what the template cannot take: missing content, parts other than text (and an
    assistant's refusal), continuing a final message while also opening a new assistant turn."""
    if req.continue_final_message and req.add_generation_prompt:
        raise bad_request("continue_final_message needs add_generation_prompt: false", param="continue_final_message")
    for i, m in enumerate(req.messages):
        if m.content is None and m.role != "assistant":  # OpenAI: only an assistant turn may omit content
            raise bad_request(f"messages[{i}] ({m.role}) has no content", param=f"messages.{i}.content")
        for j, part in enumerate(m.content if isinstance(m.content, list) else []):
            _check_part(m.role, part, f"messages[{i}].content[{j}]", f"messages.{i}.content.{j}")


def _check_part(role: str, part: ContentPart, where: str, param: str) -> None:
    """A text part with its text, or a refusal part with its refusal on an assistant message (OpenAI's
    schema allows refusals there only; vLLM reads them as text)."""
    if part.type == "refusal" and role != "assistant":
        raise bad_request(f"{where} is a 'refusal' part; only assistant messages may hold one (this is a {role} message)",
                          param=f"{param}.type")
    if part.type not in ("text", "refusal"):
        raise bad_request(f"{where} is a '{clip(part.type)}' part; only text parts are supported", param=f"{param}.type")
    if getattr(part, part.type) is None:
        raise bad_request(f"{where} is a {part.type} part without '{part.type}'", param=f"{param}.{part.type}")


def _logprobs(state: ServerState, choice: Choice, start: int) -> dict[str, Any]:
    decode = common.token_decoder(state)

    def entry(tok: int, lp: float) -> dict[str, Any]:
        text = decode([tok])
        return {"token": text, "logprob": common.json_logprob(lp), "bytes": list(text.encode("utf-8"))}

    return {"content": [dict(entry(tok, lp), top_logprobs=[entry(t, v) for t, v in top])
                        for tok, lp, top in choice.logprobs[start:]]}


def _echo(req: ChatCompletionRequest) -> str:
    """vLLM's chat `echo`: the last message's content when that message has the response's role
    (assistant), i.e. the turn being continued (continue_final_message); else nothing."""
    last = req.messages[-1]
    return _content(last) if req.echo and last.role == "assistant" else ""


def _finish(reason: str | None, message: dict[str, Any]) -> str | None:
    """OpenAI's "tool_calls" for an output that ended by itself with calls in it."""
    return "tool_calls" if reason == "stop" and message.get("tool_calls") else reason


def _message(plan: ChoicePlan, echo: str, text: str) -> dict[str, Any]:
    if not plan.parsed:
        return {"role": "assistant", "content": echo + text}
    message = plan.new_parser().message(text)
    if echo:
        message["content"] = echo + (message["content"] or "")
    return message


def _response(state: ServerState, gen: Generation, req: ChatCompletionRequest, plan: ChoicePlan) -> dict[str, Any]:
    echo = _echo(req)
    choices = []
    for c in sorted(gen.choices.values(), key=lambda c: c.index):
        message = _message(plan, echo, c.text)
        choices.append({"index": c.index, "message": message, "logprobs": _logprobs(state, c, 0) if req.logprobs else None,
                        "finish_reason": _finish(c.finish_reason, message), "stop_reason": c.stop_reason,
                        **common.token_ids_fields(req, gen, c, c.token_ids)})
    return {"id": gen.request_id, "object": "chat.completion", "created": common.created(),
            "model": state.model_name, "choices": choices, "usage": gen.usage(), **common.kv_answer(gen)}


async def _stream(state: ServerState, gen: Generation, req: ChatCompletionRequest, plan: ChoicePlan) -> AsyncIterator[bytes]:
    """The data chunks; SSEResponse ends them with [DONE], after an error event if one is raised."""
    chunks = common.StreamChunks(req, gen, "chat.completion.chunk", state.model_name)

    def chunk(choice: Choice, delta: dict[str, Any], logprobs: Any = None, finish: str | None = None, stop: Any = None,
              new_ids: list[int] | None = None) -> bytes:
        return chunks.choice(choice, {"delta": delta}, logprobs, finish, stop, new_ids)

    choices = sorted(gen.choices.values(), key=lambda c: c.index)
    for c in choices:
        yield chunk(c, {"role": "assistant", "content": ""})
    echo = _echo(req)
    for c in choices if echo else []:  # as vLLM: the echo is each choice's first content delta
        yield chunk(c, {"content": echo})
    sent: dict[int, int] = {}
    parsers = {c.index: plan.new_parser() for c in choices} if plan.parsed else {}
    called: set[int] = set()  # choices whose output holds tool calls
    async for choice, out in gen.events():
        logprobs = None
        if req.logprobs:
            logprobs = _logprobs(state, choice, sent.get(choice.index, 0))
            sent[choice.index] = len(choice.logprobs)
        text = gen.text_to_stream(choice)
        if parsers:  # reasoning, content and tool calls from all the text streamed so far
            delta = parsers[choice.index].delta(choice.text[: choice.sent], final=out.finish_reason is not None)
            if "tool_calls" in delta:
                called.add(choice.index)
            finish = "tool_calls" if out.finish_reason == "stop" and choice.index in called else out.finish_reason
            if delta or out.finish_reason or (out.new_token_ids and req.logprobs):
                yield chunk(choice, delta, logprobs, finish, out.stop_reason, out.new_token_ids)
        elif out.new_token_ids or text or out.finish_reason:  # one chunk per step with tokens
            delta = {"content": text} if text or out.new_token_ids else {}
            yield chunk(choice, delta, logprobs, out.finish_reason, out.stop_reason, out.new_token_ids)
    for usage in chunks.usage(gen.usage()):
        yield usage


async def create_chat_completion(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await common.read_request(request, state, ChatCompletionRequest)
    common.check_model(state, req.model)
    common.check_request_fields(req, state)
    _refuse_unsupported(req)
    common.check_fan_out(state, req.n, 1)
    tools = tool_request(req, state.config.tool_call_parser)
    constraint, source = structured.request_constraint(req)
    if tools is not None and tools.forced:
        if constraint is not None:
            raise bad_request(f"{source} cannot be combined with tool_choice 'required' or a named function: both "
                              "constrain the output", param=source)
        constraint, source = StructuredOutputsParams(json=forced_schema(tools)), "tools"
    wanted, param = (req.max_completion_tokens, "max_completion_tokens") if req.max_completion_tokens is not None else (req.max_tokens, "max_tokens")
    rendered: list[str] = []

    def refuse_unfittable(text: str) -> None:  # before the rendered text is tokenized
        rendered.append(text)
        if req.truncate_prompt_tokens is None:
            common.refuse_unfittable(state, len(text.encode()), wanted, param, "messages")

    prompt = await common.tokenize(state, render_messages, req, refuse_unfittable, text_bytes=message_bytes(req))
    prompt = common.truncate_prompts(state, [prompt], req.truncate_prompt_tokens)[0]
    max_tokens = common.resolve_max_tokens(state, [len(prompt)], wanted, param, "messages")
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    plan = plan_output(state.formats, tools, rendered[-1], constraint)
    params = common.sampling_params(req, max_tokens, logprobs, max_tokens_param=param, structured=plan.constraint)
    if plan.keep_special_tokens:  # the parsers' markers are special tokens: the text must keep them
        params = dataclasses.replace(params, skip_special_tokens=False)
    kv = await kv_params.check(req.kv_transfer_params, [prompt], req.n, req.stream,
                                 state.client.config.kv_transfer)
    gen = Generation(state.client, state.metrics, common.new_id("chatcmpl"), [prompt], params,
                     buffer_limit=state.config.max_stream_buffer_bytes, kv_transfer=kv,
                     kv_taken=state.kv_taken)
    await common.start(gen, source)
    if req.stream:
        return common.SSEResponse(_stream(state, gen, req, plan), gen)
    await common.run_to_completion(request, gen)
    return JSONResponse(_response(state, gen, req, plan))
