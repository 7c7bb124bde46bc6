"""A cap on the request head (request line + header fields: bytes and field count) for uvicorn's
httptools protocol (docs/architecture.md "Limits on hostile input").

llhttp has no header size limit and httptools gathers a header value in memory until its line ends: a
16 MiB header was served, and four unfinished 64 MiB header lines took the proxy from 84 to 399 MiB.
h11 has a cap (`h11_max_incomplete_event_size`) but parses in Python: slower for every request. This
keeps httptools and counts what arrives while a head is incomplete; past the cap the connection gets
a 431 and is closed, so one connection holds at most the cap plus one read (<= 256 KiB).

The count is per read: a read that finishes one pipelined request and starts the next one counts whole
towards the second (an over-count of less than one read, for pipelined clients only).
"""

from __future__ import annotations

import asyncio

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes = 64 * 1024
    max_headers = 100

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._in_head = True
        self._head_bytes = 0
        self._read_bytes = 0
        self._refusal: str | None = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        # Counted here, not per field (one Python call less per header): the byte cap already bounds
        # how many fields can pile up before the head ends.
        if len(self.headers) > self.max_headers:
            self._refusal = f"more than {self.max_headers} header fields (GAMMA_MAX_HEADERS)"
            raise ValueError(self._refusal)  # httptools stops parsing: feed_data raises below
        # A head that came whole in one read (up to 256 KiB) was never counted as unfinished: measure
        # it, only when this read could have held more than the cap.
        if self._head_bytes + self._read_bytes > self.max_head_bytes and self._head_size() > self.max_head_bytes:
            self._refusal = self._too_large()
            raise ValueError(self._refusal)
        self._in_head = False
        super().on_headers_complete()

    def _head_size(self) -> int:
        return len(self.url) + 16 + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _too_large(self) -> str:
        return f"request line and headers exceed {self.max_head_bytes} bytes (GAMMA_MAX_HEADER_BYTES)"

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        self._read_bytes = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._refusal is not None:
                self._refuse(self._refusal)
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse(self._too_large())

    def _refuse(self, message: str) -> None:
        self.logger.warning("request head refused: %s", message)
        body = message.encode()
        head = [STATUS_LINE[431]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: text/plain; charset=utf-8\r\n",
                 b"content-length: " + str(len(body)).encode() + b"\r\n", b"connection: close\r\n", b"\r\n"]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
        self._in_head = False  # reads already queued before the close count no further


def bounded_http_protocol(max_head_bytes: int, max_headers: int) -> type[asyncio.Protocol]:
    """uvicorn's `http=` takes a protocol class: one with these limits."""
    return type("BoundedHttpTools", (BoundedHttpToolsProtocol,),
                {"max_head_bytes": max_head_bytes, "max_headers": max_headers})
