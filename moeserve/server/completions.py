"""POST /v1/completions."""
from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi.responses import JSONResponse
from starlette.requests import Request

from moeserve.engine.token_texts import context_before
from moeserve.server import common, kv_params, prompt_logprobs, structured
from moeserve.server.api_errors import bad_request
from moeserve.server.common import ServerState
from moeserve.server.generation import Choice, Generation
from moeserve.server.protocol import CompletionRequest


def _prompt_list(prompt: Any) -> list[Any]:
    """Every accepted prompt shape -> a list of prompts (strings or token-id lists)."""
    return [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else prompt


def _prompts(state: ServerState, prompt: Any, add_special_tokens: bool = True) -> list[list[int]]:
    """Every accepted prompt shape -> token-id lists (tokenized like the Python API's LLM.generate)."""
    prompt = _prompt_list(prompt)
    if not prompt or any(p == "" for p in prompt):
        raise bad_request("prompt must not be empty", param="prompt")
    if any(isinstance(p, str) for p in prompt):
        common.require_tokenizer(state, "a text prompt", "prompt", hint="send token ids instead")
    ids = [state.tokenizer.encode(p, add_special_tokens=add_special_tokens) if isinstance(p, str) else list(p)
           for p in prompt]
    if any(not p for p in ids):
        raise bad_request("prompt must not be empty", param="prompt")
    for p in ids:
        common.check_token_ids(state, p, "prompt")
    return ids


def _decode_all(state: ServerState, prompts: list[list[int]]) -> list[str]:
    decode = common.token_decoder(state)  # without a tokenizer: "token_id:N" names, as logprobs give
    return [decode(p) for p in prompts]


def _refuse_unsupported(req: CompletionRequest) -> None:
    if req.suffix:
        raise bad_request("suffix is not supported", param="suffix")
    if req.best_of is not None and req.best_of != req.n:
        raise bad_request("best_of other than n is not supported", param="best_of")


def _echo_only(req: CompletionRequest) -> bool:
    """echo with max_tokens 0 scores the prompt only (OpenAI and vLLM allow it; lm-eval sends it): the
    engine generates one token, which the response leaves out."""
    return req.echo and req.max_tokens == 0


def _logprobs(state: ServerState, entries: Sequence[tuple[Any, ...]], offset: int, top_n: int | None = None,
              context: Sequence[int] = ()) -> dict[str, Any]:
    """OpenAI legacy logprobs for (token, logprob, top[, rank]) entries, at most `top_n` alternatives
    each (prompt logprobs may have been asked with more); text offsets count from `offset`; `context`
    the chosen tokens before entries[0] (engine/token_texts.py: the texts vLLM shows).
    An entry without a logprob (the first prompt token) gets null token_logprobs and top_logprobs."""
    tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
    for (_, lp, top, *_), (text, alternative_texts) in zip(entries, state.token_texts.positions(entries, context, top_n)):
        tokens.append(text)
        lp = None if lp is None else common.json_logprob(lp)
        token_logprobs.append(lp)
        if lp is None:
            top_logprobs.append(None)
        else:
            alternatives = {t: common.json_logprob(v) for t, (_, v) in zip(alternative_texts, top)}
            alternatives.setdefault(text, lp)
            top_logprobs.append(alternatives)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


def _implied_prompt_logprobs(req: CompletionRequest) -> int | None:
    """echo with logprobs k scores the prompt with k alternatives (vLLM's default for prompt_logprobs)."""
    return req.logprobs if req.echo else None


def _usage(gen: Generation, req: CompletionRequest) -> dict[str, Any]:
    """gen.usage(), less the one token an echo-only request generates and leaves out."""
    usage = gen.usage()
    if _echo_only(req):
        usage.update(completion_tokens=0, total_tokens=usage["prompt_tokens"])
    return usage


def _echo_only_finish(reason: str | None) -> str | None:
    """An echo-only choice ends by length (its one hidden token ran out) unless it failed."""
    return "length" if reason in ("stop", "length") else reason


def _text_end(logprobs: dict[str, Any] | None) -> int:
    """Where the generated tokens' text offsets start after echoed prompt `logprobs`: one running sum
    of token texts through prompt and output, as vLLM counts. The prompt's own text can differ in
    length (a first prompt token inside a character shows "\ufffd"), and offsets that restarted at
    its length went backwards."""
    return sum(len(t) for t in logprobs["tokens"]) if logprobs is not None else 0


def _concat(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    return {k: first[k] + second[k] for k in first}


def _response(state: ServerState, gen: Generation, req: CompletionRequest, prompt_texts: list[str]) -> dict[str, Any]:
    echo_only = _echo_only(req)
    choices = []
    for c in sorted(gen.choices.values(), key=lambda c: c.index):
        prefix = prompt_texts[c.prompt_index] if req.echo else ""
        generated = ([], "", []) if echo_only else (c.logprobs, c.text, c.token_ids)
        logprobs = None
        if req.logprobs is not None:
            scored = _logprobs(state, c.prompt_logprobs or [], 0, req.logprobs) if req.echo else None
            logprobs = _logprobs(state, generated[0], _text_end(scored))
            if scored is not None:
                logprobs = _concat(scored, logprobs)
        finish = _echo_only_finish(c.finish_reason) if echo_only else c.finish_reason
        choice = {"index": c.index, "text": prefix + generated[1], "logprobs": logprobs,
                  "finish_reason": finish, "stop_reason": None if echo_only else c.stop_reason,
                  **common.token_ids_fields(req, gen, c, generated[2])}
        if prompt_logprobs.returned(req, _implied_prompt_logprobs(req)):
            choice["prompt_logprobs"] = prompt_logprobs.to_json(state, c.prompt_logprobs)
        choices.append(choice)
    return {"id": gen.response_id, "object": "text_completion", "created": common.created(),
            "model": state.model_name, "choices": choices, "usage": _usage(gen, req), **common.kv_answer(gen)}


async def _stream(state: ServerState, gen: Generation, req: CompletionRequest, prompt_texts: list[str]) -> AsyncIterator[bytes]:
    """The data chunks; SSEResponse ends them with [DONE], after an error event if one is raised."""
    chunks = common.StreamChunks(req, gen, "text_completion", state.model_name)

    def chunk(choice: Choice, text: str, logprobs: Any = None, finish: str | None = None, stop: Any = None,
              new_ids: list[int] | None = None) -> bytes:
        return chunks.choice(choice, {"text": text}, logprobs, finish, stop, new_ids)

    echo_only = _echo_only(req)
    echoed: set[int] = set()
    if req.echo and req.logprobs is None:  # with logprobs, a choice's echo waits for its prompt logprobs
        for c in sorted(gen.choices.values(), key=lambda c: c.index):
            yield chunk(c, prompt_texts[c.prompt_index])
            echoed.add(c.index)
    sent_logprobs: dict[int, int] = {}
    offsets: dict[int, int] = {}
    async for choice, out in gen.events():
        if req.echo and choice.index not in echoed:  # the first output of a choice carries its prompt logprobs
            echoed.add(choice.index)
            prompt_text = prompt_texts[choice.prompt_index]
            scored = _logprobs(state, choice.prompt_logprobs or [], 0, req.logprobs)
            yield chunk(choice, prompt_text, scored)
            offsets[choice.index] = _text_end(scored)
        if echo_only:
            if out.finish_reason is not None:
                yield chunk(choice, "", None, _echo_only_finish(out.finish_reason))
            continue
        logprobs = None
        if req.logprobs is not None:
            start = sent_logprobs.get(choice.index, 0)
            logprobs = _logprobs(state, choice.logprobs[start:], offsets.get(choice.index, 0),
                                 context=context_before(choice.logprobs, start))
            sent_logprobs[choice.index] = len(choice.logprobs)
            offsets[choice.index] = offsets.get(choice.index, 0) + sum(len(t) for t in logprobs["tokens"])
        text = gen.text_to_stream(choice)
        if out.new_token_ids or text or out.finish_reason:  # one chunk per step with tokens
            yield chunk(choice, text, logprobs, out.finish_reason, out.stop_reason, out.new_token_ids)
    for usage in chunks.usage(_usage(gen, req)):
        yield usage


async def create_completion(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await common.read_request(request, state, CompletionRequest)
    client_id = common.client_request_id(request, req.request_id)
    common.check_model(state, req.model)
    common.check_request_fields(req, state)
    req.logprobs = common.resolve_logprobs(state, req.logprobs, "logprobs")
    prompt_logprobs.check(req, state)
    _refuse_unsupported(req)
    common.check_fan_out(state, req.n, len(_prompt_list(req.prompt)))
    has_text = isinstance(req.prompt, str) or any(isinstance(p, str) for p in req.prompt)
    # token-id prompts skip the tokenizer thread, so they never queue behind someone's long text
    if has_text:
        text_bytes = [len(p.encode()) for p in _prompt_list(req.prompt) if isinstance(p, str)]
        if req.truncate_prompt_tokens is None:  # truncation keeps a tail of any prompt: nothing is refused early
            common.refuse_unfittable(state, max(text_bytes), req.max_tokens, "max_tokens", "prompt")
        prompts = await common.tokenize(state, _prompts, req.prompt, req.add_special_tokens, text_bytes=sum(text_bytes))
    else:
        prompts = _prompts(state, req.prompt)
    prompts = common.truncate_prompts(state, prompts, req.truncate_prompt_tokens, req.truncation_side,
                                     req.max_tokens or None)
    max_tokens = common.resolve_max_tokens(state, [len(p) for p in prompts], req.max_tokens, "max_tokens", "prompt")
    if _echo_only(req):
        if max(len(p) for p in prompts) >= state.max_model_len:
            raise bad_request(
                f"echo with max_tokens 0 generates one hidden token, so a prompt it scores may have at most "
                f"{state.max_model_len - 1} tokens (max_model_len {state.max_model_len} - 1)", param="prompt")
        max_tokens = 1  # generated and left out of the response
    constraint, source = structured.request_constraint(req)
    params = common.sampling_params(req, max_tokens, req.logprobs, structured=constraint,
                                    defaults=state.sampling_defaults,
                                    prompt_logprobs=prompt_logprobs.wanted(req, _implied_prompt_logprobs(req)))
    prompt_texts = await common.tokenize(state, _decode_all, prompts, text_bytes=4 * sum(map(len, prompts))) if req.echo else []
    kv = await kv_params.check(req.kv_transfer_params, prompts, req.n, req.stream,
                                 state.client.config.kv_transfer)
    gen = Generation(state.client, state.metrics, common.new_id("cmpl"), prompts, params,
                     buffer_limit=state.config.max_stream_buffer_bytes, kv_transfer=kv,
                     kv_taken=state.kv_taken, response_id=common.response_id("cmpl", client_id),
                     client_id=client_id)
    await common.start(gen, source)
    if req.stream:
        return common.SSEResponse(_stream(state, gen, req, prompt_texts), gen)
    await common.run_to_completion(request, gen)
    return JSONResponse(_response(state, gen, req, prompt_texts), headers=common.id_headers(gen))
