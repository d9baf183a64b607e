"""Calls to a prefill engine's side channel (side_channel.py), signed with the pool's key.

Plain http.client: no redirects followed, no proxies from the environment, one connection per call,
every call bounded by its timeout. Request ids are validated identifiers (params.py) and quoted
into the path, never path fragments.
"""
from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any

from moeserve.kv_transfer.trust import AUTH_HEADER, PoolKey, sign_call

MAX_ANSWER_BYTES = 16 << 20  # a /layout of many ranks is the largest answer


class PeerError(RuntimeError):
    """The side channel of a peer did not answer as one (connection refused, timeout, not JSON)."""


def signed(key: PoolKey, method: str, path: str, body: dict[str, Any] | None) -> tuple[bytes, dict[str, str]]:
    """(body bytes, headers) of one signed call."""
    data = b"" if body is None else json.dumps(body).encode()
    headers = {AUTH_HEADER: sign_call(key, method, path, data), "Connection": "close"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    return data, headers


def answer_of(raw: bytes) -> dict[str, Any]:
    """The JSON object a side channel answered ({} for none, or anything else); ValueError if not JSON."""
    if not raw or len(raw) > MAX_ANSWER_BYTES:
        return {}
    try:
        answer = json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deep") from None
    return answer if isinstance(answer, dict) else {}


def call(host: str, port: int, key: PoolKey, method: str, path: str, body: dict[str, Any] | None,
         timeout_s: float) -> tuple[int, dict[str, Any]]:
    """(status, JSON object answered) of one signed call; PeerError when nothing usable answered."""
    data, headers = signed(key, method, path, body)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request(method, path, body=data or None, headers=headers)
        resp = conn.getresponse()
        answer = answer_of(resp.read(MAX_ANSWER_BYTES + 1))
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise PeerError(f"the prefill server's side channel at {netloc(host, port)} did not answer "
                        f"({type(e).__name__})") from None
    finally:
        conn.close()
    return resp.status, answer


def get_json(host: str, port: int, key: PoolKey, path: str, timeout_s: float) -> tuple[int, dict[str, Any]]:
    return call(host, port, key, "GET", path, None, timeout_s)


def pin_path(request_id: str) -> str:
    return "/pins/" + urllib.parse.quote(request_id, safe="")


def claim_body(request_id: str, engine_id: str, token: str) -> dict[str, str]:
    return {"request_id": request_id, "engine_id": engine_id, "token": token}


def claim(host: str, port: int, key: PoolKey, request_id: str, engine_id: str, token: str,
          timeout_s: float) -> tuple[int, dict[str, Any]]:
    """Claim a pin for this decoder: 200 and the pin, 404 gone, 409 claimed by another decoder."""
    return call(host, port, key, "POST", "/claim", claim_body(request_id, engine_id, token), timeout_s)


def post_release(host: str, port: int, key: PoolKey, request_id: str, engine_id: str, token: str,
                 timeout_s: float, num_bytes: int | None = None) -> bool:
    """Release a pin this decoder claimed; False when it was not released (or nobody answered: the
    prefill side frees the blocks at its expiry anyway)."""
    body: dict[str, Any] = {"request_id": request_id, "engine_id": engine_id, "token": token}
    if num_bytes is not None:
        body["num_bytes"] = num_bytes
    try:
        status, answer = call(host, port, key, "POST", "/release", body, timeout_s)
    except PeerError:
        return False
    return status == 200 and answer.get("released") is True


def netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
