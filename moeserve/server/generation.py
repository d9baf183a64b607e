"""One HTTP request's engine requests: fan-out (prompts x n), merged outputs, abort, metrics.

Choice `i` of prompt `p` is engine request `<id>-<p*n+i>`, with `params.for_choice(i)`: with a seed,
choice i samples with `engine_seed(seed, i)` so that n > 1 gives n different samples that are still
reproducible (LLM.generate's sample i runs with the same params).

Outputs wait in an `OutputQueue` until the response takes them. A stream's response takes the next
only once the previous chunk is written, so a client that stops reading left them piling up without
end (n 128, max_tokens 4000, logprobs 20: the front end grew by half a gigabyte in two minutes). The queue counts what it holds; past `--max-stream-buffer-bytes` the request is
aborted, its engine requests freed and the queue emptied, with a warning in the log.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from moeserve.errors import EngineDeadError
from moeserve.sampling_params import SamplingParams
from moeserve.server import ipc
from moeserve.server.api_errors import ApiError, engine_error, from_request_error, unavailable
from moeserve.server.engine_client import EngineClient, EngineRejected
from moeserve.server.kv_params import TakenPins

logger = logging.getLogger("moeserve.server")
DEFAULT_BUFFER_LIMIT = 16 * 1024 * 1024  # ServerConfig.max_stream_buffer_bytes


def output_bytes(item: object) -> int:
    """About what an output costs to hold (Python objects: ids, text, logprob entries)."""
    if not isinstance(item, ipc.OutputDelta):
        return 0
    size = 200 + 2 * len(item.delta_text) + 32 * len(item.new_token_ids) + (2 * len(item.text) if item.text else 0)
    for entries in (item.new_logprobs or [], item.prompt_logprobs or []):
        size += sum(64 + 64 * len(e[1]) for e in entries if e is not None)
    return size


class OutputQueue:
    """A Generation's outputs not yet taken by its response, and their size (`output_bytes`). The
    first put that takes it past `limit` calls `on_overflow`; `bytes` goes into `gauge` (all requests)."""

    def __init__(self, limit: int, on_overflow: Callable[[int], None], gauge: Any = None, peak: Any = None):
        self.limit = limit
        self.on_overflow = on_overflow
        self.gauge, self.peak = gauge, peak
        self.bytes = 0
        self.overflowed = False
        self._items: asyncio.Queue = asyncio.Queue()

    def put_nowait(self, item: Any) -> None:
        size = output_bytes(item)
        self._items.put_nowait((item, size))
        self._count(size)
        if self.bytes > self.limit and not self.overflowed:
            self.overflowed = True
            self.on_overflow(self.bytes)

    async def get(self) -> Any:
        item, size = await self._items.get()
        self._count(-size)
        return item

    def clear(self) -> None:
        """Drops everything waiting: the memory comes back now, not when the client reads."""
        while not self._items.empty():
            self._count(-self._items.get_nowait()[1])

    def _count(self, delta: int) -> None:
        self.bytes += delta
        if self.gauge is not None:
            self.gauge.inc(delta)
        if self.peak is not None and delta > 0 and self.bytes > self.peak._value.get():
            self.peak.set(self.bytes)


@dataclass
class Choice:
    index: int
    prompt_index: int
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[tuple[int, float, list[list[Any]]]] = field(default_factory=list)  # (token, logprob, top)
    # with prompt logprobs: one (token, logprob, top, rank) per prompt token, all but the token None for the first
    prompt_logprobs: list[tuple[int, float | None, list[list[Any]] | None, int | None]] | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None  # when its latest tokens arrived (inter-token latency)
    num_cached_prompt_tokens: int = 0
    kv_transfer_params: dict[str, Any] | None = None  # a prefill's answer for its remote decoder
    sent: int = 0  # characters of `text` already streamed


class Generation:
    def __init__(self, client: EngineClient, metrics: Any, request_id: str, prompts: list[list[int]], params: SamplingParams,
                 buffer_limit: int = DEFAULT_BUFFER_LIMIT, kv_transfer: dict[str, Any] | None = None,
                 kv_taken: TakenPins | None = None, response_id: str | None = None, client_id: str | None = None):
        self.client = client
        self.kv_transfer = kv_transfer  # kv_transfer/params.to_plain, for every engine request (n is 1 then)
        self.kv_taken = kv_taken  # the server's record of the pins it took: a remote prefill's blocks are read once
        self.metrics = metrics
        self.request_id = request_id  # the engine requests' prefix: always the server's own
        self.response_id = response_id or request_id  # the response's `id` (common.response_id)
        self.client_id = client_id  # the client's X-Request-Id / request_id, echoed as X-Request-Id
        self.prompts = prompts
        self.params = params
        self.arrival = time.monotonic()
        self.queue = OutputQueue(buffer_limit, self._not_read, getattr(metrics, "stream_buffered", None),
                                 getattr(metrics, "stream_buffered_peak", None))
        n = params.n
        self.choices: dict[str, Choice] = {
            f"{request_id}-{p * n + i}": Choice(index=p * n + i, prompt_index=p) for p in range(len(prompts)) for i in range(n)
        }
        self.disconnected = False
        # A stop string may begin in text the engine already reported; streaming holds back this many
        # characters so that what was sent is never more than the final (stop-trimmed) text.
        self.hold = max((len(x) for x in params.stop), default=1) - 1

    async def start(self) -> None:
        """Admits every engine request or none: on any refusal the admitted ones are aborted."""
        if self.kv_taken is not None:
            self.kv_taken.take(self.kv_transfer)  # raises the stale 400 for a pin already taken here
        results = await asyncio.gather(
            *(
                self.client.add(rid, self.prompts[c.prompt_index], self.params.for_choice(c.index % self.params.n), self.queue,
                                owner=self.request_id, kv_transfer=self.kv_transfer)
                for rid, c in self.choices.items()
            ),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            self.client.abort(list(self.choices))
            if self.kv_taken is not None:
                self.kv_taken.give_back(self.kv_transfer)  # refused before reading anything
            raise _api_error(errors[0])
        self.metrics.on_admitted(sum(len(self.prompts[c.prompt_index]) for c in self.choices.values()))

    def unfinished(self) -> list[str]:
        return [rid for rid, c in self.choices.items() if c.finish_reason is None]

    async def events(self) -> AsyncIterator[tuple[Choice, ipc.OutputDelta]]:
        """Each engine output as it arrives, applied to its choice; ends when every choice finished.
        Raises ApiError: 503 when the engine dies, 500 when it ends a choice with an error."""
        try:
            while self.unfinished():
                item = await self.queue.get()
                if isinstance(item, BaseException):
                    raise _api_error(item)
                choice = self.choices[item.request_id]
                self._apply(choice, item)
                if item.finish_reason == "error":  # no OpenAI finish reason: the whole request fails, as a 500
                    if item.error_status == 503:  # a peer failed (a prefill server), not this engine
                        raise unavailable(item.error or "a peer engine failed")
                    raise engine_error(item.error or "the engine failed the request", item.request_id)
                yield choice, item
        finally:
            self.close()

    def _apply(self, choice: Choice, out: ipc.OutputDelta) -> None:
        now = time.monotonic()
        prefilled, since_last = 0, None
        if out.new_token_ids:
            if choice.first_token_time is None:
                choice.first_token_time = now
                prefilled = len(self.prompts[choice.prompt_index])
            else:
                since_last = now - choice.last_token_time
            choice.last_token_time = now
        choice.token_ids.extend(out.new_token_ids)
        choice.text += out.delta_text
        if out.text is not None and out.finish_reason != "abort":
            choice.text = out.text  # authoritative: a stop string may end inside text already streamed
        if out.new_logprobs:
            for tok, (lp, top, _rank) in zip(out.new_token_ids, out.new_logprobs):
                choice.logprobs.append((tok, lp, top))
        if out.prompt_logprobs is not None:
            prompt = self.prompts[choice.prompt_index]
            choice.prompt_logprobs = [
                (tok, None, None, None) if e is None else (tok, *e) for tok, e in zip(prompt, out.prompt_logprobs)
            ]
        choice.num_cached_prompt_tokens = max(choice.num_cached_prompt_tokens, out.num_cached_prompt_tokens)
        if out.kv_transfer_params is not None:
            choice.kv_transfer_params = out.kv_transfer_params
        self.metrics.on_tokens(len(out.new_token_ids), prefilled, since_last)
        if out.finish_reason is not None:
            choice.finish_reason, choice.stop_reason = out.finish_reason, out.stop_reason
            self.metrics.on_finished(out.finish_reason, self.arrival, choice.first_token_time, now, len(choice.token_ids))

    def text_to_stream(self, choice: Choice) -> str:
        """The next piece of `choice.text` that is safe to send; everything that is left once finished."""
        end = len(choice.text) if choice.finish_reason is not None else max(choice.sent, len(choice.text) - self.hold)
        piece = choice.text[choice.sent : end]
        choice.sent = end
        return piece

    async def collect(self) -> list[Choice]:
        async for _ in self.events():
            pass
        return sorted(self.choices.values(), key=lambda c: c.index)

    def abort(self, notify: bool = True) -> None:
        """Stops every unfinished choice; with notify, events() sees finish_reason "abort" for each."""
        self.client.abort(self.unfinished(), notify=notify)

    def _not_read(self, buffered: int) -> None:
        """The client has let more than the bound pile up: abort what is left and drop the backlog."""
        left = self.unfinished()
        logger.warning("request %s: its client stopped reading; %d bytes of output were waiting "
                       "(--max-stream-buffer-bytes %d): aborting its %d unfinished choice(s)",
                       self.request_id, buffered, self.queue.limit, len(left))
        if getattr(self.metrics, "slow_client_aborts", None) is not None:
            self.metrics.slow_client_aborts.inc()
        self.client.abort(left)
        self.queue.clear()
        self.queue.put_nowait(ApiError(
            429, f"the client did not read its stream: more than {self.queue.limit} bytes of output were waiting "
                 "(--max-stream-buffer-bytes); the request was aborted", code="stream_not_read"))

    def on_disconnect(self) -> None:
        self.disconnected = True
        self.abort(notify=True)

    def close(self) -> None:
        """Called once the consumer is gone: whatever is unfinished is aborted and counted."""
        left = self.unfinished()
        if left:
            self.client.abort(left)
            for rid in left:
                self.choices[rid].finish_reason = "abort"
                self.metrics.on_finished("abort", self.arrival, self.choices[rid].first_token_time, time.monotonic(), 0)

    def usage(self) -> dict[str, Any]:
        prompt = sum(len(p) for p in self.prompts)
        completion = sum(len(c.token_ids) for c in self.choices.values())
        cached = sum(max((c.num_cached_prompt_tokens for c in self.choices.values() if c.prompt_index == p), default=0)
                     for p in range(len(self.prompts)))
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }


def _api_error(e: BaseException) -> ApiError:
    if isinstance(e, ApiError):
        return e
    if isinstance(e, EngineRejected):
        return from_request_error(e)
    if isinstance(e, EngineDeadError):
        return unavailable(f"the engine is not available: {e}")
    raise e
