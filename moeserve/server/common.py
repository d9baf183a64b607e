"""What both generation endpoints share: server state, body reading and parsing, model and context
checks, sampling parameters, disconnect watching and the SSE response."""
from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from moeserve.engine.token_texts import TokenIdNames, TokenTexts, token_texts
from moeserve.errors import context_length_error
from moeserve.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputsParams
from moeserve.server.api_errors import MAX_REASON_CHARS, ApiError, bad_request, clip, internal_error
from moeserve.server.chat_output import OutputFormats
from moeserve.server.config_file import ServerConfig
from moeserve.server.engine_client import EngineClient
from moeserve.server.generation import Generation
from moeserve.server.kv_params import TakenPins
from moeserve.server.metrics import ServerMetrics
from moeserve.server.prompt_bound import PromptBound
from moeserve.server.protocol import parse_json, validate

MAX_CHOICES = 1024  # prompts x n of one HTTP request
OFF_LOOP_BODY_BYTES = 64 * 1024  # a larger body is parsed and validated on a worker thread
# a body from which nothing arrives for this long is abandoned (408): neither uvicorn stack times out
# a body, and a client that declares bytes it never sends would hold its connection forever
BODY_IDLE_TIMEOUT_S = 30.0
# text longer than this is tokenized on a lane of its own, so that normal prompts never queue behind it
LONG_TEXT_BYTES = 32 * 1024


@dataclass
class ServerState:
    client: EngineClient
    config: ServerConfig
    tokenizer: Any
    model_name: str
    max_model_len: int
    vocab_size: int  # the model's: prompt and stop token ids must lie below it
    metrics: ServerMetrics
    max_queued_requests: int | None = None  # the engine's waiting-queue bound: a request fanning out wider never fits
    # SamplingParams keywords for the fields a request leaves out (--generation-config; engine/generation_defaults.py)
    sampling_defaults: dict = field(default_factory=dict)
    draining: bool = False
    kv_taken: TakenPins = field(default_factory=TakenPins)  # remote prefills this decoder has taken (read once)
    # tokenization runs on two lanes off the event loop (a multi-MB prompt takes seconds): text over
    # LONG_TEXT_BYTES on one, the rest on the other, so a normal prompt never waits behind a huge one.
    # One worker each, each with its own tokenizer: a fast tokenizer's encode mutates its truncation
    # state and must not run concurrently on one object
    tokenize_pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="tokenize"))
    long_tokenize_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="tokenize-long"))
    # the fewest tokens a text of so many bytes has: a prompt that cannot fit is refused untokenized
    prompt_bound: PromptBound | None = field(default=None, init=False)
    # the chat output parsers (--tool-call-parser, --reasoning-parser) and their markers' tokens
    formats: OutputFormats = field(default_factory=OutputFormats, init=False)
    _long_lane: "ServerState | None" = field(default=None, init=False, repr=False)
    # each token's text in logprobs, as vLLM shows it (engine/token_texts.py)
    token_texts: TokenTexts | TokenIdNames = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.prompt_bound = PromptBound.of(self.tokenizer)
        self.token_texts = token_texts(self.tokenizer)
        if self.config.tool_call_parser or self.config.reasoning_parser:
            self.formats = OutputFormats.of(self.config.tool_call_parser, self.config.reasoning_parser, self.tokenizer)

    @property
    def long_lane(self) -> "ServerState":
        """What the long lane's functions see: this state with a tokenizer of its own, copied on the
        lane's thread at its first use (a large tokenizer takes a while to copy: not on the loop)."""
        if self._long_lane is None:
            lane = copy.copy(self)
            lane.tokenizer = copy.deepcopy(self.tokenizer)
            self._long_lane = lane
        return self._long_lane

    @property
    def model_names(self) -> tuple[str, ...]:
        """The names /v1/models lists: the engine's first, then --served-model-name's others."""
        return (self.model_name, *(n for n in self.config.served_model_aliases if n != self.model_name))

    def accepts(self, model: str) -> bool:
        """Whether `model` names this server's model: a listed name, or --model as given or its last part."""
        return model in self.model_names or model in self.config.accepted_model_names


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


MAX_CLIENT_ID_CHARS = 256


def client_request_id(request: Any, body_id: str | None) -> str | None:
    """The id a client gave its request, as vLLM reads it: the X-Request-Id header, else the body's
    `request_id`; None when it gave none. Printable ASCII without spaces, at most 256 characters (it is
    echoed in a header and written to logs)."""
    given = request.headers.get("x-request-id") if request is not None else None
    param = "X-Request-Id" if given is not None else "request_id"
    given = given if given is not None else body_id
    if given is None:
        return None
    if not given or len(given) > MAX_CLIENT_ID_CHARS or not all("!" <= ch <= "~" for ch in given):
        raise bad_request(f"{param} must be 1 to {MAX_CLIENT_ID_CHARS} printable ASCII characters without spaces",
                          param=param)
    return given


def id_headers(gen: Any) -> dict[str, str]:
    """The client's request id echoed back (X-Request-Id), when it sent one."""
    return {"X-Request-Id": gen.client_id} if gen.client_id is not None else {}


def response_id(prefix: str, client_id: str | None) -> str | None:
    """The response's `id` for a client's own id: `prefix-<id>`, as vLLM's; None without one (the
    response then carries the server's request id, the engine requests' owner). Only the response
    carries a client's id: the engine's request ids stay the server's own (Generation), so two clients
    sending the same id never share, abort or read each other's requests."""
    return f"{prefix}-{client_id}" if client_id is not None else None


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing (413) anything over `limit` bytes before reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body exceeds {limit} bytes", code="request_too_large")
    chunks, size = [], 0
    stream = request.stream()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(anext(stream), BODY_IDLE_TIMEOUT_S)
            except StopAsyncIteration:
                break
            except asyncio.TimeoutError:
                raise ApiError(408, f"the request body stopped arriving: nothing for {BODY_IDLE_TIMEOUT_S:g} s",
                               code="request_timeout", headers={"Connection": "close"}) from None
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the request body exceeds {limit} bytes", code="request_too_large")
            chunks.append(chunk)
    except ClientDisconnect:
        # nobody is left to read an answer; counted as nginx counts it (499), not logged as our error
        raise ApiError(499, "the client closed the connection before sending the whole body",
                       code="client_disconnected") from None
    return b"".join(chunks)


async def read_request(request: Request, state: ServerState, model: type | Callable[[dict[str, Any]], type]) -> Any:
    """The body read, parsed and validated as `model` (a request class, or a function that picks one
    from the parsed JSON). Above OFF_LOOP_BODY_BYTES the parsing runs on a worker thread: on the event
    loop, a 5 MB body of token ids held /health and every stream for half a second."""
    body = await read_body(request, state.config.max_body_bytes)
    if len(body) <= OFF_LOOP_BODY_BYTES:
        return _parse(body, model)
    return await run_in_threadpool(_parse, body, model)


def _parse(body: bytes, model: type | Callable[[dict[str, Any]], type]) -> Any:
    data = parse_json(body)
    return validate(model if isinstance(model, type) else model(data), data)


def check_model(state: ServerState, model: str | None) -> None:
    if model is not None and not state.accepts(model):
        served = ", ".join(f"'{n}'" for n in state.model_names)
        raise ApiError(404, f"the model '{clip(model)}' does not exist; this server serves {served}",
                       param="model", code="model_not_found")


def check_token_ids(state: ServerState, ids: list[int], param: str) -> None:
    if ids and (min(ids) < 0 or max(ids) >= state.vocab_size):  # builtins: a C loop over a million ids
        raise bad_request(f"{param} token ids must lie in [0, {state.vocab_size})", param=param)


def resolve_max_tokens(state: ServerState, prompt_lens: list[int], max_tokens: int | None, param: str, prompt_param: str) -> int:
    """max_tokens, defaulting to what is left of the context (at most --generation-config's max_new_tokens);
    400 if a prompt cannot fit."""
    longest = max(prompt_lens)
    if max_tokens is None or max_tokens >= 1:  # 0: echo scoring only, which the engine checks
        too_long = context_length_error(state.max_model_len, longest, max_tokens, param, prompt_param)
        if too_long is not None:
            raise bad_request(too_long.message, param=too_long.param, code=too_long.code)
    if max_tokens is None:
        return min(state.max_model_len - longest, state.sampling_defaults.get("max_tokens", state.max_model_len))
    return max_tokens


async def tokenize(state: ServerState, fn: Callable[..., Any], *args: Any, text_bytes: int = 0) -> Any:
    """fn(lane state, *args) on a tokenizer lane, off the event loop, so a huge prompt never stalls
    other requests or /health: text over LONG_TEXT_BYTES on the long lane, the rest on the other."""
    if text_bytes > LONG_TEXT_BYTES:
        return await asyncio.get_running_loop().run_in_executor(state.long_tokenize_pool, _on_long_lane, fn, state, *args)
    return await asyncio.get_running_loop().run_in_executor(state.tokenize_pool, fn, state, *args)


def _on_long_lane(fn: Callable[..., Any], state: ServerState, *args: Any) -> Any:
    return fn(state.long_lane, *args)


def refuse_unfittable(state: ServerState, text_bytes: int, max_tokens: int | None, param: str, prompt_param: str) -> None:
    """A 400 for a text that has too many tokens for the context whatever they are, told from its
    length in bytes (`prompt_bound`) before it is tokenized: tokenizing 8 MB took seconds only to
    refuse the prompt afterwards."""
    if max_tokens is not None and max_tokens >= state.max_model_len:  # no prompt could leave room for it
        raise bad_request(f"this model's maximum context length is {state.max_model_len} tokens and {param} asks for "
                          f"{max_tokens}, which leaves no room for a prompt: lower {param}", param=param,
                          code="context_length_exceeded")
    bound = state.prompt_bound
    if bound is None:
        return
    least = bound.min_tokens(text_bytes)
    if context_length_error(state.max_model_len, least, max_tokens or None, param, prompt_param) is None:
        return
    asked = f" and {param} asks for {max_tokens} more" if max_tokens and least < state.max_model_len else ""
    raise bad_request(
        f"this model's maximum context length is {state.max_model_len} tokens; the prompt's {text_bytes} bytes are at "
        f"least {least} tokens (no token of this tokenizer stands for more than {bound.max_token_bytes} bytes){asked}: "
        f"shorten the prompt{f' or lower {param}' if asked else ''}", param=param if asked else prompt_param, code="context_length_exceeded")


def truncate_prompts(state: ServerState, prompts: list[list[int]], keep: int | None, side: str | None = None,
                     max_tokens: int | None = None) -> list[list[int]]:
    """vLLM's truncate_prompt_tokens: `keep` tokens of each prompt, its last ones unless `side` is
    "right" (its first ones), or None: untouched. -1 keeps what fits the context with `max_tokens`
    (None: room for one token, as vLLM's -1 leaves): vLLM's -1 keeps max_model_len - 1 and shortens
    max_tokens to fit, but moeserve never shortens max_tokens (a prompt that leaves too little room is
    a 400), so a -1 that kept the whole context always failed. Its range is checked by
    check_request_fields."""
    if keep is None:
        return prompts
    if keep == -1:
        keep = max(1, state.max_model_len - (max_tokens or 1))
    return [p[:keep] for p in prompts] if side == "right" else [p[-keep:] for p in prompts]


def check_request_fields(req: Any, state: ServerState) -> None:
    """Refusals both endpoints share: fields we cannot honour, options that need another field."""
    keep = req.truncate_prompt_tokens
    if keep is not None and not (keep == -1 or 1 <= keep <= state.max_model_len):
        raise bad_request(f"truncate_prompt_tokens must be -1 (the model's context, {state.max_model_len}) or in "
                          f"[1, {state.max_model_len}], got {keep}", param="truncate_prompt_tokens")
    if req.stream_options is not None and not req.stream:
        raise bad_request("stream_options can only be given with stream: true", param="stream_options")


def resolve_logprobs(state: ServerState, value: int | None, param: str) -> int | None:
    """A request's alternatives per token (logprobs, top_logprobs, prompt_logprobs): -1 is the whole
    vocabulary, as in vLLM; more than the server's --max-logprobs is a 400 naming it."""
    if value is None:
        return None
    if value < -1:
        raise bad_request(f"{param} must be a non-negative integer or -1 (the whole vocabulary), got {value}",
                          param=param)
    bound = state.client.config.model.max_logprobs_for(state.vocab_size)
    asked = state.vocab_size if value == -1 else value
    if asked > bound:
        what = f"the whole vocabulary ({asked} tokens)" if value == -1 else str(asked)
        raise bad_request(f"{param} asks for {what} alternatives per token; this server returns at most {bound} "
                          f"(--max-logprobs)", param=param)
    return asked


def check_fan_out(state: ServerState, n: int, num_prompts: int) -> None:
    """n, then prompts x n, before any tokenizing: a request that could never be served costs no
    tokenizer time. n's own range is SamplingParams' to check, so its message states that bound."""
    try:
        SamplingParams(n=n)
    except SamplingParamsError as e:
        raise bad_request(str(e), param="n") from None
    max_n = state.client.config.scheduler.max_n
    if n > max_n:
        raise bad_request(f"n (and best_of) may be at most {max_n} on this server (--max-n), got {n}", param="n")
    choices = n * num_prompts
    if choices > MAX_CHOICES:
        raise bad_request(f"prompts x n is {choices}; one request may hold at most {MAX_CHOICES} choices", param="n")
    if state.max_queued_requests is not None and choices > state.max_queued_requests:
        raise bad_request(
            f"prompts x n is {choices} sequences and this server queues at most "
            f"{state.max_queued_requests} (--max-queued-requests)", param="n")


def sampling_params(req: Any, max_tokens: int, logprobs: int | None, max_tokens_param: str = "max_tokens",
                    structured: StructuredOutputsParams | None = None, prompt_logprobs: int | None = None,
                    defaults: dict | None = None) -> SamplingParams:
    """The request's SamplingParams (its fan-out checked by `check_fan_out`); max_tokens_param names
    the field max_tokens came from in errors; `structured` its constraint (server/structured.py); `defaults`
    the sampling fields a request that leaves them out gets (ServerState.sampling_defaults), else OpenAI's."""
    d = defaults or {}

    def given(name: str, fallback: Any) -> Any:
        value = getattr(req, name)
        return d.get(name, fallback) if value is None else value

    try:
        return SamplingParams(
            n=req.n,
            max_tokens=max_tokens,
            temperature=given("temperature", 1.0),
            top_p=given("top_p", 1.0),
            top_k=given("top_k", -1),
            seed=req.seed,
            stop=[] if req.stop is None else req.stop,  # "" is refused, as vLLM does, never read as no stop
            stop_token_ids=req.stop_token_ids or [],
            ignore_eos=req.ignore_eos,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            presence_penalty=given("presence_penalty", 0.0),
            frequency_penalty=given("frequency_penalty", 0.0),
            include_stop_str_in_output=req.include_stop_str_in_output,
            skip_special_tokens=req.skip_special_tokens,
            logit_bias=req.logit_bias,
            allowed_token_ids=req.allowed_token_ids,
            bad_words=req.bad_words or [],
            repetition_penalty=given("repetition_penalty", 1.0),
            min_p=given("min_p", 0.0),
            min_tokens=req.min_tokens or 0,
            structured_outputs=structured,
        )
    except SamplingParamsError as e:
        message = clip(e, MAX_REASON_CHARS)  # it quotes values, and a logit_bias id may have 4,000 digits
        if e.param == "max_tokens" and max_tokens_param != "max_tokens":
            raise bad_request(message.replace("max_tokens", max_tokens_param), param=max_tokens_param) from None
        raise bad_request(message, param=e.param) from None


async def start(gen: Generation, constraint_source: str | None) -> None:
    """gen.start(); the engine's refusal of a constraint names the field it came from (response_format,
    structured_outputs or tools), not the engine's own name for it."""
    try:
        await gen.start()
    except ApiError as e:
        if e.param == "structured_outputs" and constraint_source is not None:
            e.param = constraint_source
        raise


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def watch_disconnect(receive: Receive, on_disconnect: Callable[[], None]) -> asyncio.Task:
    """A task calling `on_disconnect` when the client goes away; cancel it when the response is done."""

    async def watch() -> None:
        await _wait_disconnect(receive)
        on_disconnect()

    return asyncio.create_task(watch())


async def run_to_completion(request: Request, gen: Generation) -> None:
    """Collects `gen`, aborting it if the client disconnects first."""
    watcher = watch_disconnect(request.receive, gen.on_disconnect)
    try:
        await gen.collect()
    finally:
        watcher.cancel()


def token_ids_fields(req: Any, gen: Generation, choice: Any, token_ids: list[int], with_prompt: bool = True) -> dict[str, Any]:
    """vLLM's `return_token_ids` extension: output ids (a stream chunk's new ones) and the prompt's ids."""
    if not req.return_token_ids:
        return {}
    fields: dict[str, Any] = {"token_ids": list(token_ids)}
    if with_prompt:
        fields["prompt_token_ids"] = gen.prompts[choice.prompt_index]
    return fields


def require_tokenizer(state: ServerState, what: str, param: str | None, hint: str = "") -> Any:
    """The checkpoint's tokenizer, or a 400 saying `what` needs one (a checkpoint may ship without:
    it then serves token-id prompts only, as the Python API does)."""
    if state.tokenizer is None:
        raise bad_request(f"{what} needs a tokenizer and this checkpoint has none" + (f": {hint}" if hint else ""),
                          param=param, code="no_tokenizer")
    return state.tokenizer


def token_decoder(state: ServerState) -> Callable[[list[int]], str]:
    """The text of a sequence of token ids (an echoed prompt); a checkpoint without a tokenizer names
    each token as vLLM's --return-tokens-as-token-ids does ("token_id:123"). A token's own text in
    logprobs is state.token_texts'."""
    if state.tokenizer is not None:
        return state.tokenizer.decode
    return lambda ids: "".join(f"token_id:{t}" for t in ids)


LOGPROB_FLOOR = -9999.0  # vLLM's: JSON has no -inf or NaN, so a masked token's logprob reads as this


def json_logprob(lp: float) -> float:
    """A logprob JSON can carry: -inf and NaN (a masked or broken row) become LOGPROB_FLOOR."""
    return lp if lp >= LOGPROB_FLOOR else LOGPROB_FLOOR  # NaN fails the comparison too


def sse(data: Any) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"


class StreamChunks:
    """The SSE chunks of one streamed completion or chat completion: one choice per chunk, each with
    `usage: null` when the client asked for `stream_options.include_usage`, and the usage chunk at
    the end. `fields` is the endpoint's payload ({"text": ...} or {"delta": ...}). With
    `return_token_ids`, a completion choice's first chunk carries its `prompt_token_ids` too, as
    vLLM's does (the non-streamed choice carries them, and a stream had no way to get them)."""

    def __init__(self, req: Any, gen: Generation, obj: str, model: str):
        self.req, self.gen = req, gen
        self._prompt_ids_due = {c.index for c in gen.choices.values()} if obj == "text_completion" else set()
        self.include_usage = bool(req.stream_options and req.stream_options.include_usage)
        self.continuous_usage = self.include_usage and req.stream_options.continuous_usage_stats
        self.base = {"id": gen.response_id, "object": obj, "created": created(), "model": model}

    def choice(self, choice: Any, fields: dict[str, Any], logprobs: Any = None, finish: str | None = None,
               stop: Any = None, new_ids: list[int] | None = None, top: dict[str, Any] | None = None) -> bytes:
        """One choice's chunk; `top`: fields of the chunk itself (a chat's first chunks carry prompt_token_ids)."""
        with_prompt = choice.index in self._prompt_ids_due
        self._prompt_ids_due.discard(choice.index)
        body = dict(self.base, choices=[{"index": choice.index, **fields, "logprobs": logprobs, "finish_reason": finish,
                                         "stop_reason": stop,
                                         **token_ids_fields(self.req, self.gen, choice, new_ids or [], with_prompt)}],
                    **(top or {}))
        if self.continuous_usage:  # vLLM's continuous_usage_stats: this choice's counts so far
            prompt = len(self.gen.prompts[choice.prompt_index])
            body["usage"] = {"prompt_tokens": prompt, "completion_tokens": len(choice.token_ids),
                             "total_tokens": prompt + len(choice.token_ids)}
        elif self.include_usage:
            body["usage"] = None
        return sse(body)

    def usage(self, usage: dict[str, Any]) -> list[bytes]:
        """The closing usage chunk, when asked for."""
        return [sse(dict(self.base, choices=[], usage=usage))] if self.include_usage else []


class SSEResponse(Response):
    """A text/event-stream response bound to a Generation: the chunks of `events`, then `data: [DONE]`.
    A disconnect aborts the generation (even while it waits in the queue), and the generation is
    closed however the response ends. An error mid-stream is one `data: {"error": ...}` event before
    [DONE], as vLLM sends it: an ApiError as it is, anything else as a generic 500 (`internal_error`)."""

    def __init__(self, events: AsyncIterator[bytes], gen: Generation):
        super().__init__(status_code=200, media_type="text/event-stream")
        self.events = events
        self.gen = gen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = watch_disconnect(receive, self.gen.on_disconnect)
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                   *((k.lower().encode(), v.encode()) for k, v in id_headers(self.gen).items())]
        chunks = self._chunks(f"{scope.get('method', 'POST')} {scope.get('path', '')}")
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async for chunk in chunks:
                if not self.gen.disconnected:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not self.gen.disconnected:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # from send: the client is gone (errors of the events end inside _chunks)
            self.gen.on_disconnect()
        finally:
            watcher.cancel()
            await chunks.aclose()
            await self.events.aclose()  # type: ignore[attr-defined]
            self.gen.close()

    async def _chunks(self, where: str) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.events:
                yield chunk
        except ApiError as e:
            yield sse(e.body())
        except Exception as e:
            yield sse(internal_error(e, where, self.gen.response_id).body())
        yield SSE_DONE


def created() -> int:
    return int(time.time())


def kv_answer(gen: Generation) -> dict[str, Any]:
    """{"kv_transfer_params": ...} for a prefill answered for a remote decoder (vLLM puts it at the
    response's top level, where vllm-router reads it), else nothing."""
    params = next((c.kv_transfer_params for c in gen.choices.values() if c.kv_transfer_params is not None), None)
    return {"kv_transfer_params": params} if params is not None else {}
