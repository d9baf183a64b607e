"""POST /tokenize and /detokenize, vLLM's extensions: a client counts or inspects tokens exactly as
the generation endpoints will, without generating.

    /tokenize   {"prompt": str, "add_special_tokens": true}           as /v1/completions tokenizes
                {"messages": [...], "add_generation_prompt": true}     as /v1/chat/completions renders
                -> {"count", "max_model_len", "tokens", "token_strs" (null unless return_token_strs)}
    /detokenize {"tokens": [int, ...]} -> {"prompt": str}
"""
from __future__ import annotations

from typing import Any

from starlette.requests import Request

from moeserve.server import common
from moeserve.server.chat import check_messages, message_bytes, render_messages
from moeserve.server.common import ServerState
from moeserve.server.protocol import DetokenizeRequest, TokenizeChatRequest, TokenizeRequest


def _encode(state: ServerState, req: TokenizeRequest | TokenizeChatRequest) -> list[int]:
    if isinstance(req, TokenizeChatRequest):
        return render_messages(state, req)
    return common.require_tokenizer(state, "/tokenize", "prompt").encode(req.prompt, add_special_tokens=req.add_special_tokens)


async def tokenize(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await common.read_request(
        request, state, lambda data: TokenizeRequest if data.get("messages") is None else TokenizeChatRequest)
    common.check_model(state, req.model)
    common.require_tokenizer(state, "/tokenize", "messages" if isinstance(req, TokenizeChatRequest) else "prompt")
    if isinstance(req, TokenizeChatRequest):
        check_messages(req)
    ids = await common.tokenize(state, _encode, req, text_bytes=message_bytes(req) if isinstance(req, TokenizeChatRequest)
                                else len(req.prompt))
    strs = state.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
    return {"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids, "token_strs": strs}


async def detokenize(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await common.read_request(request, state, DetokenizeRequest)
    common.check_model(state, req.model)
    common.check_token_ids(state, req.tokens, "tokens")
    tokenizer = common.require_tokenizer(state, "/detokenize", "tokens")
    return {"prompt": await common.tokenize(state, lambda lane, ids: lane.tokenizer.decode(ids), req.tokens,
                                            text_bytes=4 * len(req.tokens))}
