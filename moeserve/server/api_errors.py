"""Every error the HTTP API answers, in the OpenAI shape {"error": {message, type, param, code}}.

Messages are written here or by validation code we own. The exceptions are the engine's words: why
it died (a rank's error, a collective's failure), which an operator needs to see in /health and the
503s, and why it failed one request; both pass through `public_reason` first, so no file path or
memory address reaches a client (gloo's errors, for one, name the C++ source file they come from).
An unexpected exception's text never leaves: `internal_error` answers a generic message with an id
and logs that id with the traceback.
"""
from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from moeserve.engine.chat_prompt import ChatPromptError

_PATH = re.compile(r"\[?(?<![\w.])(?:[A-Za-z]:)?/(?:[\w.@+~-]+/)+[\w.@+~-]*(?::\d+)?\]?")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
MAX_REASON_CHARS = 300
logger = logging.getLogger("moeserve.server")


def public_reason(text: str) -> str:
    """An engine failure's text with file paths and memory addresses cut out, at most MAX_REASON_CHARS."""
    text = _ADDRESS.sub("<address>", _PATH.sub("", text))
    text = re.sub(r"\s{2,}", " ", text).strip()
    return clip(text, MAX_REASON_CHARS)


MAX_ECHO_CHARS = 40  # of a client's value quoted in an error message (a model name, a part type)


def clip(value: object, limit: int = MAX_ECHO_CHARS) -> str:
    """`value` as text of at most `limit` characters: an error message quotes what the client sent,
    and a 100 KB model name must not come back as a 100 KB message."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

from fastapi.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable_error",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "invalid_request_error")
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unavailable(message: str = "the engine is not available") -> ApiError:
    """A 503; `message` may carry an engine failure's text, so it is passed through public_reason."""
    return ApiError(503, public_reason(message), code="engine_unavailable", headers={"Retry-After": "5"})


def internal_error(e: BaseException, where: str, request_id: str | None = None) -> ApiError:
    """A 500 for an unexpected exception: the client reads a generic message naming an id, the log
    has that id with the full traceback. `request_id`: the response's own id when it has one."""
    request_id = request_id or f"err-{uuid.uuid4().hex}"
    logger.error("internal error on %s (request id %s)", where, request_id, exc_info=e)
    return ApiError(500, f"internal server error (request id {request_id})", code="internal_error")


def engine_error(message: str, request_id: str) -> ApiError:
    """A 500 for a request the engine ended with an error (e.g. one that can never fit the KV cache)."""
    logger.warning("the engine failed request %s: %s", request_id, message)
    return ApiError(500, public_reason(message), code="engine_error")


def refusing(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(...) with its ChatPromptError (engine/chat_prompt.py's checks of messages, tools and template
    variables, which LLM.chat shares) as the 400 that names the same field."""
    try:
        return fn(*args, **kwargs)
    except ChatPromptError as e:
        raise bad_request(str(e), param=e.param) from None


def from_request_error(e: Any) -> ApiError:
    """moeserve.errors.RequestError (or the engine's rejection of a request) -> ApiError."""
    headers = {"Retry-After": "1"} if e.status == 429 else None
    return ApiError(e.status, e.message, param=e.param, code=e.code, type=e.type, headers=headers)
