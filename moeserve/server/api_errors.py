"""Every error the HTTP API answers, in the OpenAI shape {"error": {message, type, param, code}}.

Messages are written here or by validation code we own. The one exception is why the engine died
(a rank's error, a collective's failure), which an operator needs to see in /health and the 503s;
it passes through `public_reason` first, so no file path or memory address reaches a client
(gloo's errors, for one, name the C++ source file they come from).
"""
from __future__ import annotations

import re
from typing import Any

_PATH = re.compile(r"\[?(?<![\w.])(?:[A-Za-z]:)?/(?:[\w.@+~-]+/)+[\w.@+~-]*(?::\d+)?\]?")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
MAX_REASON_CHARS = 300


def public_reason(text: str) -> str:
    """An engine failure's text with file paths and memory addresses cut out, at most MAX_REASON_CHARS."""
    text = _ADDRESS.sub("<address>", _PATH.sub("", text))
    text = re.sub(r"\s{2,}", " ", text).strip()
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."

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


def from_request_error(e: Any) -> ApiError:
    """moeserve.errors.RequestError (or the engine's rejection of a request) -> ApiError."""
    headers = {"Retry-After": "1"} if e.status == 429 else None
    return ApiError(e.status, e.message, param=e.param, code=e.code, type=e.type, headers=headers)
