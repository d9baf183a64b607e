"""vLLM's `kv_transfer_params`, the fields vllm-router passes between a prefill and a decode server.

Request to a prefill server (from the router):
    {"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
     "remote_block_ids": null, "remote_host": null, "remote_port": null}
The prefill server's answer, passed unchanged by the router to the decode server:
    {"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": <prefill engine>,
     "remote_block_ids": [int, ...], "remote_request_id": <its request id>, "remote_host": <side
     channel host>, "remote_port": <side channel port>, "tp_size": <prefill tp>,
     "remote_group": <the prefill attention group whose KV pool holds the blocks>}
`remote_group` is moeserve's own field (vLLM runs one engine per data-parallel rank, each with its own
engine id and side channel; moeserve's --ep engine has several attention groups behind one): absent,
as from a vLLM prefill server, it means group 0. `tp_size` is informative only: the decoder reads the
prefill ranks' head ranges from the side channel's /layout.
Pure: parsing and checking only; a malformed field is a RequestError naming it (a 400).
"""
from __future__ import annotations

import array
import hashlib
from dataclasses import dataclass
from typing import Any

from moeserve.errors import RequestError

PARAM = "kv_transfer_params"
MAX_BLOCK_IDS = 1 << 20


@dataclass(frozen=True)
class RemotePrefill:
    """A decode request's source: blocks pinned on a prefill engine, reachable at host:port."""

    engine_id: str
    request_id: str
    block_ids: list[int]
    host: str
    port: int
    tp_size: int = 1
    group: int = 0  # the prefill engine's attention group holding the blocks


@dataclass(frozen=True)
class KvTransfer:
    """What a request asks of this engine: keep its blocks for a remote decoder (`remote_decode`), or
    take its prompt's KV from a prefill engine (`remote_prefill`); never both."""

    remote_decode: bool = False
    remote_prefill: RemotePrefill | None = None


def _bad(message: str) -> RequestError:
    return RequestError(f"{PARAM}: {message}", param=PARAM, code="invalid_kv_transfer_params")


def _field(raw: dict, name: str, kind: type, required: bool) -> Any:
    value = raw.get(name)
    if value is None:
        if required:
            raise _bad(f"{name} is required when do_remote_prefill is true")
        return None
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise _bad(f"{name} must be an integer, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise _bad(f"{name} must be a string, got {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise _bad(f"{name} must be true or false, got {value!r}")
    return value


def parse(raw: Any) -> KvTransfer | None:
    """The request's `kv_transfer_params` (a JSON object or null) -> KvTransfer, or None when it asks
    for nothing. Unknown keys are allowed (vLLM's connectors add their own)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _bad("must be an object")
    decode = bool(_field(raw, "do_remote_decode", bool, False))
    prefill = bool(_field(raw, "do_remote_prefill", bool, False))
    if decode and prefill:
        raise _bad("do_remote_decode and do_remote_prefill cannot both be true")
    if not prefill:
        return KvTransfer(remote_decode=True) if decode else None
    block_ids = raw.get("remote_block_ids")
    if not isinstance(block_ids, list) or not block_ids or len(block_ids) > MAX_BLOCK_IDS:
        raise _bad("remote_block_ids must be a non-empty list of block ids")
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in block_ids):
        raise _bad("remote_block_ids must hold non-negative integers")
    port = _field(raw, "remote_port", int, True)
    if not 0 < port < 65536:
        raise _bad(f"remote_port must be in [1, 65535], got {port}")
    tp_size = _field(raw, "tp_size", int, False)
    tp_size = 1 if tp_size is None else tp_size
    group = _field(raw, "remote_group", int, False) or 0  # absent (a vLLM prefill server): group 0
    if tp_size < 1 or group < 0:
        raise _bad(f"tp_size must be >= 1 and remote_group >= 0, got {tp_size} and {group}")
    remote = RemotePrefill(
        engine_id=_field(raw, "remote_engine_id", str, True),
        request_id=_field(raw, "remote_request_id", str, True),
        block_ids=list(block_ids),
        host=_field(raw, "remote_host", str, True),
        port=port,
        tp_size=tp_size,
        group=group,
    )
    return KvTransfer(remote_prefill=remote)


def prefill_answer(engine_id: str, request_id: str, block_ids: list[int], host: str, port: int, tp_size: int,
                   group: int = 0) -> dict:
    """The `kv_transfer_params` a prefill engine answers with (the router hands it to the decoder)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": engine_id,
        "remote_block_ids": list(block_ids),
        "remote_request_id": request_id,
        "remote_host": host,
        "remote_port": port,
        "tp_size": tp_size,
        "remote_group": group,
    }


def to_plain(kv: KvTransfer | None) -> dict | None:
    """For the front end -> engine socket (msgpack, plain fields)."""
    if kv is None:
        return None
    if kv.remote_prefill is None:
        return {"do_remote_decode": True}
    r = kv.remote_prefill
    return prefill_answer(r.engine_id, r.request_id, r.block_ids, r.host, r.port, r.tp_size, r.group)


def prompt_digest(prompt_token_ids: list[int]) -> str:
    """A short hash of a prompt: the decoder's prompt must be the one whose KV the prefill pinned."""
    data = array.array("q", prompt_token_ids).tobytes()
    return hashlib.blake2b(data, digest_size=16).hexdigest()
