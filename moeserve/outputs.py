"""What the engine hands back per request: plain data, safe to encode across a socket."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

# A token's logprob entry: the chosen token's logprob, its top alternatives as (token_id, logprob), most
# likely first, and the chosen token's rank (how many vocabulary entries are at least as likely: 1 is the
# most likely; vLLM's count, so a tie ranks after every token it ties with).
TokenLogprob = tuple[float, list[tuple[int, float]], int]


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


@dataclass
class Logprob:
    """vLLM's per-token logprob entry: `logprob`, `rank` (1 = the most likely token; the engine ranks
    the chosen token over the whole vocabulary, the alternatives are ranked by their order) and
    `decoded_token`."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    """One sampled sequence of a prompt, as vLLM's `CompletionOutput`. `logprobs` (with
    SamplingParams.logprobs) has one dict per token, {token id: Logprob}: the chosen token and its top
    alternatives; `cumulative_logprob` is the sum of the chosen tokens' logprobs (None without logprobs)."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None
    stop_reason: str | int | None = None

    def finished(self) -> bool:
        """vLLM's (a method, where RequestOutput.finished is an attribute)."""
        return self.finish_reason is not None


@dataclass
class LLMOutput:
    """What `LLM.generate` / `LLM.chat` return per prompt: vLLM's `RequestOutput` shape (`outputs`, one
    CompletionOutput per sample, in sample order), plus moeserve's flat fields of the first sample
    (`text`, `token_ids`, `logprobs`, `finish_reason`, ...) from the engine's per-sequence RequestOutput.

    prompt: the prompt's text (rendered, for a chat), None for a prompt given as token ids.
    prompt_logprobs (with SamplingParams.prompt_logprobs): vLLM's shape, one entry per prompt token,
    None for the first, else {token id: Logprob}: the prompt token first, then its top alternatives."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    sequences: list[RequestOutput] = field(repr=False)  # the engine's final output of each sample
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None

    @property
    def finished(self) -> bool:
        return all(s.finished for s in self.sequences)

    @property
    def num_cached_tokens(self) -> int:
        """vLLM's name: prompt tokens the prefix cache held (the most any sample found)."""
        return max(s.num_cached_prompt_tokens for s in self.sequences)

    @functools.cached_property
    def logprobs(self) -> list[tuple[float, list[tuple[int, float]]]] | None:
        """The first sample's (logprob, top alternatives) per token: moeserve's flat shape, without
        the rank (`outputs[i].logprobs` has it, as `Logprob.rank`)."""
        return _pairs(self.sequences[0].logprobs)

    # moeserve's flat fields: the first sample's
    text = property(lambda self: self.sequences[0].text)
    token_ids = property(lambda self: self.sequences[0].token_ids)
    finish_reason = property(lambda self: self.sequences[0].finish_reason)
    stop_reason = property(lambda self: self.sequences[0].stop_reason)
    error = property(lambda self: self.sequences[0].error)
    num_cached_prompt_tokens = property(lambda self: self.sequences[0].num_cached_prompt_tokens)


def _pairs(entries: list[TokenLogprob | None] | None) -> list | None:
    """TokenLogprobs less their rank: the flat fields' documented shape, (logprob, top alternatives)."""
    return None if entries is None else [None if e is None else (e[0], e[1]) for e in entries]
