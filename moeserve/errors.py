"""Errors a user can cause, carrying what the OpenAI error shape needs (status, type, param, code)."""
from __future__ import annotations


class RequestError(ValueError):
    """A request the engine refuses; nothing else is affected. Maps to an OpenAI-shaped 4xx."""

    status: int = 400
    type: str = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class QueueFullError(RequestError):
    status = 429
    type = "rate_limit_error"


class EngineDeadError(RuntimeError):
    """The engine (or one of its ranks) died or stopped making progress; pending requests fail."""
