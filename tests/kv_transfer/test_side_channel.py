"""The prefill engine's side channel (JSON over HTTP on loopback), without NIXL: what it serves, to whom
(signed calls of its pool only), and its bounds (connections, slow clients, malformed bodies)."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from moeserve.kv_transfer.peer_calls import PeerError, call, claim, get_json, pin_path, post_release
from moeserve.kv_transfer.side_channel import MAX_BODY_BYTES, MAX_NUM_BYTES, SideChannel
from moeserve.kv_transfer.trust import AUTH_HEADER, PoolKey, sign_call

KEY = PoolKey.from_secret("the pool's secret, long enough", "test")
OTHER = PoolKey.from_secret("another pool's secret, long enough", "test")


@pytest.fixture
def channel():
    ch = SideChannel("127.0.0.1", 0, "engine-1", {"tp_size": 1, "block_size": 16, "ranks": [{"agent_name": "a"}]}, KEY)
    yield ch
    ch.close()


def raw(channel, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", channel.port, timeout=5)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else {}
    finally:
        conn.close()


def test_layout_names_the_engine(channel):
    status, body = get_json(channel.host, channel.port, KEY, "/layout", 5)
    assert status == 200 and body["engine_id"] == "engine-1" and body["ranks"] == [{"agent_name": "a"}]


def test_pins_are_served_until_unpublished(channel):
    channel.publish("cmpl-1-0", [4, 5], "digest")
    status, body = get_json(channel.host, channel.port, KEY, pin_path("cmpl-1-0"), 5)
    assert status == 200 and body == {"engine_id": "engine-1", "block_ids": [4, 5], "prompt_digest": "digest",
                                      "group": 0, "claimed": False}
    channel.unpublish("cmpl-1-0")
    assert get_json(channel.host, channel.port, KEY, pin_path("cmpl-1-0"), 5)[0] == 404


@pytest.mark.parametrize("method, path", [("GET", "/layout"), ("GET", "/pins/r"), ("POST", "/claim"),
                                          ("POST", "/release"), ("GET", "/nothing")])
def test_every_route_answers_401_without_the_pools_signature(channel, method, path):
    channel.publish("r", [1], "d")
    body = json.dumps({"request_id": "r", "engine_id": "engine-1", "token": "t"}).encode() if method == "POST" else b""
    assert raw(channel, method, path, body)[0] == 401
    assert raw(channel, method, path, body, {AUTH_HEADER: "garbage"})[0] == 401
    assert raw(channel, method, path, body, {AUTH_HEADER: sign_call(OTHER, method, path, body)})[0] == 401
    # a signature of another call (path, method, body), or of long ago, is no signature of this one
    assert raw(channel, method, path, body, {AUTH_HEADER: sign_call(KEY, method, "/other", body)})[0] == 401
    assert raw(channel, method, path, body, {AUTH_HEADER: sign_call(KEY, method, path, body + b" ")})[0] == 401
    assert raw(channel, method, path, body, {AUTH_HEADER: sign_call(KEY, method, path, body, time.time() - 3600)})[0] == 401
    assert raw(channel, method, path, body, {AUTH_HEADER: sign_call(KEY, method, path, body)})[0] != 401
    assert channel.pin("r") is not None and channel.drain_releases() == []  # nothing unsigned touched the pin


def test_a_pin_is_claimed_by_one_decoder_and_released_only_with_its_token(channel):
    channel.publish("r", [1, 2], "d", group=1)
    status, pin = claim(channel.host, channel.port, KEY, "r", "engine-1", "token-a", 5)
    assert status == 200 and pin["block_ids"] == [1, 2] and pin["group"] == 1 and pin["claimed"]
    assert claim(channel.host, channel.port, KEY, "r", "engine-1", "token-a", 5)[0] == 200  # a retry, same decoder
    assert claim(channel.host, channel.port, KEY, "r", "engine-1", "token-b", 5)[0] == 409  # another decoder
    assert claim(channel.host, channel.port, KEY, "r", "engine-2", "token-a", 5)[0] == 404  # a restarted engine's id
    assert not post_release(channel.host, channel.port, KEY, "r", "engine-1", "token-b", 5)
    assert not post_release(channel.host, channel.port, KEY, "r", "engine-2", "token-a", 5)
    assert channel.drain_releases() == []
    assert post_release(channel.host, channel.port, KEY, "r", "engine-1", "token-a", 5, num_bytes=4096)
    assert channel.drain_releases() == [("r", 4096)]
    assert get_json(channel.host, channel.port, KEY, pin_path("r"), 5)[0] == 404  # no longer named at once
    assert not post_release(channel.host, channel.port, KEY, "r", "engine-1", "token-a", 5)
    assert channel.drain_releases() == []


def test_an_unclaimed_pin_cannot_be_released(channel):
    channel.publish("r", [1], "d")
    assert not post_release(channel.host, channel.port, KEY, "r", "engine-1", "any-token", 5)
    assert channel.pin("r") is not None


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"engine_id": "engine-1"}', b'{"request_id": "r"}',
                                  b'{"request_id": "r", "engine_id": "engine-1", "token": "t", "num_bytes": -1}',
                                  b'{"request_id": "r", "engine_id": "engine-1", "token": "t", "num_bytes": "9"}',
                                  b'{"request_id": 1, "engine_id": "engine-1", "token": "t"}',
                                  b"[" * 100_000])
def test_a_bad_body_is_a_400(channel, body):
    for path in ("/claim", "/release"):
        status, answer = raw(channel, "POST", path, body, {AUTH_HEADER: sign_call(KEY, "POST", path, body)})
        assert status == 400 and "error" in answer


def test_a_bad_length_or_chunked_body_is_a_400_not_a_crash(channel):
    for headers in ({"Content-Length": "abc"}, {"Content-Length": "-1"}, {"Content-Length": str(MAX_BODY_BYTES + 1)},
                    {"Transfer-Encoding": "chunked"}):
        with socket.create_connection(("127.0.0.1", channel.port), timeout=5) as s:
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            s.sendall(f"POST /release HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
            assert s.recv(64).startswith(b"HTTP/1.0 400"), headers
    assert get_json(channel.host, channel.port, KEY, "/layout", 5)[0] == 200


def test_slow_clients_are_cut_off_and_idle_connections_make_room():
    """Connections that hold their slot without a signed call (one process kept 64 of them open, and
    every decoder of the pool got a 503) give way to a new one, oldest first; the rest are cut off at
    their deadline."""
    ch = SideChannel("127.0.0.1", 0, "engine-1", {"ranks": []}, KEY, deadline_s=1.5, max_connections=4)
    try:
        slow = [socket.create_connection(("127.0.0.1", ch.port), timeout=10) for _ in range(4)]
        for s in slow:
            s.sendall(b"GET /layout HTTP/1.1\r\n")  # and never the rest
        time.sleep(0.3)
        assert get_json(ch.host, ch.port, KEY, "/layout", 5)[0] == 200  # past the cap, at once
        assert slow[0].recv(64) == b""  # the oldest made room
        for s in slow[1:]:  # each cut off at its deadline, not held open
            assert s.recv(64) == b""
        for s in slow:
            s.close()
        assert get_json(ch.host, ch.port, KEY, "/layout", 5)[0] == 200  # the slots came back
    finally:
        ch.close()


def test_past_the_cap_of_signed_calls_a_connection_is_a_503():
    """Only signed calls keep their slots: four of them, each stuck writing a large /layout to a peer
    that does not read, and a fifth connection gets a 503 at once."""
    layout = {"ranks": [{"agent_metadata": "x" * (16 << 20)}]}  # more than the socket buffers hold
    ch = SideChannel("127.0.0.1", 0, "engine-1", layout, KEY, deadline_s=5.0, max_connections=4)
    try:
        stuck = []
        for _ in range(4):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the layout's write blocks
            s.settimeout(10)
            s.connect(("127.0.0.1", ch.port))
            s.sendall(f"GET /layout HTTP/1.1\r\n{AUTH_HEADER}: {sign_call(KEY, 'GET', '/layout')}\r\n\r\n".encode())
            stuck.append(s)
        for s in stuck:  # each call verified, its answer begun (the rest waits for a reader)
            assert s.recv(12) == b"HTTP/1.0 200"
        with socket.create_connection(("127.0.0.1", ch.port), timeout=5) as extra:
            assert extra.recv(64).startswith(b"HTTP/1.0 503")
        for s in stuck:
            s.close()
    finally:
        ch.close()


@pytest.mark.parametrize("head", [b"Content-Length: \xb2\r\n",  # Latin-1 superscript two: isdigit(), not int()
                                  b"Content-Length: 2\r\nContent-Length: 100\r\n"])
def test_a_length_that_is_no_ascii_number_or_given_twice_is_a_400(channel, head):
    with socket.create_connection(("127.0.0.1", channel.port), timeout=5) as s:
        s.sendall(b"POST /release HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n{}")
        assert s.recv(64).startswith(b"HTTP/1.0 400")


@pytest.mark.parametrize("auth", [lambda: f"{int(time.time())}.".encode() + b"\xe9" * 64,  # compare_digest: ASCII only
                                  lambda: b"\xb2\xb3." + b"0" * 64])
def test_a_signature_header_that_is_no_ascii_is_a_401_not_a_crash(channel, auth):
    with socket.create_connection(("127.0.0.1", channel.port), timeout=5) as s:
        s.sendall(b"GET /layout HTTP/1.1\r\nHost: x\r\n" + AUTH_HEADER.encode() + b": " + auth() + b"\r\n\r\n")
        assert s.recv(64).startswith(b"HTTP/1.0 401")


def test_a_release_that_says_it_read_more_than_a_pin_can_hold_is_a_400(channel):
    """num_bytes 10**100 reached the engine's counters and ended the engine (msgpack cannot pack it)."""
    channel.publish("r", [1], "d")
    assert claim(channel.host, channel.port, KEY, "r", "engine-1", "t", 5)[0] == 200
    body = {"request_id": "r", "engine_id": "engine-1", "token": "t", "num_bytes": 10**100}
    status, answer = call(channel.host, channel.port, KEY, "POST", "/release", body, 5)
    assert status == 400 and "num_bytes" in answer["error"] and channel.drain_releases() == []
    assert post_release(channel.host, channel.port, KEY, "r", "engine-1", "t", 5, num_bytes=MAX_NUM_BYTES)
    assert channel.drain_releases() == [("r", MAX_NUM_BYTES)]


def test_many_slow_connections_hold_few_threads():
    ch = SideChannel("127.0.0.1", 0, "engine-1", {"ranks": []}, KEY, deadline_s=2.0, max_connections=8)
    before = threading.active_count()
    try:
        conns = [socket.create_connection(("127.0.0.1", ch.port), timeout=10) for _ in range(200)]
        time.sleep(0.5)
        assert threading.active_count() - before <= 8 + 1
        for c in conns:
            c.close()
    finally:
        ch.close()


def test_a_dead_side_channel_is_a_peer_error(channel):
    port = channel.port
    channel.close()
    with pytest.raises(PeerError, match="did not answer"):
        get_json("127.0.0.1", port, KEY, "/layout", 2)
    assert not post_release("127.0.0.1", port, KEY, "r", "engine-1", "t", 2)


def test_no_redirect_is_followed():
    """A peer answering 302 is an answer, not a hop to somewhere else."""
    hits = []

    class Redirector(threading.Thread):
        def run(self) -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)
                hits.append(1)
                conn.sendall(b"HTTP/1.0 302 Found\r\nLocation: http://127.0.0.1:1/x\r\nContent-Length: 2\r\n\r\n{}")

    server = socket.create_server(("127.0.0.1", 0))
    Redirector(daemon=True).start()
    status, body = call("127.0.0.1", server.getsockname()[1], KEY, "GET", "/layout", None, 5)
    server.close()
    assert status == 302 and body == {} and hits == [1]
