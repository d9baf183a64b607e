"""Every error the HTTP API answers, in the OpenAI shape {"error": {message, type, param, code}}.

Messages are written here or by validation code we own; exception text from elsewhere is never
echoed, so no traceback, file path or memory address reaches a client.
"""
from __future__ import annotations

from typing import Any

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
    return ApiError(503, message, code="engine_unavailable", headers={"Retry-After": "5"})


def from_request_error(e: Any) -> ApiError:
    """moeserve.errors.RequestError (or the engine's rejection of a request) -> ApiError."""
    headers = {"Retry-After": "1"} if e.status == 429 else None
    return ApiError(e.status, e.message, param=e.param, code=e.code, type=e.type, headers=headers)
