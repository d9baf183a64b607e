"""The side channel of a prefill engine: a small HTTP server speaking JSON only (never pickle), to the
servers of its pool only.

    GET  /layout          -> {"engine_id", "tp_size", "block_size", "ranks": [CacheLayout JSON, every rank]}
    GET  /pins/<id>       -> {"engine_id", "block_ids", "prompt_digest", "group", "claimed"}, or 404
    POST /claim   {"request_id", "engine_id", "token"}                -> the pin as above; 404 gone; 409 claimed
    POST /release {"request_id", "engine_id", "token", "num_bytes"?}  -> {"released": bool}

Every call must carry the pool's X-Moeserve-Auth signature (trust.py), else 401: agent metadata,
buffer addresses and pins go to the pool's servers only. A decoder claims a pin before its engine
reads the blocks, with a token only it can make; the first claim binds the pin to that token, a
claim with another token is a 409 (another decoder took it), and only a release with that token
frees it. num_bytes: what the decoder's ranks read of the pin, together (the transfer counters).

Bounded: at most MAX_CONNECTIONS at once, REQUEST_DEADLINE_S for a whole request (a slow client is cut
off), MAX_BODY_BYTES of body, Content-Length bodies only. A connection past the cap closes the oldest
one whose call has not yet been verified as signed (a pool server sends its whole call at once, so
an idle connection is no server of the pool: one process holding MAX_CONNECTIONS idle connections
kept every decoder out); only when every slot holds a signed call is it answered 503 and closed.
The server thread never touches engine state: it reads what the engine loop publishes and queues
releases for the loop (`drain_releases`). It binds to the address it is given (127.0.0.1 by default).
"""
from __future__ import annotations

import json
import logging
import queue
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from moeserve.kv_transfer.trust import AUTH_HEADER, PoolKey, check_call

log = logging.getLogger("moeserve.kv_transfer")

MAX_BODY_BYTES = 64 * 1024
MAX_CONNECTIONS = 64
MAX_NUM_BYTES = 1 << 48  # what a release may say its decoder read: far above any pin, far below msgpack's 2**64
REQUEST_DEADLINE_S = 10.0
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class SideChannel:
    """Serves one engine's layout and pins; thread-safe toward the engine loop."""

    def __init__(self, host: str, port: int, engine_id: str, layout: dict[str, Any], key: PoolKey,
                 deadline_s: float = REQUEST_DEADLINE_S, max_connections: int = MAX_CONNECTIONS):
        self.engine_id = engine_id
        self.key = key
        self.layout = dict(layout, engine_id=engine_id)
        self._lock = threading.Lock()
        self._pins: dict[str, dict[str, Any]] = {}
        self._claims: dict[str, str] = {}  # request id -> the token its decoder claimed it with
        self._released: queue.SimpleQueue[tuple[str, int | None]] = queue.SimpleQueue()
        self._server = _BoundedServer((host, port), _handler(self), deadline_s, max_connections)
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), name="kv-side-channel",
                                        daemon=True)
        self._thread.start()

    def publish(self, request_id: str, block_ids: list[int], prompt_digest: str, group: int = 0) -> None:
        with self._lock:
            self._pins[request_id] = {"engine_id": self.engine_id, "block_ids": list(block_ids),
                                      "prompt_digest": prompt_digest, "group": group}

    def unpublish(self, request_id: str) -> None:
        with self._lock:
            self._pins.pop(request_id, None)
            self._claims.pop(request_id, None)

    def pin(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            pin = self._pins.get(request_id)
            return None if pin is None else dict(pin, claimed=request_id in self._claims)

    def claim(self, request_id: str, token: str) -> tuple[int, dict[str, Any]]:
        """(status, body) of a claim: 200 and the pin, 404 if not pinned, 409 if claimed with another
        token. Claiming again with the same token is a 200 (a retry to the same decoder)."""
        with self._lock:
            pin = self._pins.get(request_id)
            if pin is None:
                return 404, {"error": "not pinned"}
            held = self._claims.setdefault(request_id, token)
            if held != token:
                return 409, {"error": "claimed by another decoder"}
            return 200, dict(pin, claimed=True)

    def release(self, request_id: str, token: str, num_bytes: int | None = None) -> bool:
        """The decoder that claimed the pin is done with it: no longer named at once (GET /pins
        answers 404, so no other decoder's claim passes), freed when the engine loop drains it."""
        with self._lock:
            if request_id not in self._pins or self._claims.get(request_id) != token:
                return False
            del self._pins[request_id], self._claims[request_id]
        self._released.put((request_id, num_bytes))
        return True

    def drain_releases(self) -> list[tuple[str, int | None]]:
        """(request id, bytes its decoder says it read, or None) of each release since the last call."""
        out = []
        while True:
            try:
                out.append(self._released.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them, each cut off after `deadline_s`;
    past the cap the oldest connection without a verified call makes room."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type, deadline_s: float, max_connections: int):
        self.deadline_s = deadline_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._open: dict[socket.socket, float] = {}  # connection -> its deadline (time.monotonic()), oldest first
        self._signed: set[socket.socket] = set()  # connections whose call was verified: never closed to make room
        self._open_lock = threading.Lock()
        self._closed = threading.Event()
        super().__init__(address, handler)
        threading.Thread(target=self._reap, name="kv-side-channel-reaper", daemon=True).start()

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not self._make_room():
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._open[request] = time.monotonic() + self.deadline_s
        super().process_request(request, client_address)

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open.pop(request, None)
                self._signed.discard(request)
            self._slots.release()

    def signed(self, request: socket.socket) -> None:
        """The connection's call carries the pool's signature: it keeps its slot until its deadline."""
        with self._open_lock:
            self._signed.add(request)

    def _make_room(self) -> bool:
        """Close the oldest connection without a verified call and take its slot once its thread ends."""
        with self._open_lock:
            victim = next((s for s in self._open if s not in self._signed), None)
        if victim is None:
            return False
        try:
            victim.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return self._slots.acquire(timeout=1.0)

    def handle_error(self, request: socket.socket, client_address: Any) -> None:
        """One line, not socketserver's traceback on stderr: a peer that hung up (or was closed to make
        room) is routine; anything else is a bug worth a warning."""
        error = sys.exc_info()[1]
        level = logging.DEBUG if isinstance(error, OSError) else logging.WARNING
        log.log(level, "side channel: a call from %s ended in %s: %s", client_address[0], type(error).__name__, error)

    def _reap(self) -> None:
        """Shuts down connections past their deadline (a client sending a byte now and then)."""
        while not self._closed.wait(min(0.5, self.deadline_s / 4)):
            now = time.monotonic()
            with self._open_lock:
                late = [s for s, deadline in self._open.items() if deadline < now]
            for s in late:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _BadRequest(Exception):
    pass


def _handler(channel: SideChannel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_DEADLINE_S  # each read; the reaper bounds the whole request

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the engine's log is for operators
            log.debug(fmt, *args)

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding"):
                raise _BadRequest("send the body with a Content-Length")
            if len(self.headers.get_all("Content-Length") or ()) > 1:
                raise _BadRequest("send one Content-Length")
            text = self.headers.get("Content-Length") or "0"
            if not (text.isascii() and text.isdigit()) or int(text) > MAX_BODY_BYTES:  # "²".isdigit() too
                raise _BadRequest(f"Content-Length must be a number of at most {MAX_BODY_BYTES} bytes")
            return self.rfile.read(int(text))

        def _authorized(self, body: bytes) -> bool:
            if check_call(channel.key, self.headers.get(AUTH_HEADER), self.command, self.path, body):
                self.server.signed(self.request)
                return True
            self._reply(401, {"error": "this side channel answers the servers of its KV pool only: a call must be "
                                       "signed with the pool's secret (--kv-secret)"})
            return False

        def do_GET(self) -> None:
            try:
                body = self._body()
            except _BadRequest as e:
                return self._reply(400, {"error": str(e)})
            if not self._authorized(body):
                return
            if self.path == "/layout":
                return self._reply(200, channel.layout)
            if self.path.startswith("/pins/"):
                pin = channel.pin(urllib.parse.unquote(self.path[len("/pins/"):]))
                return self._reply(200, pin) if pin is not None else self._reply(404, {"error": "not pinned"})
            self._reply(404, {"error": "no such path"})

        def do_POST(self) -> None:
            try:
                raw = self._body()
            except _BadRequest as e:
                return self._reply(400, {"error": str(e)})
            if not self._authorized(raw):
                return
            if self.path not in ("/claim", "/release"):
                return self._reply(404, {"error": "no such path"})
            try:
                request_id, engine_id, token, num_bytes = _pin_call(raw)
            except (_BadRequest, ValueError, RecursionError) as e:
                return self._reply(400, {"error": f"body must be {{\"request_id\": str, \"engine_id\": str, "
                                                  f"\"token\": str, \"num_bytes\": int (optional)}}: {e}"})
            if engine_id != channel.engine_id:  # parameters of an engine that restarted since
                return self._reply(404, {"error": "not pinned"}) if self.path == "/claim" else \
                    self._reply(200, {"released": False})
            if self.path == "/claim":
                return self._reply(*channel.claim(request_id, token))
            self._reply(200, {"released": channel.release(request_id, token, num_bytes)})

    return Handler


def _pin_call(raw: bytes) -> tuple[str, str, str, int | None]:
    body = json.loads(raw)
    if not isinstance(body, dict):
        raise _BadRequest("not an object")
    request_id, engine_id, token, num_bytes = (body.get(k) for k in ("request_id", "engine_id", "token", "num_bytes"))
    if not all(isinstance(v, str) and v for v in (request_id, engine_id, token)):
        raise _BadRequest("request_id, engine_id and token must be non-empty strings")
    if num_bytes is not None and (isinstance(num_bytes, bool) or not isinstance(num_bytes, int)
                                  or not 0 <= num_bytes <= MAX_NUM_BYTES):  # 10**100 ended the engine (msgpack)
        raise _BadRequest(f"num_bytes must be an integer in [0, {MAX_NUM_BYTES}]")
    return request_id, engine_id, token, num_bytes
