"""What the engine hands back per request: plain data, safe to encode across a socket."""
from __future__ import annotations

from dataclasses import dataclass, field

# A token's logprob entry: the chosen token's logprob plus its top alternatives as (token_id, logprob).
TokenLogprob = tuple[float, list[tuple[int, float]]]


@dataclass
class RequestOutput:
    """One request's state after a step.

    new_token_ids / delta_text / new_logprobs are what this step added (for streaming);
    token_ids / text are the whole output so far. finish_reason is None while running, else one of
    "stop", "length", "abort", "error" (error carries a message in `error`).
    prompt_logprobs: only for requests with SamplingParams.prompt_logprobs, from the output that
    carries the first generated token on (the prompt is fully computed by then): one entry per
    prompt token, None for the first, else (logprob, top-N alternatives) as in `logprobs`.
    """

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    new_token_ids: list[int] = field(default_factory=list)
    delta_text: str = ""
    logprobs: list[TokenLogprob] | None = None
    new_logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    error: str | None = None
    num_cached_prompt_tokens: int = 0
    prompt_logprobs: list[TokenLogprob | None] | None = None
    error_status: int = 500  # the HTTP status of `error`: 503 when a peer (a prefill server) failed
    # a prefill for a remote decoder: the kv_transfer_params that name its pinned blocks (final output)
    kv_transfer_params: dict | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
