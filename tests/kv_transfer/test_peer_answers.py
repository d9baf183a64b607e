"""What a decoder reads of a prefill peer's side-channel answers is bounded: in size (a pool member, or
whatever now listens on a dead prefill server's port, could answer a claim or a pin check with
gigabytes) and in time as a whole (a peer sending a byte now and then never trips a per-read
timeout). A larger, slower or garbled answer fails that call alone, with an error saying so: a 503
for the front end's claim, a PeerError (the pull fails) for the engine's calls."""
from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest

from moeserve.kv_transfer import params as kv
from moeserve.kv_transfer import peer_calls
from moeserve.kv_transfer.peer_calls import ANSWER_BYTES, PeerError, get_json, pin_answer_bytes, pin_path
from moeserve.kv_transfer.trust import PoolKey
from moeserve.server import kv_params
from moeserve.server.api_errors import ApiError

KEY = PoolKey.from_secret("the pool's secret, long enough", "test")
BLOCKS = [3, 4, 5]


class FakePeer:
    """A side channel that answers every call with `head` then `body`, sent in pieces of `piece`
    bytes; between pieces it waits on `drip` (an Event the test sets when it is done) for `gap_s`."""

    def __init__(self, body: bytes, head: bytes | None = None, piece: int = 1 << 20, gap_s: float = 0.0):
        self.head = head if head is not None else (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                                   b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        self.body, self.piece, self.gap_s = body, piece, gap_s
        self.done = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                try:
                    _read_request(conn)
                    data = self.head + self.body
                    for i in range(0, len(data), self.piece):
                        conn.sendall(data[i: i + self.piece])
                        if self.gap_s and self.done.wait(self.gap_s):
                            return
                except OSError:
                    pass

    def close(self) -> None:
        self.done.set()
        self.server.close()


def _read_request(conn: socket.socket) -> None:
    """The whole call (head and Content-Length body): closing a socket with unread bytes resets it."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(1 << 16)
    head, body = data.split(b"\r\n\r\n", 1)
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(1 << 16)


def pin_answer(**extra) -> bytes:
    return json.dumps(dict({"engine_id": "engine-1", "block_ids": BLOCKS, "prompt_digest": "d", "group": 0,
                            "claimed": True}, **extra)).encode()


def remote(port: int) -> kv.RemotePrefill:
    return kv.RemotePrefill("engine-1", "r", BLOCKS, "127.0.0.1", port, prompt_digest="d")


def claim(port: int) -> None:
    asyncio.run(kv_params._claim(remote(port), "token", KEY))


def test_a_pin_answer_of_the_right_size_is_read():
    peer = FakePeer(pin_answer())
    try:
        assert get_json("127.0.0.1", peer.port, KEY, pin_path("r"), 5, pin_answer_bytes(BLOCKS))[1]["block_ids"] == BLOCKS
        claim(peer.port)  # passes: the pin is the one named
    finally:
        peer.close()


@pytest.mark.parametrize("with_length", [True, False])
def test_an_oversized_pin_answer_fails_that_call_only(with_length):
    """A valid pin padded past the cap: before, the engine's pin check read up to 16 MiB and the
    front end's claim read any size (both then used the pin)."""
    body = pin_answer(pad="x" * (2 * ANSWER_BYTES))
    head = None if with_length else b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"  # read until the peer closes
    peer = FakePeer(body, head, piece=4096)
    try:
        with pytest.raises(PeerError, match=f"answered more than {pin_answer_bytes(BLOCKS)} bytes to GET /pins"):
            get_json("127.0.0.1", peer.port, KEY, pin_path("r"), 5, pin_answer_bytes(BLOCKS))
        with pytest.raises(ApiError) as e:
            claim(peer.port)
        assert e.value.status == 503 and "answered more than" in e.value.message
        assert peer_calls.post_release("127.0.0.1", peer.port, KEY, "r", "engine-1", "t", 5) is False
    finally:
        peer.close()


def test_a_garbled_answer_fails_that_call_only():
    peer = FakePeer(b"\xff{not json")
    try:
        with pytest.raises(PeerError, match="did not answer"):
            get_json("127.0.0.1", peer.port, KEY, pin_path("r"), 5)
        with pytest.raises(ApiError) as e:
            claim(peer.port)
        assert e.value.status == 503
    finally:
        peer.close()


def test_a_peer_dripping_its_answer_is_cut_off_at_the_calls_timeout():
    """A byte every 20 ms keeps every socket read within http.client's per-read timeout: before, the
    call took as long as the peer liked (here it would have ended, with its 200, once the whole
    answer had dripped in, about 4 s later). Now the call's timeout bounds all of it."""
    peer = FakePeer(pin_answer(), piece=1, gap_s=0.02)
    try:
        with pytest.raises(PeerError, match=r"did not answer \(TimeoutError\)"):
            get_json("127.0.0.1", peer.port, KEY, pin_path("r"), 0.3)
    finally:
        peer.close()


def test_a_name_the_resolver_does_not_answer_for_fails_at_the_calls_timeout(monkeypatch):
    """Resolving a prefill server's host name is part of the call: a resolver that does not answer
    (a blackholed DNS server) fails the call at its timeout, as a peer that does not answer does.
    Before, getaddrinfo ran inside http.client's connect, under no timeout."""
    released = threading.Event()
    real = socket.getaddrinfo

    def stuck(host, *args, **kwargs):
        if host == "prefill.example.internal":
            released.wait(30)
            raise socket.gaierror("gave up")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", stuck)
    try:
        with pytest.raises(PeerError, match=r"did not answer \(TimeoutError\)"):
            get_json("prefill.example.internal", 9, KEY, pin_path("r"), 0.3)
        assert not released.is_set()  # it gave up on the resolver, which was still waiting
    finally:
        released.set()


def test_a_peer_named_by_address_or_resolvable_name_is_called():
    peer = FakePeer(pin_answer())
    try:
        for host in ("127.0.0.1", "localhost"):
            status, answer = get_json(host, peer.port, KEY, pin_path("r"), 5)
            assert status == 200 and answer["block_ids"] == BLOCKS
    finally:
        peer.close()
