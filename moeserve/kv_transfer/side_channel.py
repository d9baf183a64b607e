"""The side channel of a prefill engine: a small HTTP server speaking JSON only (never pickle).

    GET  /layout          -> {"engine_id", "tp_size", "block_size", "ranks": [CacheLayout JSON, every rank]}
    GET  /pins/<id>       -> {"engine_id", "block_ids", "prompt_digest", "group"}, or 404: not (or no longer) pinned
    POST /release {"request_id", "engine_id", "num_bytes"?} -> {"released": bool}

num_bytes: what the decoder's ranks read of the pin, together (the prefill side's transfer counters).

A decoder fetches /layout once per prefill engine (the NIXL handshake), asks /pins before it takes a
request (stale parameters are a 400 there, not garbage KV later), and posts /release once it has
read the blocks. The server thread never touches engine state: it reads a snapshot the engine loop
publishes and queues releases for the loop (`drain_releases`). Binds 127.0.0.1 unless told otherwise.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("moeserve.kv_transfer")

MAX_BODY_BYTES = 64 * 1024


class SideChannel:
    """Serves one engine's layout and pins; thread-safe toward the engine loop."""

    def __init__(self, host: str, port: int, engine_id: str, layout: dict[str, Any]):
        self.engine_id = engine_id
        self.layout = dict(layout, engine_id=engine_id)
        self._lock = threading.Lock()
        self._pins: dict[str, dict[str, Any]] = {}
        self._released: queue.SimpleQueue[tuple[str, int | None]] = queue.SimpleQueue()
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, name="kv-side-channel", daemon=True)
        self._thread.start()

    def publish(self, request_id: str, block_ids: list[int], prompt_digest: str, group: int = 0) -> None:
        with self._lock:
            self._pins[request_id] = {"engine_id": self.engine_id, "block_ids": list(block_ids),
                                      "prompt_digest": prompt_digest, "group": group}

    def unpublish(self, request_id: str) -> None:
        with self._lock:
            self._pins.pop(request_id, None)

    def pin(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self._pins.get(request_id)

    def release(self, request_id: str, num_bytes: int | None = None) -> bool:
        """A decoder is done with the pin: no longer named at once (GET /pins answers 404, so no other
        decoder's check passes), freed when the engine loop drains it."""
        with self._lock:
            known = self._pins.pop(request_id, None) is not None
        if known:
            self._released.put((request_id, num_bytes))
        return known

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


def _handler(channel: SideChannel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the engine's log is for operators
            log.debug(fmt, *args)

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/layout":
                return self._reply(200, channel.layout)
            if self.path.startswith("/pins/"):
                pin = channel.pin(urllib.request.unquote(self.path[len("/pins/"):]))
                return self._reply(200, pin) if pin is not None else self._reply(404, {"error": "not pinned"})
            self._reply(404, {"error": "no such path"})

        def do_POST(self) -> None:
            if self.path != "/release":
                return self._reply(404, {"error": "no such path"})
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY_BYTES:
                return self._reply(400, {"error": "a JSON body of at most 64 KiB is required"})
            try:
                body = json.loads(self.rfile.read(length))
                request_id, engine_id, num_bytes = body["request_id"], body.get("engine_id"), body.get("num_bytes")
                if num_bytes is not None and (isinstance(num_bytes, bool) or not isinstance(num_bytes, int)
                                              or num_bytes < 0):
                    raise ValueError(num_bytes)
            except (ValueError, KeyError, TypeError, AttributeError):
                return self._reply(400, {"error": "body must be {\"request_id\": str, \"engine_id\": str, "
                                                  "\"num_bytes\": int (optional)}"})
            if engine_id not in (None, channel.engine_id) or not isinstance(request_id, str):
                return self._reply(200, {"released": False})
            self._reply(200, {"released": channel.release(request_id, num_bytes)})

    return Handler


class PeerError(RuntimeError):
    """The side channel of a peer did not answer (connection refused, timeout, not HTTP)."""


def get_json(host: str, port: int, path: str, timeout_s: float) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of GET http://host:port/path; PeerError when nothing usable answered."""
    url = f"http://{_netloc(host, port)}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, {}
    except (OSError, ValueError) as e:
        raise PeerError(f"the prefill server's side channel at {_netloc(host, port)} did not answer: {e}") from None


def post_release(host: str, port: int, request_id: str, engine_id: str, timeout_s: float,
                 num_bytes: int | None = None) -> bool:
    body = {"request_id": request_id, "engine_id": engine_id}
    if num_bytes is not None:
        body["num_bytes"] = num_bytes
    data = json.dumps(body).encode()
    req = urllib.request.Request(f"http://{_netloc(host, port)}/release", data=data,
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return bool(json.loads(resp.read()).get("released"))
    except (OSError, ValueError):
        return False  # the prefill side frees the blocks at its expiry anyway


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
