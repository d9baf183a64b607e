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
prefill ranks' head ranges from the side channel's /layout. moeserve's prefill answer also carries
`prompt_digest` (the prompt whose KV the blocks hold) and `moeserve_signature` (trust.py: the pool's
HMAC over every field a decoder acts on); a decode server acts on signed parameters only.
Pure: parsing and checking only; a malformed field is a RequestError naming it (a 400). Every field
is bounded (types, ranges, lengths, host syntax) before anything else reads it.
"""
from __future__ import annotations

import array
import hashlib
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from moeserve.errors import RequestError
from moeserve.kv_transfer.trust import SIGNATURE_FIELD

PARAM = "kv_transfer_params"
MAX_BLOCK_IDS = 1 << 17  # 2M tokens of 16-token blocks
MAX_BLOCK_ID = (1 << 31) - 1
MAX_TP = 4096
MAX_GROUP = 65535
# engine and request ids: identifiers (vLLM's and moeserve's ids fit), never path fragments
_IDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,255}")
_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_HEX = re.compile(r"[0-9a-f]+")


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
    prompt_digest: str = ""  # prompt_digest() of the prompt whose KV the blocks hold ("" from a vLLM prefill)
    signature: str = ""  # trust.sign_params over the fields above ("": unsigned)
    release_token: str = ""  # set by the decode server's front end: its claim on the pin (trust.release_token)


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


def _ident(raw: dict, name: str) -> str:
    value = _field(raw, name, str, True)
    if not _IDENT.fullmatch(value):
        raise _bad(f"{name} must be an identifier (letters, digits and . _ : + -, at most 256), got {value[:64]!r}")
    return value


def _host(raw: dict) -> str:
    host = _field(raw, "remote_host", str, True)
    try:
        if "%" not in host:  # a scope id may hold any character
            ipaddress.ip_address(host)
            return host
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(host):
        raise _bad(f"remote_host must be an IP address or a host name, got {host[:64]!r}")
    return host


def _bounded(raw: dict, name: str, lo: int, hi: int, default: int) -> int:
    value = _field(raw, name, int, False)
    if value is None:
        return default
    if not lo <= value <= hi:
        raise _bad(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _hex(raw: dict, name: str, length: int) -> str:
    value = _field(raw, name, str, False)
    if not value:
        return ""
    if len(value) != length or not _HEX.fullmatch(value):
        raise _bad(f"{name} must be {length} lowercase hex digits")
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
        raise _bad(f"remote_block_ids must be a non-empty list of at most {MAX_BLOCK_IDS} block ids")
    if any(isinstance(b, bool) or not isinstance(b, int) or not 0 <= b <= MAX_BLOCK_ID for b in block_ids):
        raise _bad(f"remote_block_ids must hold non-negative integers below 2**31")
    port = _field(raw, "remote_port", int, True)
    if not 0 < port < 65536:
        raise _bad(f"remote_port must be in [1, 65535], got {port}")
    remote = RemotePrefill(
        engine_id=_ident(raw, "remote_engine_id"),
        request_id=_ident(raw, "remote_request_id"),
        block_ids=list(block_ids),
        host=_host(raw),
        port=port,
        tp_size=_bounded(raw, "tp_size", 1, MAX_TP, 1),
        group=_bounded(raw, "remote_group", 0, MAX_GROUP, 0),  # absent (a vLLM prefill server): group 0
        prompt_digest=_hex(raw, "prompt_digest", 32),
        signature=_hex(raw, SIGNATURE_FIELD, 64),
        release_token=_hex(raw, "release_token", 32),
    )
    return KvTransfer(remote_prefill=remote)


def prefill_answer(engine_id: str, request_id: str, block_ids: list[int], host: str, port: int, tp_size: int,
                   group: int = 0, prompt_digest: str = "") -> dict:
    """The `kv_transfer_params` a prefill engine answers with (the router hands it to the decoder),
    before it is signed (trust.sign_params)."""
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
        "prompt_digest": prompt_digest,
    }


def to_plain(kv: KvTransfer | None) -> dict | None:
    """For the front end -> engine socket (msgpack, plain fields)."""
    if kv is None:
        return None
    if kv.remote_prefill is None:
        return {"do_remote_decode": True}
    r = kv.remote_prefill
    plain = prefill_answer(r.engine_id, r.request_id, r.block_ids, r.host, r.port, r.tp_size, r.group, r.prompt_digest)
    if r.signature:
        plain[SIGNATURE_FIELD] = r.signature
    if r.release_token:
        plain["release_token"] = r.release_token
    return plain


def prompt_digest(prompt_token_ids: list[int]) -> str:
    """A short hash of a prompt: the decoder's prompt must be the one whose KV the prefill pinned."""
    data = array.array("q", prompt_token_ids).tobytes()
    return hashlib.blake2b(data, digest_size=16).hexdigest()
