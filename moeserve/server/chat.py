"""POST /v1/chat/completions.

The prompt is the checkpoint's chat template applied to the messages: the one its tokenizer loads
(`chat_template.jinja`, or `chat_template` in tokenizer_config.json; of named templates, transformers'
choice: "default"), as each family ships it (gpt-oss's harmony format, GLM-4.5's, MiniMax-M2's, ...).
`reasoning_effort` (OpenAI's field) reaches the template as the variable gpt-oss's template reads, and sets enable_thinking (Qwen3's, GLM-4.5's switch) as vLLM does.
A checkpoint without a template gets the documented default (moeserve.engine.builtin_model.CHAT_TEMPLATE,
ChatML-like):

    <|im_start|>{role}\\n{content}<|im_end|>\\n ... <|im_start|>assistant\\n

The rendering and the checks of the messages are engine/chat_prompt.py's, which LLM.chat uses too:
the same messages give the same prompt token ids through either API.
"""
from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import JSONResponse
from starlette.requests import Request

from moeserve.engine import chat_prompt
from moeserve.engine.token_texts import context_before
from moeserve.sampling_params import StructuredOutputsParams
from moeserve.server import common, kv_params, prompt_logprobs, structured
from moeserve.server.api_errors import bad_request, refusing
from moeserve.server.chat_output import ChoicePlan, plan_output
from moeserve.server.common import ServerState
from moeserve.server.generation import Choice, Generation
from moeserve.server.protocol import ChatCompletionRequest, ChatMessage
from moeserve.server.tools import forced_schema, tool_request


def _as_dict(message: ChatMessage) -> dict[str, Any]:
    """A checked message as engine/chat_prompt.py takes it: its fields that are set, parts as dicts."""
    out = {key: getattr(message, key) for key in ChatMessage.model_fields if getattr(message, key) is not None}
    if isinstance(message.content, list):
        out["content"] = [part.model_dump() for part in message.content]
    return out


def _content(message: ChatMessage) -> str:
    return chat_prompt.content_text(_as_dict(message).get("content"))


def render_messages(state: ServerState, req: Any, check: Callable[[str], None] | None = None) -> list[int]:
    """The chat template applied to req.messages (checked by `check_messages`), tokenized
    (engine/chat_prompt.py, as LLM.chat renders them); req has add_generation_prompt and
    continue_final_message (a chat or a /tokenize request). `check` sees the rendered text before it
    is tokenized (and may refuse it)."""
    tokenizer = common.require_tokenizer(state, "a chat (its template renders text)", "messages")
    turns = chat_prompt.template_turns([_as_dict(m) for m in req.messages])
    variables = dict(refusing(chat_prompt.check_template_kwargs, req.chat_template_kwargs, _OWN_FIELDS, "a request field"))
    if getattr(req, "reasoning_effort", None) is not None:
        variables.setdefault("reasoning_effort", req.reasoning_effort)
        # as vLLM: an effort asks for thinking, "none" for none, in templates switched by enable_thinking
        # (Qwen3's, GLM-4.5's), unless chat_template_kwargs sets it
        variables.setdefault("enable_thinking", req.reasoning_effort != "none")
    if req.documents is not None:
        variables["documents"] = req.documents
    if getattr(req, "tools", None):
        variables["tools"] = req.tools
    _, ids = refusing(chat_prompt.render, tokenizer, turns, add_generation_prompt=req.add_generation_prompt,
                       continue_final_message=req.continue_final_message, variables=variables,
                       add_special_tokens=req.add_special_tokens, check=check,
                       content_form=state.config.chat_template_content_format)
    return ids


# chat_template_kwargs entries that are fields of the request itself
_OWN_FIELDS = ("add_generation_prompt", "continue_final_message", "documents")


def message_bytes(req: Any) -> int:
    """About how much text the messages hold (which tokenizer lane renders them: common.tokenize)."""
    return sum(len(_content(m)) for m in req.messages)


def _refuse_unsupported(req: ChatCompletionRequest) -> None:
    if req.top_logprobs and not req.logprobs:  # 0 asks for nothing, and is vLLM's default: served, as vLLM does
        raise bad_request("top_logprobs needs logprobs: true", param="top_logprobs")
    check_messages(req)


def check_messages(req: Any) -> None:
    """engine/chat_prompt.check_messages on the request's messages, as a 400."""
    refusing(chat_prompt.check_messages, [_as_dict(m) for m in req.messages], req.add_generation_prompt,
              req.continue_final_message)


def _logprobs(state: ServerState, choice: Choice, start: int) -> dict[str, Any]:
    """The choice's logprobs from its token `start` on; each token's text as vLLM shows it
    (engine/token_texts.py), `bytes` that text's UTF-8 ([] for a token inside a character)."""
    def entry(text: str, lp: float) -> dict[str, Any]:
        return {"token": text, "logprob": common.json_logprob(lp), "bytes": list(text.encode("utf-8"))}

    entries = choice.logprobs[start:]
    texts = state.token_texts.positions(entries, context_before(choice.logprobs, start))
    return {"content": [dict(entry(text, lp), top_logprobs=[entry(t, v) for t, (_, v) in zip(alternatives, top)])
                        for (_, lp, top), (text, alternatives) in zip(entries, texts)]}


def _echo(req: ChatCompletionRequest) -> str:
    """vLLM's chat `echo`: the last message's content when that message has the response's role
    (assistant), i.e. the turn being continued (continue_final_message); else nothing."""
    last = req.messages[-1]
    return _content(last) if req.echo and last.role == "assistant" else ""


def _finish(reason: str | None, called: bool, plan: ChoicePlan) -> str | None:
    """OpenAI's "tool_calls" for an output that ended by itself with calls in it, except under a named
    tool_choice, where OpenAI (and vLLM) answer "stop"."""
    named = plan.tools is not None and plan.tools.choice == "function"
    return "tool_calls" if reason == "stop" and called and not named else reason


_REASONING_KEYS = ("reasoning", "reasoning_content")


def _shown(fields: dict[str, Any], req: ChatCompletionRequest) -> dict[str, Any]:
    """A message or delta as the client asked for it: without the reasoning under vLLM's
    `include_reasoning: false` (the answer alone)."""
    return fields if req.include_reasoning else {k: v for k, v in fields.items() if k not in _REASONING_KEYS}


def _message(plan: ChoicePlan, echo: str, text: str, req: ChatCompletionRequest) -> dict[str, Any]:
    if not plan.parsed:
        return {"role": "assistant", "content": echo + text}
    message = _shown(plan.new_parser().message(text), req)
    if echo:
        message["content"] = echo + (message["content"] or "")
    return message


def _response(state: ServerState, gen: Generation, req: ChatCompletionRequest, plan: ChoicePlan) -> dict[str, Any]:
    echo = _echo(req)
    choices = []
    for c in sorted(gen.choices.values(), key=lambda c: c.index):
        message = _message(plan, echo, c.text, req)
        choices.append({"index": c.index, "message": message, "logprobs": _logprobs(state, c, 0) if req.logprobs else None,
                        "finish_reason": _finish(c.finish_reason, bool(message.get("tool_calls")), plan), "stop_reason": c.stop_reason,
                        **common.token_ids_fields(req, gen, c, c.token_ids, with_prompt=False)})
    response = {"id": gen.response_id, "object": "chat.completion", "created": common.created(),
                "model": state.model_name, "choices": choices, "usage": gen.usage(), **_prompt_ids(req, gen),
                **common.kv_answer(gen)}
    if prompt_logprobs.returned(req, _implied_prompt_logprobs(req)):  # one prompt: vLLM puts it at the top level
        first = min(gen.choices.values(), key=lambda c: c.index)
        response["prompt_logprobs"] = prompt_logprobs.to_json(state, first.prompt_logprobs)
    return response


def _prompt_ids(req: ChatCompletionRequest, gen: Generation) -> dict[str, Any]:
    """vLLM's return_token_ids on chat: the prompt's ids at the response's top level (a stream: on its
    first chunks, the role's), where completions put them in each choice (a chat has one prompt)."""
    return {"prompt_token_ids": gen.prompts[0]} if req.return_token_ids else {}


def _implied_prompt_logprobs(req: ChatCompletionRequest) -> int | None:
    """vLLM's chat: echo with top_logprobs k scores the prompt with k alternatives (none in a stream,
    which returns no prompt logprobs)."""
    return req.top_logprobs if req.echo and req.logprobs and not req.stream else None


async def _stream(state: ServerState, gen: Generation, req: ChatCompletionRequest, plan: ChoicePlan) -> AsyncIterator[bytes]:
    """The data chunks; SSEResponse ends them with [DONE], after an error event if one is raised."""
    chunks = common.StreamChunks(req, gen, "chat.completion.chunk", state.model_name)

    def chunk(choice: Choice, delta: dict[str, Any], logprobs: Any = None, finish: str | None = None, stop: Any = None,
              new_ids: list[int] | None = None, top: dict[str, Any] | None = None) -> bytes:
        return chunks.choice(choice, {"delta": delta}, logprobs, finish, stop, new_ids, top)

    choices = sorted(gen.choices.values(), key=lambda c: c.index)
    for c in choices:
        yield chunk(c, {"role": "assistant", "content": ""}, top=_prompt_ids(req, gen))
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
            delta = _shown(parsers[choice.index].delta(choice.text[: choice.sent], final=out.finish_reason is not None), req)
            if "tool_calls" in delta:
                called.add(choice.index)
            finish = _finish(out.finish_reason, choice.index in called, plan)
            # a step whose text the parser holds back still sends its tokens' logprobs and ids, as vLLM does
            if delta or out.finish_reason or (out.new_token_ids and (req.logprobs or req.return_token_ids)):
                yield chunk(choice, delta, logprobs, finish, out.stop_reason, out.new_token_ids)
        elif out.new_token_ids or text or out.finish_reason:  # one chunk per step with tokens
            delta = {"content": text} if text or out.new_token_ids else {}
            yield chunk(choice, delta, logprobs, out.finish_reason, out.stop_reason, out.new_token_ids)
    for usage in chunks.usage(gen.usage()):
        yield usage


async def create_chat_completion(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await common.read_request(request, state, ChatCompletionRequest)
    client_id = common.client_request_id(request, req.request_id)
    common.check_model(state, req.model)
    common.check_request_fields(req, state)
    prompt_logprobs.check(req, state)
    _refuse_unsupported(req)
    req.top_logprobs = common.resolve_logprobs(state, req.top_logprobs, "top_logprobs")  # --max-logprobs
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
    prompt = common.truncate_prompts(state, [prompt], req.truncate_prompt_tokens, req.truncation_side, wanted)[0]
    max_tokens = common.resolve_max_tokens(state, [len(prompt)], wanted, param, "messages")
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    plan = plan_output(state.formats, tools, rendered[-1], constraint)
    params = common.sampling_params(req, max_tokens, logprobs, max_tokens_param=param, structured=plan.constraint,
                                    defaults=state.sampling_defaults,
                                    prompt_logprobs=prompt_logprobs.wanted(req, _implied_prompt_logprobs(req)))
    if plan.keep_special_tokens:  # the parsers' markers are special tokens: the text must keep them
        params = dataclasses.replace(params, skip_special_tokens=False)
    kv = await kv_params.check(req.kv_transfer_params, [prompt], req.n, req.stream,
                                 state.client.config.kv_transfer)
    gen = Generation(state.client, state.metrics, common.new_id("chatcmpl"), [prompt], params,
                     buffer_limit=state.config.max_stream_buffer_bytes, kv_transfer=kv,
                     kv_taken=state.kv_taken, response_id=common.response_id("chatcmpl", client_id),
                     client_id=client_id)
    await common.start(gen, source)
    if req.stream:
        return common.SSEResponse(_stream(state, gen, req, plan), gen)
    await common.run_to_completion(request, gen)
    return JSONResponse(_response(state, gen, req, plan), headers=common.id_headers(gen))
