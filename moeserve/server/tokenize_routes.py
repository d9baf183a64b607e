"""POST /tokenize and /detokenize, vLLM's extensions: a client counts or inspects tokens exactly as
the generation endpoints will, without generating.

    /tokenize   {"prompt": str, "add_special_tokens": true}           as /v1/completions tokenizes
                {"messages": [...], "add_generation_prompt": true,     as /v1/chat/completions renders
                 "tools": [...]}                                       (not both: a 400)
                -> {"count", "max_model_len", "tokens", "token_strs" (null unless return_token_strs)}
    /detokenize {"tokens": [int, ...]} -> {"prompt": str}
    GET /tokenizer_info -> the tokenizer's configuration as vLLM serves it: "tokenizer_class", its
                {eos,bos,pad,unk}_token, "chat_template" (the one the chat route renders), the other
                tokenizer_config.json fields, and "added_tokens_decoder"; no file paths. lm-eval's
                local-completions finds it (with /tokenize and /detokenize) and needs no tokenizer name.
"""
from __future__ import annotations

from typing import Any

from starlette.requests import Request

from moeserve.engine import chat_prompt
from moeserve.engine.builtin_model import CHAT_TEMPLATE
from moeserve.server import common
from moeserve.server.api_errors import bad_request, refusing
from moeserve.server.chat import check_messages, message_bytes, render_messages
from moeserve.server.common import ServerState
from moeserve.server.protocol import DetokenizeRequest, TokenizeChatRequest, TokenizeRequest


def _encode(state: ServerState, req: TokenizeRequest | TokenizeChatRequest) -> list[int]:
    if isinstance(req, TokenizeChatRequest):
        return render_messages(state, req)
    return common.require_tokenizer(state, "/tokenize", "prompt").encode(req.prompt, add_special_tokens=req.add_special_tokens)


def _request_kind(data: dict[str, Any]) -> type:
    """A text prompt or chat messages; both is a question with two answers (vLLM tokenizes the prompt,
    which the chat endpoint would not serve), so it is refused."""
    if data.get("messages") is None:
        return TokenizeRequest
    if data.get("prompt") is not None:
        raise bad_request("/tokenize takes a prompt or messages, not both", param="prompt")
    return TokenizeChatRequest


async def tokenize(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await common.read_request(request, state, _request_kind)
    common.check_model(state, req.model)
    common.require_tokenizer(state, "/tokenize", "messages" if isinstance(req, TokenizeChatRequest) else "prompt")
    if isinstance(req, TokenizeChatRequest):
        check_messages(req)
        if req.tools:
            refusing(chat_prompt.check_tools, req.tools)
    ids = await common.tokenize(state, _encode, req, text_bytes=message_bytes(req) if isinstance(req, TokenizeChatRequest)
                                else len(req.prompt))
    strs = state.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
    return {"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids, "token_strs": strs}


async def detokenize(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await common.read_request(request, state, DetokenizeRequest)
    common.check_model(state, req.model)
    common.check_token_ids(state, req.tokens, "tokens")
    common.require_tokenizer(state, "/detokenize", "tokens")
    return {"prompt": await common.tokenize(state, lambda lane, ids: lane.tokenizer.decode(ids), req.tokens,
                                            text_bytes=4 * len(req.tokens))}


# tokenizer_config.json fields that are paths on the server's disk or loader switches, not the tokenizer
_NOT_SERVED = frozenset({"vocab_file", "merges_file", "tokenizer_file", "name_or_path", "trust_remote_code",
                         "cache_dir", "local_files_only", "_commit_hash", "token", "revision", "is_local"})


def _plain(value: Any) -> Any:
    """JSON-able copy: AddedToken -> its text, containers recursed, anything else its str()."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return getattr(value, "content", None) or str(value)


def tokenizer_info_of(tokenizer: Any, max_model_len: int) -> dict[str, Any]:
    """What GET /tokenizer_info answers for `tokenizer` (a transformers tokenizer) on a server whose
    context is max_model_len tokens (model_max_length says the smaller of the two)."""
    info = {k: _plain(v) for k, v in (getattr(tokenizer, "init_kwargs", None) or {}).items() if k not in _NOT_SERVED}
    for name in ("eos_token", "bos_token", "pad_token", "unk_token"):
        info[name] = _plain(getattr(tokenizer, name, None))
    info["added_tokens_decoder"] = {str(i): {"content": t.content, "special": t.special}
                                    for i, t in tokenizer.added_tokens_decoder.items()}
    info["chat_template"] = getattr(tokenizer, "chat_template", None) or CHAT_TEMPLATE
    info["model_max_length"] = min(int(getattr(tokenizer, "model_max_length", None) or max_model_len), max_model_len)
    info["tokenizer_class"] = type(tokenizer).__name__
    return info


async def tokenizer_info(request: Request) -> Any:
    state: ServerState = request.app.state.server
    return tokenizer_info_of(common.require_tokenizer(state, "/tokenizer_info", None), state.max_model_len)
