"""Errors a user can cause, carrying what the OpenAI error shape needs (status, type, param, code)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A user-facing configuration mistake; the message says what to change."""


class RequestError(ValueError):
    """A request the engine refuses; nothing else is affected. Maps to an OpenAI-shaped 4xx."""

    status: int = 400
    type: str = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


def context_length_error(max_model_len: int, prompt_len: int, max_tokens: int | None, param: str = "max_tokens",
                         prompt_param: str = "prompt") -> RequestError | None:
    """The refusal of a prompt of `prompt_len` tokens that asks for `max_tokens` more (None: what is
    left of the context), or None when it fits. A prompt that fills the context is named (`prompt_param`),
    since no max_tokens could help; otherwise the max_tokens field (`param`). The one rule of the
    front end (which answers before the engine sees the request) and the scheduler."""
    if prompt_len >= max_model_len:
        return RequestError(f"this model's maximum context length is {max_model_len} tokens and the prompt has "
                            f"{prompt_len}, which leaves no room for a completion: shorten the prompt",
                            param=prompt_param, code="context_length_exceeded")
    if max_tokens is not None and prompt_len + max_tokens > max_model_len:
        return RequestError(f"this model's maximum context length is {max_model_len} tokens; the prompt has "
                            f"{prompt_len} tokens and {param} asks for {max_tokens} more: shorten the prompt or "
                            f"lower {param}", param=param, code="context_length_exceeded")
    return None


class QueueFullError(RequestError):
    status = 429
    type = "rate_limit_error"


class EngineDeadError(RuntimeError):
    """The engine (or one of its ranks) died or stopped making progress; pending requests fail."""
