"""Who may steer a KV transfer: the pool's secret, signed `kv_transfer_params`, signed side-channel calls.

The prefill/decode split has three kinds of party. Clients (and vllm-router, which passes their
requests on) are not trusted: every field of `kv_transfer_params` they send could be forged. The
servers of one pool (prefill and decode servers started with the same secret) trust each other.
So (docs/disaggregation.md, "Trust model"):

- a prefill server signs the `kv_transfer_params` it answers (`sign_params`): an HMAC over every
  field a decoder acts on, the prompt's digest included. A decode server verifies the signature
  (`verify_params`) before it makes any connection, and checks the signed digest against its own
  prompt; a client can pass on the parameters it was given, unchanged, and nothing else;
- every call to a side channel carries `X-Moeserve-Auth` (`sign_call`): a time stamp and an HMAC
  over it, the method, the path and the body. A side channel answers 401 to anything else
  (`check_call`), so agent metadata, buffer addresses and pins go only to the pool;
- a decoder claims a pin with a token only it can make (`release_token`); the pin is then released
  only by a call carrying that token.

The secret: `--kv-secret`, else MOESERVE_KV_SECRET, else a random secret kept in a file of this
user's (MOESERVE_CACHE/kv-secret, mode 0600), which makes the servers one user starts on one machine a
pool without a setting; servers on several hosts need the same secret given to each (a server whose
side channel faces other hosts refuses to start without one: engine/launch_check.py
`check_kv_hosts`). Never the server's `--api-key`: clients hold that (server/config_file.py refuses a
secret equal to it). The secret itself never crosses a socket: only HMACs of it do.
Pure: hashing and files, no sockets.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeserve import envs

log = logging.getLogger("moeserve.kv_transfer")

AUTH_HEADER = "X-Moeserve-Auth"
SIGNATURE_FIELD = "moeserve_signature"
# the fields a decoder acts on: where it connects, which blocks it reads, for which prompt
SIGNED_FIELDS = ("remote_engine_id", "remote_request_id", "remote_block_ids", "remote_host", "remote_port",
                 "tp_size", "remote_group", "prompt_digest")
CALL_SKEW_S = 300  # a signed call's time stamp may be this far from ours (hosts' clocks differ a little)
SECRET_FILE = "kv-secret"
SHORT_SECRET = 16


@dataclass(frozen=True, repr=False)
class PoolKey:
    """Keys derived from the pool's secret, one per use, so a signature of one kind is never
    accepted as another."""

    params: bytes
    calls: bytes
    source: str  # where the secret came from, for the log: "--kv-secret", "MOESERVE_KV_SECRET", ...

    @classmethod
    def from_secret(cls, secret: str, source: str) -> "PoolKey":
        raw = secret.encode()
        return cls(_derive(raw, b"kv_transfer_params v1"), _derive(raw, b"side channel calls v1"), source)

    def __repr__(self) -> str:
        return f"PoolKey(source={self.source!r})"  # never the keys


def _derive(secret: bytes, label: bytes) -> bytes:
    return hmac.new(secret, label, hashlib.sha256).digest()


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


# ---- kv_transfer_params -------------------------------------------------------------------------
def _canonical(params: dict[str, Any]) -> bytes:
    return json.dumps([params.get(f) for f in SIGNED_FIELDS], separators=(",", ":")).encode()


def sign_params(key: PoolKey, params: dict[str, Any]) -> dict[str, Any]:
    """`params` (a prefill answer, prompt_digest included) with its signature added."""
    return dict(params, **{SIGNATURE_FIELD: _mac(key.params, _canonical(params))})


def verify_params(key: PoolKey, params: dict[str, Any]) -> bool:
    """Whether `params` carry a signature this pool made over exactly these fields."""
    signature = params.get(SIGNATURE_FIELD)
    if not isinstance(signature, str):
        return False
    return hmac.compare_digest(signature, _mac(key.params, _canonical(params)))


# ---- side-channel calls -------------------------------------------------------------------------
def _call_bytes(stamp: str, method: str, path: str, body: bytes) -> bytes:
    return b"\n".join([stamp.encode(), method.encode(), path.encode(), hashlib.sha256(body).hexdigest().encode()])


def sign_call(key: PoolKey, method: str, path: str, body: bytes = b"", now: float | None = None) -> str:
    """The X-Moeserve-Auth value of one call."""
    stamp = str(int(time.time() if now is None else now))
    return f"{stamp}.{_mac(key.calls, _call_bytes(stamp, method, path, body))}"


def check_call(key: PoolKey, header: str | None, method: str, path: str, body: bytes = b"",
               now: float | None = None) -> bool:
    """Whether `header` signs this very call, made within CALL_SKEW_S of now."""
    if not header or header.count(".") != 1:
        return False
    stamp, mac = header.split(".")
    if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12 or not mac.isascii():
        return False  # a header is Latin-1: "²" is a digit to isdigit(), and compare_digest takes ASCII only
    if abs(int(stamp) - (time.time() if now is None else now)) > CALL_SKEW_S:
        return False
    return hmac.compare_digest(mac, _mac(key.calls, _call_bytes(stamp, method, path, body)))


# ---- pins ---------------------------------------------------------------------------------------
def release_token(server_key: bytes, engine_id: str, request_id: str) -> str:
    """The token a decode server claims a pin with: made from a key of that server's own (random per
    process), so a retry to the same server claims the same pin again, and no other party can
    release it."""
    return _mac(server_key, f"{engine_id}\0{request_id}".encode())[:32]


def new_server_key() -> bytes:
    return secrets.token_bytes(32)


# ---- the secret ---------------------------------------------------------------------------------
def key_for(secret: str | None) -> PoolKey:
    """The pool's key as a server of it finds it: `secret` (KvTransferConfig.secret: --kv-secret),
    else MOESERVE_KV_SECRET, else this user's secret file."""
    if secret:
        return pool_key(secret, envs.CACHE.get(), "--kv-secret")
    return pool_key(envs.KV_SECRET.get() or None, envs.CACHE.get(), "MOESERVE_KV_SECRET")


def pool_key(secret: str | None, cache_dir: Path, source: str = "--kv-secret") -> PoolKey:
    """The pool's key from the configured secret (`source` names where it came from), or from this
    user's secret file under `cache_dir`, made on first use."""
    if secret:
        if len(secret) < SHORT_SECRET:
            log.warning("the KV pool's secret (%s) is shorter than %d characters: a signed kv_transfer_params "
                        "seen by a client lets it guess a short secret offline; use a long random one", source,
                        SHORT_SECRET)
        return PoolKey.from_secret(secret, source)
    return PoolKey.from_secret(_file_secret(cache_dir / SECRET_FILE), f"{cache_dir / SECRET_FILE}")


def _file_secret(path: Path) -> str:
    """The secret in `path`, written there first (mode 0600, atomically) when there is none."""
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_hex(32).encode())
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another server made it first: then both use that one
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return _read_secret(path)


def _read_secret(path: Path) -> str:
    st = path.stat()
    if st.st_mode & 0o077:
        raise PermissionError(f"{path} is readable by other users (mode {st.st_mode & 0o777:o}): chmod 600 it "
                              "or set --kv-secret")
    text = path.read_text().strip()
    if len(text) < SHORT_SECRET:
        raise ValueError(f"{path} holds no usable secret: delete it (a new one is made) or set --kv-secret")
    return text
