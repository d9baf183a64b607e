"""Messages between the HTTP front end and the engine process, and their msgpack framing.

Every message is a frozen dataclass with explicit fields; on the wire it is a msgpack map
`{"t": <tag>, <field>: <value>, ...}` holding only ints, floats, strings, bools, None, lists and maps.
Decoding looks the tag up in `MESSAGE_TYPES` and refuses unknown tags or fields, so nothing but
these shapes ever crosses the socket (never pickle). msgpack is self-delimiting, so a stream of
messages needs no extra length prefix: `Decoder.feed` returns every message completed so far.

Front end -> engine: AddRequest, AbortRequests, Shutdown.
Engine -> front end: Ready, Fatal, AddResults, Outputs, Heartbeat.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import msgpack

from moeserve.outputs import RequestOutput
from moeserve.sampling_params import SamplingParams, params_to_plain

MAX_MESSAGE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class AddRequest:
    request_id: str
    prompt_token_ids: list[int]
    params: dict[str, Any]  # params_to_plain(SamplingParams): plain fields only
    owner: str | None = None  # the HTTP request it is a choice of: the scheduler's unit of fairness
    kv_transfer: dict[str, Any] | None = None  # kv_transfer/params.to_plain: the prefill/decode split


@dataclass(frozen=True)
class AbortRequests:
    request_ids: list[str]


@dataclass(frozen=True)
class Shutdown:
    pass


@dataclass(frozen=True)
class Ready:
    model_name: str
    max_model_len: int
    vocab_size: int
    model_dir: str  # the checkpoint the engine loaded; the front end reads its tokenizer from here
    summary: list[list[str]] = field(default_factory=list)  # the start-up summary's [label, text] rows


@dataclass(frozen=True)
class Fatal:
    """The engine failed (while loading or stepping); `message` is safe to show to an operator."""

    message: str


@dataclass(frozen=True)
class Rejection:
    request_id: str
    status: int
    type: str
    message: str
    param: str | None = None
    code: str | None = None


@dataclass(frozen=True)
class AddResults:
    """The engine's answer to every AddRequest it read since the last AddResults."""

    accepted: list[str]
    rejected: list[dict[str, Any]]  # Rejection fields


@dataclass(frozen=True)
class OutputDelta:
    """What one step added to one request (RequestOutput minus the cumulative fields)."""

    request_id: str
    new_token_ids: list[int]
    delta_text: str
    new_logprobs: list[list[Any]] | None = None  # [[logprob, [[token_id, logprob], ...], rank], ...]
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    error: str | None = None
    num_cached_prompt_tokens: int = 0
    text: str | None = None  # the whole output text, sent once with the final delta (stop strings may trim it)
    # RequestOutput.prompt_logprobs, sent once, with the delta of the first generated token (the
    # prompt is complete by then): [None, [logprob, [[token_id, logprob], ...], rank], ...], one per prompt token
    prompt_logprobs: list[list[Any] | None] | None = None
    error_status: int = 500  # HTTP status of `error` (503: a peer engine failed)
    kv_transfer_params: dict[str, Any] | None = None  # a prefill's answer for its remote decoder (final delta)


@dataclass(frozen=True)
class Outputs:
    outputs: list[dict[str, Any]]  # OutputDelta fields


@dataclass(frozen=True)
class Heartbeat:
    stats: dict[str, Any] = field(default_factory=dict)  # EngineCore.stats(): numbers only


@dataclass(frozen=True)
class TraceControl:
    """Routing-recorder control from the front end: action is "start", "stop" or "dump"."""

    control_id: str
    action: str


@dataclass(frozen=True)
class TraceControlResult:
    control_id: str
    ok: bool
    message: str
    path: str | None = None  # the trace file written by "dump"


MESSAGE_TYPES: dict[str, type] = {
    "add": AddRequest,
    "abort": AbortRequests,
    "shutdown": Shutdown,
    "ready": Ready,
    "fatal": Fatal,
    "add_results": AddResults,
    "outputs": Outputs,
    "heartbeat": Heartbeat,
    "trace_control": TraceControl,
    "trace_control_result": TraceControlResult,
}
_TAGS = {cls: tag for tag, cls in MESSAGE_TYPES.items()}


class ProtocolError(ValueError):
    """A peer sent bytes that are not one of our messages."""


def encode(msg: Any) -> bytes:
    body = {"t": _TAGS[type(msg)]}
    body.update({f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)})
    return msgpack.packb(body, use_bin_type=True)


def _from_wire(obj: Any) -> Any:
    if not isinstance(obj, dict) or obj.get("t") not in MESSAGE_TYPES:
        raise ProtocolError("not a moeserve message")
    cls = MESSAGE_TYPES[obj.pop("t")]
    names = {f.name for f in dataclasses.fields(cls)}
    if not set(obj) <= names:
        raise ProtocolError(f"unknown fields {sorted(set(obj) - names)} in {cls.__name__}")
    try:
        return cls(**obj)
    except TypeError as e:
        raise ProtocolError(f"malformed {cls.__name__}") from e


class Decoder:
    """Turns a byte stream into messages; keeps partial messages between calls."""

    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=MAX_MESSAGE_BYTES, strict_map_key=True)

    def feed(self, data: bytes) -> list[Any]:
        self._unpacker.feed(data)
        return [_from_wire(obj) for obj in self._unpacker]


def output_to_wire(out: RequestOutput) -> dict[str, Any]:
    """The OutputDelta fields as a plain dict, built directly (dataclasses.asdict deep-copies; this
    runs for every request on every step)."""
    logprobs = None
    if out.new_logprobs is not None:
        logprobs = [[lp, [[t, v] for t, v in top], rank] for lp, top, rank in out.new_logprobs]
    prompt_logprobs = None
    if out.prompt_logprobs is not None and out.new_token_ids and len(out.token_ids) == len(out.new_token_ids):
        prompt_logprobs = [None if e is None else [e[0], [[t, v] for t, v in e[1]], e[2]] for e in out.prompt_logprobs]
    return {
        "request_id": out.request_id,
        "new_token_ids": list(out.new_token_ids),
        "delta_text": out.delta_text,
        "new_logprobs": logprobs,
        "finish_reason": out.finish_reason,
        "stop_reason": out.stop_reason,
        "error": out.error,
        "num_cached_prompt_tokens": out.num_cached_prompt_tokens,
        "text": out.text if out.finish_reason is not None else None,
        "prompt_logprobs": prompt_logprobs,
        "error_status": out.error_status,
        "kv_transfer_params": out.kv_transfer_params,
    }


def output_from_wire(d: dict[str, Any]) -> OutputDelta:
    try:
        return OutputDelta(**d)
    except TypeError as e:
        raise ProtocolError("malformed OutputDelta") from e


def params_to_wire(params: SamplingParams) -> dict[str, Any]:
    return params_to_plain(params)


def params_from_wire(d: dict[str, Any]) -> SamplingParams:
    return SamplingParams(**d)
