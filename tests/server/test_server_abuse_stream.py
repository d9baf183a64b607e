"""A client that stops reading its stream holds at most --max-stream-buffer-bytes of the server's
memory: past it the request is aborted (logged), its engine requests freed, its backlog dropped, while
the connection is still open. Measured by the front end's own count of what waits (/metrics), not RSS.
And the HTTP surface's smaller findings (docs/limits.md): a request line without a version, transfer
and content codings we do not decode, a SIGKILLed front end."""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time

import httpx
import pytest
from server_harness import ServerProcess, alive

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run

BOUND = 256 * 1024


@pytest.fixture(scope="module")
def srv():
    with ServerProcess("--max-model-len", "2048", "--kv-cache-blocks", "640",
                       "--max-stream-buffer-bytes", str(BOUND)) as server:
        yield server


def metric(server, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", httpx.get(server.url + "/metrics", timeout=30).text, re.M)
    return float(m.group(1)) if m else 0.0


def wait_until(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def test_a_client_that_stops_reading_is_aborted_and_its_backlog_freed(srv):
    body = json.dumps({"prompt": "x", "n": 8, "max_tokens": 1900, "ignore_eos": True, "stream": True,
                       "logprobs": 20}).encode()
    host, port = srv.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # little room in the kernel: the server buffers
    sock.connect((host, int(port)))
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        # ... and never read
        assert wait_until(lambda: metric(srv, "moeserve_slow_client_aborts_total") == 1, 240), \
            "the request was not aborted: " + srv.log_tail(5)
        assert metric(srv, "moeserve_stream_buffered_bytes_peak") <= BOUND + 64 * 1024  # one step's outputs past it at most
        # the memory came back while the client still holds its connection open
        assert wait_until(lambda: metric(srv, "moeserve_stream_buffered_bytes") == 0
                          and metric(srv, "moeserve_num_requests_running") == 0
                          and metric(srv, "moeserve_kv_cache_blocks_used") == 0, 30)
        assert any("stopped reading" in line for line in srv.lines)
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 4}, timeout=60)
        assert r.status_code == 200  # everyone else is served as before
    finally:
        sock.close()


def test_a_slow_reader_within_the_bound_gets_its_whole_stream(srv):
    """Reading, however late, is not punished: a stream whose client reads it in full is never cut."""
    before = metric(srv, "moeserve_slow_client_aborts_total")
    body = {"prompt": "x", "n": 2, "max_tokens": 64, "ignore_eos": True, "stream": True, "logprobs": 5}
    finished = 0
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                finished += sum(c["finish_reason"] == "length" for c in json.loads(line[6:])["choices"])
    assert finished == 2 and metric(srv, "moeserve_slow_client_aborts_total") == before


def _raw(server, request: bytes) -> bytes:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and b"content-length" in data.lower():
                head, _, rest = data.partition(b"\r\n\r\n")
                length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
                if len(rest) >= length:
                    break
    return data


def test_a_request_line_without_an_http_version_is_a_400(srv):
    """llhttp reads `GET /health` (no version) as HTTP/0.9, and uvicorn answered it 200."""
    answer = _raw(srv, b"GET /health\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"bad_http_request" in answer


def test_a_transfer_coding_other_than_chunked_is_refused(srv):
    """`Transfer-Encoding: gzip, chunked` with a plain JSON body was read as if uncompressed (200)."""
    body = json.dumps({"prompt": "Hello", "max_tokens": 2}).encode()
    chunked = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    answer = _raw(srv, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked)
    assert answer.startswith(b"HTTP/1.1 501"), answer[:300]
    assert b"unsupported_transfer_encoding" in answer
    answer = _raw(srv, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Encoding: gzip\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert answer.startswith(b"HTTP/1.1 415"), answer[:300]
    plain = _raw(srv, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
    assert plain.startswith(b"HTTP/1.1 200"), plain[:300]


def test_a_sigkilled_front_end_leaves_no_socket_directory_and_no_traceback(srv):
    """Last in this module: it kills the server. The engine follows its front end out quietly (the
    parent-death signal), and the front end's private socket directory is gone."""
    engine = srv.engine_pids[0]
    cmd = open(f"/proc/{engine}/cmdline").read().split("\0")
    sock_dir = os.path.dirname(cmd[cmd.index("--socket") + 1])
    seen = len(srv.lines)
    streaming = threading.Thread(target=_stream_quietly, args=(srv,), daemon=True)
    streaming.start()
    time.sleep(2)  # the engine is mid-step
    srv.proc.kill()
    assert wait_until(lambda: not alive(engine), 60), "the engine outlived its front end"
    time.sleep(1)  # its last words reach the pipe
    assert not os.path.exists(sock_dir)
    after = "".join(srv.lines[seen:])
    assert "Traceback" not in after and "SystemExit" not in after, after


def _stream_quietly(server) -> None:
    try:
        httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1500, "ignore_eos": True},
                   timeout=60)
    except httpx.HTTPError:
        pass
