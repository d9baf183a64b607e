"""A request body that never comes whole: a client that leaves mid-body is not the server's error,
and one that stops sending gets a 408. In-process, fake engine."""
from __future__ import annotations

import asyncio
import json
import logging

from server_fakes import FakeEngine, make_app

from moeserve.server.config_file import ServerConfig


def asgi_call(app, method: str, path: str, headers: list[tuple[bytes, bytes]], messages: list[dict]):
    """One raw ASGI request whose body arrives as `messages`; -> (the messages it sends, the call)."""
    sent: list[dict] = []
    queue = list(messages)

    async def receive() -> dict:
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)  # nothing more is coming

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}

    async def call():
        await asyncio.wait_for(app(scope, receive, send), 30)

    return sent, call


def run(config: ServerConfig, body):
    async def main():
        http, client, _ = await make_app(FakeEngine(), config=config)
        try:
            return await body(http._transport.app, http)
        finally:
            await http.aclose()
            await client.shutdown()

    return asyncio.run(main())


def _status(sent: list[dict]) -> tuple[int, dict]:
    start = next(m for m in sent if m["type"] == "http.response.start")
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(data)


def test_a_client_leaving_mid_body_is_a_499_not_a_logged_500(caplog):
    caplog.set_level(logging.WARNING, logger="moeserve.server")

    async def body(app, http):
        headers = [(b"content-length", b"200"), (b"content-type", b"application/json")]
        sent, call = asgi_call(app, "POST", "/v1/completions", headers,
                                  [{"type": "http.request", "body": b'{"prompt": [1, 2', "more_body": True},
                                   {"type": "http.disconnect"}])
        await call()
        metrics = (await http.get("/metrics")).text
        return _status(sent), metrics

    (status, err), metrics = run(ServerConfig(), body)
    assert status == 499 and err["error"]["code"] == "client_disconnected"
    assert 'moeserve_http_responses_total{route="/v1/completions",status="499"} 1.0' in metrics
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_body_that_stops_arriving_is_a_408_that_closes_the_connection(monkeypatch):
    from moeserve.server import common

    monkeypatch.setattr(common, "BODY_IDLE_TIMEOUT_S", 0.3)

    async def body(app, http):
        headers = [(b"content-length", b"200"), (b"content-type", b"application/json")]
        sent, call = asgi_call(app, "POST", "/v1/completions", headers,
                                  [{"type": "http.request", "body": b'{"prompt": [1, 2', "more_body": True}])
        await call()  # the rest never comes
        ok = await http.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
        return sent, ok

    sent, ok = run(ServerConfig(), body)
    status, err = _status(sent)
    assert status == 408 and err["error"]["code"] == "request_timeout"
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert (b"connection", b"close") in start["headers"]
    assert ok.status_code == 200  # nothing else is touched
