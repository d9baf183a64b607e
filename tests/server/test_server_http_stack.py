"""The front end runs on uvloop + httptools (C), as vLLM's uvicorn does; MOESERVE_FAST_HTTP=0 (or
either missing) falls back to asyncio + h11 (pure Python) with the same answers. What httptools
alone gets wrong is mended in server/http_protocol.py: a request head's size, header values' trailing
whitespace, chunked responses and interim 100s to HTTP/1.0 requests; and what both stacks lack: a
time limit on a head, answers in the OpenAI error shape to what the parser refuses."""
from __future__ import annotations

import contextlib
import json

import httpx
import pytest
from server_settings import API_KEY, SERVER_ARGS
from server_harness import ServerProcess

from moeserve.server.cli import fast_http

AUTH = {"Authorization": f"Bearer {API_KEY}"}
BODY = {"prompt": "The experts", "max_tokens": 6, "temperature": 0, "stream": True}


def streamed_text(url: str) -> str:
    with httpx.stream("POST", url + "/v1/completions", json=BODY, headers=AUTH, timeout=120) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])


def test_the_default_stack_is_uvloop_and_httptools(server, monkeypatch):
    assert fast_http()  # both are dependencies
    assert any("HTTP front end: uvloop + httptools" in line for line in server.lines), server.log_tail()
    monkeypatch.setenv("MOESERVE_FAST_HTTP", "0")
    assert not fast_http()


@pytest.mark.slow
def test_the_pure_python_fallback_gives_the_same_answers(server):
    slow = ServerProcess(*SERVER_ARGS, env={"MOESERVE_FAST_HTTP": "0"})
    try:
        assert any("HTTP front end: asyncio + h11" in line for line in slow.lines), slow.log_tail()
        assert streamed_text(slow.url) == streamed_text(server.url)
        for srv in (slow, server):  # errors keep their shape on both stacks
            bad = httpx.post(srv.url + "/v1/completions", content=b"{not json", headers=AUTH, timeout=30)
            assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
            big = httpx.post(srv.url + "/v1/completions", content=b"x" * 70000, headers=AUTH, timeout=30)
            assert big.status_code == 413 and "error" in big.json()
    finally:
        slow.kill()


def raw(url: str, data: bytes, chunk: int = 0) -> bytes:
    """Sends `data` on a fresh connection (in `chunk`-byte writes when given); -> all it got back."""
    import socket
    import time

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        try:
            for i in range(0, len(data), chunk or len(data)):
                sock.sendall(data[i:i + (chunk or len(data))])
                if chunk:
                    time.sleep(0.001)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the rest was sent
        got = b""
        try:
            while piece := sock.recv(65536):
                got += piece
        except ConnectionResetError:
            pass
        return got


def test_a_head_over_the_limit_is_a_431_and_the_server_stays_up(server):
    from moeserve.server.http_protocol import HEAD_LIMIT_BYTES

    for size in (4 * HEAD_LIMIT_BYTES, HEAD_LIMIT_BYTES * 3 // 2):  # the second may arrive in one read
        big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
        for chunk in (0, 8192):  # one write, and many: the head is counted as it arrives
            got = raw(server.url, big, chunk)
            head, _, body = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 431"), (size, chunk, got[:200])
            assert json.loads(body)["error"]["code"] == "request_headers_too_large"
    # under the limit, headers and bodies alike are untouched
    ok = raw(server.url, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * (HEAD_LIMIT_BYTES // 2)
             + b"\r\n\r\n", 4096)
    assert ok.startswith(b"HTTP/1.1 200"), ok[:200]
    body = json.dumps({"prompt": "x" * 60000, "max_tokens": 1}).encode()
    post = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + API_KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\n\r\n" + body)
    assert raw(server.url, post, 4096).startswith(b"HTTP/1.1 200")
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_trailing_spaces_and_tabs_after_a_header_value_are_not_part_of_it(server):
    """httptools keeps them (h11 strips them, and RFC 9110 leaves them out of the value)."""
    def models_status(value: bytes) -> int:
        got = raw(server.url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: " + value
                  + b"\r\n\r\n")
        return int(got.split(b" ", 2)[1])

    key = API_KEY.encode()
    values = (b"Bearer " + key + b" ", b"Bearer " + key + b"\t", b"Bearer " + key + b" \t ", b"Bearer " + key,
              b"Bearer " + key + b"x ")
    assert [models_status(v) for v in values] == [200, 200, 200, 200, 401]


def test_a_declared_size_with_trailing_whitespace_is_still_refused_before_reading(server):
    # no body ever comes: the size alone is refused (max-body-bytes is 65536 here)
    got = raw(server.url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer "
              + API_KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 100000 \r\n\r\n")
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), got[:200]
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_an_http10_client_gets_its_stream_without_chunked_coding(server):
    """RFC 9112 6.1: no Transfer-Encoding to a 1.0 request; the body ends with the connection. uvicorn's
    httptools cycle chunked it (h11 did not)."""
    body = json.dumps({**BODY, "prompt": "The experts"}).encode()
    head = (b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer "
            + API_KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    got = raw(server.url, head + body)  # returns once the server closes the connection
    status, _, rest = got.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200"), got[:300]
    assert b"transfer-encoding" not in status.lower() and b"connection: close" in status.lower()
    events = [line[6:] for line in rest.decode().split("\n") if line.startswith("data: ")]
    assert rest.decode().startswith("data: ") and events[-1] == "[DONE]"  # no chunk-size lines in the body
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])
    assert text == streamed_text(server.url)  # the same stream a 1.1 client gets chunked
    # a response with a length is untouched, and 1.1 streams are still chunked
    plain = raw(server.url, b"GET /health HTTP/1.0\r\nHost: x\r\n\r\n")
    assert plain.startswith(b"HTTP/1.1 200") and b"content-length" in plain.lower()
    chunked = raw(server.url, head.replace(b"HTTP/1.0", b"HTTP/1.1").replace(b"Host: x", b"Host: x\r\nConnection: close")
                  + body)
    assert b"transfer-encoding: chunked" in chunked.partition(b"\r\n\r\n")[0].lower()


def test_an_http10_request_expecting_100_continue_gets_no_interim_response(server):
    """RFC 9110 10.1.1: a server must ignore 100-continue in an HTTP/1.0 request (15.2: no 1xx to a 1.0
    client); uvicorn's httptools cycle sent `100 Continue` first."""
    body = json.dumps({"prompt": "The experts", "max_tokens": 2, "temperature": 0}).encode()
    request = (b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
               b"Authorization: Bearer " + API_KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
               + b"\r\n\r\n" + body)
    got = raw(server.url, request)
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    assert b" 100 " not in got.partition(b"\r\n\r\n")[0]
    # a 1.1 request still gets its interim response (and then the answer)
    got11 = raw(server.url, request.replace(b"HTTP/1.0", b"HTTP/1.1").replace(b"Host: x", b"Host: x\r\nConnection: close"))
    assert got11.startswith(b"HTTP/1.1 100 Continue") and b"HTTP/1.1 200" in got11


@contextlib.contextmanager
def in_process_uvicorn(protocol):
    """uvicorn with `protocol` on a free loopback port, serving a 2-byte answer (the app is beside the
    point); -> its port."""
    import socket
    import threading
    import time

    import uvicorn

    from moeserve.server.http_protocol import HEAD_LIMIT_BYTES

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=protocol, loop="asyncio", lifespan="off",
                                       log_level="error", h11_max_incomplete_event_size=HEAD_LIMIT_BYTES))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not uv.started and time.monotonic() < deadline:
            time.sleep(0.05)
        yield port
    finally:
        uv.should_exit = True
        thread.join(30)


@pytest.mark.parametrize("stack", ["httptools", "h11"])
def test_a_head_that_does_not_complete_in_time_is_answered_408_and_closed(monkeypatch, stack):
    """Slowloris: neither uvicorn stack times out a head. Here on an in-process uvicorn with each of
    our protocols and a short limit."""
    import socket
    import time

    from moeserve.server import http_protocol

    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 0.5)
    protocol = {"httptools": http_protocol.BoundedHttpToolsProtocol, "h11": http_protocol.BoundedH11Protocol}[stack]
    with in_process_uvicorn(protocol) as port:
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            assert idle.recv(4096) == b""  # sent nothing: closed, without an answer
        partial = raw(url, b"GET / HTTP/1.1\r\nHost: x\r\n")  # no end of headers
        waited = time.monotonic() - started
        head, _, body = partial.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408") and json.loads(body)["error"]["code"] == "request_timeout"
        assert waited < 10  # both were closed by the limit, not by the test's own socket timeout
        # a head that completes is served, and a kept-alive connection's next head gets its own clock
        def response(sock: socket.socket) -> bytes:
            got = b""
            while not got.endswith(b"\r\n\r\nok"):
                piece = sock.recv(4096)
                assert piece, got
                got += piece
            return got

        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert response(sock).startswith(b"HTTP/1.1 200")
            time.sleep(0.8)  # idle longer than the head limit between requests: uvicorn's keep-alive (5 s) rules
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            time.sleep(0.2)  # a head that comes in pieces, within the limit
            sock.sendall(b"Connection: close\r\n\r\n")
            assert response(sock).startswith(b"HTTP/1.1 200")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert response(sock).startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the next head stalls: its own clock ends it
            rest = b""
            while piece := sock.recv(4096):
                rest += piece
            assert rest.startswith(b"HTTP/1.1 408"), rest[:200]


def test_the_h11_fallback_answers_what_it_refuses_in_the_error_shape():
    """h11 refuses a head past its buffer limit (set to ours) and what it cannot parse; uvicorn answered
    both with a plain-text 400."""
    from moeserve.server.http_protocol import HEAD_LIMIT_BYTES, BoundedH11Protocol

    with in_process_uvicorn(BoundedH11Protocol) as port:
        url = f"http://127.0.0.1:{port}"
        big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 * HEAD_LIMIT_BYTES) + b"\r\n\r\n"
        head, _, body = raw(url, big, 8192).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431") and json.loads(body)["error"]["code"] == "request_headers_too_large"
        head, _, body = raw(url, b"GARBAGE\r\n\r\n").partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and json.loads(body)["error"]["code"] == "bad_http_request"
        ok = raw(url, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * (HEAD_LIMIT_BYTES // 2)
                 + b"\r\n\r\n", 4096)
        assert ok.startswith(b"HTTP/1.1 200"), ok[:200]


def test_a_request_httptools_cannot_parse_gets_a_400_in_the_error_shape(server):
    for bad in (b"GARBAGE\r\n\r\n",
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}",
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}"):
        head, _, body = raw(server.url, bad).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head, head
        assert json.loads(body)["error"]["code"] == "bad_http_request"
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
