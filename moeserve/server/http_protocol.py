"""uvicorn's httptools protocol with a bound on a request's head (request line + headers) in size
and in time, header values without trailing whitespace, HTTP/1.0 answered as HTTP/1.0 allows, and
a request it cannot parse answered in the OpenAI error shape (a request line without an HTTP version
included: llhttp reads it as HTTP/0.9 and uvicorn served it); and uvicorn's h11 protocol, the pure
Python fallback (`MOESERVE_FAST_HTTP=0`), with the same time bound and error answers.

httptools keeps a header value's trailing spaces and tabs, which RFC 9110 leaves out of the value
and h11 strips: `Authorization: Bearer KEY ` got a 401, and `Content-Length: N ` slipped past the
early size check (found by a raw-socket check). Stripped here, every header the
application reads is what h11 would have given it.

httptools buffers a header until its end, with no limit: 32 MB of one header value reached the
application before this bound (measured), and the head is read before any API-key
check, so anyone who can reach the port could make the front end hold gigabytes. h11, the pure
Python fallback, refuses heads over its `max_incomplete_event_size` on its own (set to the same
limit by the server, answered 431 here). nginx allows 4 x 8 KiB by default; we allow
HEAD_LIMIT_BYTES in all and answer a larger head 431, in the OpenAI error shape, then close.

Counting: a head that completes is measured exactly, from its URL and headers as the parser hands
them over (the chunk arithmetic below alone let a 120,000-byte head sent in one write, complete in
one read, be served). A head still open, which httptools
buffers, is bounded after each chunk the parser takes: a chunk that ends inside a head which began
in an earlier chunk is all head bytes; a chunk in which a head begins is not counted, since the
parser does not say where in it the head began (after a body, on a pipelined connection, most of it
may be body). So nothing but head bytes is ever counted, and the memory held is at most the limit
plus two reads.

Neither uvicorn stack times out a head: a connection that sends nothing, or a request line and some
headers and then nothing, stayed open for good (held 180 s in a test), and enough
of them exhaust the server's sockets (the slowloris attack). A head must now complete within
HEAD_TIMEOUT_S of the connection opening or of its first byte (a request after a kept-alive one): a
partial head is answered 408 and closed, an idle connection closed. Both stacks (`_HeadGuard`). nginx waits 60 s for a head
(`client_header_timeout`); a head that takes 30 s on loopback or a LAN is not a client at work. The
body has its own timeout (`common.BODY_IDLE_TIMEOUT_S`).

HTTP/1.0 has no chunked transfer coding (RFC 9112 section 6.1: a server must not send
Transfer-Encoding unless the request says HTTP/1.1 or later), yet uvicorn's httptools cycle chunks
every response that declares no length, streams included, whatever the request's version; an
HTTP/1.0 client (`curl --http1.0`, a proxy that speaks 1.0 to its upstream) then reads the chunk
sizes as body text. h11 does what the RFC says: no coding, and the end of the body is the
connection's close. So does `_CloseDelimitedCycle` for a 1.0 request (uvicorn already closes every
1.0 connection after its response). And an `Expect: 100-continue` of a 1.0 request is ignored, as
RFC 9110 10.1.1 says it must be: uvicorn answered it with an interim `100 Continue`, a 1xx response
that section 15.2 forbids sending to a 1.0 client.
"""
from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

HEAD_LIMIT_BYTES = 64 * 1024
HEAD_TIMEOUT_S = 30.0  # read when a head's clock starts


def _error_response(status: bytes, message: str, code: str, headers: bytes = b"") -> bytes:
    """A whole HTTP response, written before the application sees the request: the OpenAI error
    shape, then the connection closes."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}).encode()
    return (b"HTTP/1.1 " + status + b"\r\n" + headers + b"content-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


_TOO_LARGE = _error_response(b"431 Request Header Fields Too Large",
                             f"the request line and headers exceed {HEAD_LIMIT_BYTES} bytes", "request_headers_too_large")
_TOO_SLOW = _error_response(b"408 Request Timeout", "the request line and headers did not arrive in time",
                            "request_timeout")


def _bad_request(default_headers: list[tuple[bytes, bytes]]) -> bytes:
    headers = b"".join(name + b": " + value + b"\r\n" for name, value in default_headers)
    return _error_response(b"400 Bad Request", "the request line or headers could not be parsed as HTTP/1.x",
                           "bad_http_request", headers)


class _HeadGuard:
    """Both stacks' bounds on a request's head: closes a connection whose head does not complete
    within HEAD_TIMEOUT_S (408 when part of one came, `_head_is_partial`; silently when nothing did),
    and answers a head the parser refused, 431 or 400, in the OpenAI error shape (`_refuse_head`)."""

    head_timer = None  # closes the connection unless a head completes first

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._start_head_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_clock()
        super().connection_lost(exc)

    def _start_head_clock(self) -> None:
        self._stop_head_clock()
        self.head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)

    def _stop_head_clock(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_too_slow(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        if self._head_is_partial():  # say why it is closed
            self.logger.warning("a request's head was not complete after %g s: answered 408 and closed", HEAD_TIMEOUT_S)
            self.transport.write(_TOO_SLOW)
        self.transport.close()

    def _head_is_partial(self) -> bool:
        raise NotImplementedError

    def _refuse_head(self, too_large: bool) -> None:
        """431 for a head over HEAD_LIMIT_BYTES, else 400 (unparseable); then the connection closes."""
        if too_large:
            self.logger.warning("a request's head exceeded %d bytes: answered 431 and closed", HEAD_LIMIT_BYTES)
            self.transport.write(_TOO_LARGE)
        else:
            self.transport.write(_bad_request(self.server_state.default_headers))
        self.transport.close()


class BoundedHttpToolsProtocol(_HeadGuard, HttpToolsProtocol):
    head_bytes = 0  # counted bytes of the head being read
    in_head = False  # between a message's first byte and its end of headers
    head_began = False  # a head began in the chunk being fed
    head_fields = 0  # bytes of the URL and headers the parser has handed over for this head
    head_too_large = False

    def _head_is_partial(self) -> bool:
        return self.in_head

    def data_received(self, data: bytes) -> None:
        self.head_began = False
        super().data_received(data)
        if not self.in_head or self.head_began or self.transport.is_closing():
            return
        self.head_bytes += len(data)
        if self.head_bytes > HEAD_LIMIT_BYTES:
            self._refuse_head(too_large=True)

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def _count_head(self, n: int) -> None:
        self.head_fields += n
        if self.head_fields > HEAD_LIMIT_BYTES:
            self.head_too_large = True
            raise ValueError("head too large")  # the parser stops; uvicorn calls send_400_response

    def send_400_response(self, msg: str) -> None:
        """What httptools cannot parse (a bad request line, conflicting lengths) is answered in the
        OpenAI error shape like every other 400, not uvicorn's plain text; a head over the limit, 431."""
        self._refuse_head(self.head_too_large)

    def on_message_begin(self) -> None:
        self.in_head, self.head_began, self.head_bytes, self.head_fields = True, True, 0, 0
        if self.head_timer is None:  # a request after a kept-alive one: its head's clock starts now
            self._start_head_clock()
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value.rstrip(b" \t"))

    def on_headers_complete(self) -> None:
        self.in_head = False
        self._stop_head_clock()
        if self.parser.get_http_version() == "0.9":  # a request line without a version: h11 refuses it too
            raise ValueError("no HTTP version")  # the parser stops; uvicorn calls send_400_response
        if self.parser.get_http_version() == "1.0":
            self.expect_100_continue = False  # RFC 9110 10.1.1: ignored in a 1.0 request
        super().on_headers_complete()
        if self.cycle is not None and self.scope.get("http_version") == "1.0":
            # the cycle was made just now and its task has not run yet: same state, other `send`
            self.cycle.__class__ = _CloseDelimitedCycle


class _CloseDelimitedCycle(RequestResponseCycle):
    """A response to an HTTP/1.0 request: one that declares no length goes out as it comes, without
    chunked coding, and ends when the connection closes."""

    close_delimited = False

    async def send(self, message) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            names = {name.lower() for name, _ in message.get("headers", [])}
            if (b"content-length" not in names and self.scope["method"] != "HEAD"
                    and message["status"] not in (204, 304)):
                self.close_delimited = True
                self.chunked_encoding = False  # uvicorn chunks only while this is None
                message = {**message, "headers": [(n, v) for n, v in message.get("headers", [])
                                                  if n.lower() != b"transfer-encoding"]}
            await super().send(message)
        elif self.close_delimited and message["type"] == "http.response.body" and not self.response_complete:
            if self.flow.write_paused and not self.disconnected:
                await self.flow.drain()
            if self.disconnected:
                return
            self.transport.write(message.get("body", b""))
            if not message.get("more_body", False):
                self.response_complete = True
                self.message_event.set()
                self.transport.close()  # the end of a close-delimited body
                self.on_response()
        else:
            await super().send(message)


class BoundedH11Protocol(_HeadGuard, H11Protocol):
    """The fallback stack: h11 bounds a head's size itself (431 here, as on httptools) and strips
    header whitespace; the clock runs while h11 waits for a head, from the connection's opening or,
    on a kept-alive connection, from the next head's first byte (before it, uvicorn's keep-alive
    timeout closes an idle connection)."""

    served = False  # a request's head has completed on this connection

    def _head_is_partial(self) -> bool:
        return bool(self.conn.trailing_data[0])

    def handle_events(self) -> None:
        super().handle_events()
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            self.served = self.served or self.conn.their_state is not h11.ERROR
            self._stop_head_clock()
        elif (not self.served or self._head_is_partial()) and self.head_timer is None:
            self._start_head_clock()

    def send_400_response(self, msg: str) -> None:
        """h11 refused the head: too large (its buffer is past the limit) or unparseable."""
        self._refuse_head(len(self.conn.trailing_data[0]) > HEAD_LIMIT_BYTES)
