"""uvicorn's httptools protocol with a bound on a request's head (request line + headers), and
header values without trailing whitespace.

httptools keeps a header value's trailing spaces and tabs, which RFC 9110 leaves out of the value
and h11 strips: `Authorization: Bearer KEY ` got a 401, and `Content-Length: N ` slipped past the
early size check (an independent raw-socket check, session 13). Stripped here, every header the
application reads is what h11 would have given it.

httptools buffers a header until its end, with no limit: 32 MB of one header value reached the
application before this bound (measured, session 13), and the head is read before any API-key
check, so anyone who can reach the port could make the front end hold gigabytes. h11, the pure
Python fallback, refuses heads over 16 KiB on its own. nginx allows 4 x 8 KiB by default; we allow
HEAD_LIMIT_BYTES in all and answer a larger head 431, in the OpenAI error shape, then close.

Counting: the check runs after the parser has taken a chunk. A chunk that ends inside a head
which began in an earlier chunk is all head bytes; a chunk in which a head begins is not counted,
since the parser does not say where in it the head began (after a body, on a pipelined connection,
most of it may be body). So nothing but head bytes is ever counted, and the memory held is at most
the limit plus two reads.
"""
from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEAD_LIMIT_BYTES = 64 * 1024

_BODY = json.dumps({"error": {"message": f"the request line and headers exceed {HEAD_LIMIT_BYTES} bytes",
                              "type": "invalid_request_error", "param": None,
                              "code": "request_headers_too_large"}}).encode()
_RESPONSE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
             b"content-length: " + str(len(_BODY)).encode() + b"\r\nconnection: close\r\n\r\n" + _BODY)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    head_bytes = 0  # counted bytes of the head being read
    in_head = False  # between a message's first byte and its end of headers
    head_began = False  # a head began in the chunk being fed

    def data_received(self, data: bytes) -> None:
        self.head_began = False
        super().data_received(data)
        if not self.in_head or self.head_began or self.transport.is_closing():
            return
        self.head_bytes += len(data)
        if self.head_bytes > HEAD_LIMIT_BYTES:
            self.logger.warning("a request's head exceeded %d bytes: answered 431 and closed", HEAD_LIMIT_BYTES)
            self.transport.write(_RESPONSE)
            self.transport.close()

    def on_message_begin(self) -> None:
        self.in_head, self.head_began, self.head_bytes = True, True, 0
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value.rstrip(b" \t"))

    def on_headers_complete(self) -> None:
        self.in_head = False
        super().on_headers_complete()
