"""Calls to a prefill engine's side channel (side_channel.py), signed with the pool's key.

Plain http.client: no redirects followed, no proxies from the environment, one connection per call.
Every call is bounded as a whole: `timeout_s` from its start to its last byte, resolving a host name
included (http.client's own timeout bounds each socket read, so a peer sending a byte now and then
held a call as long as it liked, and a resolver that does not answer held it for the resolver's own
timeouts), and its answer's size: LAYOUT_ANSWER_BYTES for /layout, ANSWER_BYTES for the rest, plus
the JSON of the block ids for an answer naming a pin's (`pin_answer_bytes`). A larger answer, or one
that is not JSON, fails that call (PeerError) and nothing else. Request ids are validated
identifiers (params.py) and quoted into the path, never path fragments.
"""
from __future__ import annotations

import concurrent.futures
import http.client
import ipaddress
import json
import socket
import time
import urllib.parse
from typing import Any

from moeserve.kv_transfer.trust import AUTH_HEADER, PoolKey, sign_call

LAYOUT_ANSWER_BYTES = 16 << 20  # a /layout of many ranks (agent metadata, addresses) is the largest answer
ANSWER_BYTES = 64 << 10  # any other answer, besides a pin's block ids: the side channel's own body cap


class PeerError(RuntimeError):
    """The side channel of a peer did not answer as one (connection refused, timeout, not JSON)."""


class AnswerTooLarge(ValueError):
    """A side channel answered more bytes than the call allows."""


def pin_answer_bytes(block_ids: list[int]) -> int:
    """The most bytes an answer naming a pin of these blocks may take: what the signed parameters
    already name, plus ANSWER_BYTES for the rest."""
    return ANSWER_BYTES + len(json.dumps(block_ids))


def signed(key: PoolKey, method: str, path: str, body: dict[str, Any] | None) -> tuple[bytes, dict[str, str]]:
    """(body bytes, headers) of one signed call."""
    data = b"" if body is None else json.dumps(body).encode()
    # identity: a compressed answer would be measured after inflating (a small one can inflate to gigabytes)
    headers = {AUTH_HEADER: sign_call(key, method, path, data), "Connection": "close", "Accept-Encoding": "identity"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    return data, headers


def answer_of(raw: bytes, max_bytes: int = ANSWER_BYTES) -> dict[str, Any]:
    """The JSON object a side channel answered ({} for none, or anything else); AnswerTooLarge past
    max_bytes, ValueError if not JSON."""
    if len(raw) > max_bytes:
        raise AnswerTooLarge(f"answered more than {max_bytes} bytes")
    if not raw:
        return {}
    try:
        answer = json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deep") from None
    return answer if isinstance(answer, dict) else {}


def call(host: str, port: int, key: PoolKey, method: str, path: str, body: dict[str, Any] | None,
         timeout_s: float, max_bytes: int = ANSWER_BYTES) -> tuple[int, dict[str, Any]]:
    """(status, JSON object answered) of one signed call, all of it within timeout_s and its answer
    within max_bytes; PeerError when nothing usable answered."""
    data, headers = signed(key, method, path, body)
    conn = _Connection(host, port, time.monotonic() + timeout_s)
    try:
        conn.request(method, path, body=data or None, headers=headers)
        resp = conn.getresponse()
        length = resp.getheader("Content-Length")
        if length is not None and length.isascii() and length.isdigit() and int(length) > max_bytes:
            raise AnswerTooLarge(f"answered more than {max_bytes} bytes")
        answer = answer_of(resp.read(max_bytes + 1), max_bytes)
    except AnswerTooLarge as e:
        raise PeerError(f"the prefill server's side channel at {netloc(host, port)} {e} to {method} "
                        f"/{path.split('/')[1]}") from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise PeerError(f"the prefill server's side channel at {netloc(host, port)} did not answer "
                        f"({type(e).__name__})") from None
    finally:
        conn.close()
    return resp.status, answer


def get_json(host: str, port: int, key: PoolKey, path: str, timeout_s: float,
             max_bytes: int | None = None) -> tuple[int, dict[str, Any]]:
    """GET `path`; its answer within max_bytes (default: LAYOUT_ANSWER_BYTES for /layout, else ANSWER_BYTES)."""
    if max_bytes is None:
        max_bytes = LAYOUT_ANSWER_BYTES if path == "/layout" else ANSWER_BYTES
    return call(host, port, key, "GET", path, None, timeout_s, max_bytes)


def pin_path(request_id: str) -> str:
    return "/pins/" + urllib.parse.quote(request_id, safe="")


def claim_body(request_id: str, engine_id: str, token: str) -> dict[str, str]:
    return {"request_id": request_id, "engine_id": engine_id, "token": token}


def claim(host: str, port: int, key: PoolKey, request_id: str, engine_id: str, token: str,
          timeout_s: float, block_ids: list[int] | None = None) -> tuple[int, dict[str, Any]]:
    """Claim a pin (of `block_ids`, as the parameters name them) for this decoder: 200 and the pin, 404
    gone, 409 claimed by another decoder."""
    return call(host, port, key, "POST", "/claim", claim_body(request_id, engine_id, token), timeout_s,
                pin_answer_bytes(block_ids or []))


def release(host: str, port: int, key: PoolKey, request_id: str, engine_id: str, token: str,
            timeout_s: float, num_bytes: int | None = None) -> bool:
    """Release a pin this decoder claimed: whether it was released; PeerError when nobody answered."""
    body: dict[str, Any] = {"request_id": request_id, "engine_id": engine_id, "token": token}
    if num_bytes is not None:
        body["num_bytes"] = num_bytes
    status, answer = call(host, port, key, "POST", "/release", body, timeout_s)
    return status == 200 and answer.get("released") is True


def post_release(host: str, port: int, key: PoolKey, request_id: str, engine_id: str, token: str,
                 timeout_s: float, num_bytes: int | None = None) -> bool:
    """`release`, False when nobody answered too (the prefill side frees the blocks at its expiry anyway)."""
    try:
        return release(host, port, key, request_id, engine_id, token, timeout_s, num_bytes)
    except PeerError:
        return False


# getaddrinfo cannot be interrupted: a call waits for it here at most until its deadline, and a resolver
# that never answers holds these threads (a few: later calls then wait their own deadlines out) rather than
# the callers
_RESOLVERS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="kv-peer-resolve")


def resolve(host: str, port: int, deadline: float) -> list[tuple[Any, ...]]:
    """getaddrinfo's stream addresses of host:port, waited for until `deadline` (time.monotonic());
    an address needs no resolving. TimeoutError past the deadline, OSError when the name does not resolve."""
    try:
        ipaddress.ip_address(host)
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except ValueError:
        pass
    future = _RESOLVERS.submit(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"resolving {host} took longer than the call's timeout") from None


class _Connection(http.client.HTTPConnection):
    """One call's connection, every socket operation of it bounded by the call's `deadline`
    (time.monotonic()), the name's resolving included."""

    def __init__(self, host: str, port: int, deadline: float):
        super().__init__(host, port, timeout=max(0.001, deadline - time.monotonic()))
        self.deadline = deadline
        self._create_connection = self._bounded_connection

    def _bounded_connection(self, address: tuple[str, int], timeout: float, source_address: Any = None) -> socket.socket:
        """socket.create_connection with the name resolved under the deadline, each address tried in turn:
        a _DeadlineSocket, so the call's sends and reads after it keep the same deadline."""
        error: OSError | None = None
        for family, kind, proto, _, sockaddr in resolve(address[0], address[1], self.deadline):
            sock = _DeadlineSocket(family, kind, proto)
            sock.deadline = self.deadline
            try:
                sock._arm()
                sock.connect(sockaddr)
                return sock
            except OSError as e:
                sock.close()
                error = e
        raise error or OSError(f"{address[0]} has no address")


class _DeadlineSocket(socket.socket):
    """A socket whose sends and receives (what http.client and its response's file use) wait at
    most until `deadline`."""

    deadline = 0.0

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the call took longer than its timeout")
        self.settimeout(left)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._arm()
        super().sendall(data, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        return super().recv_into(buffer, nbytes, flags)


def netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
