"""Give the heap back after large responses.

A 20 MB /transcript (before paging) or /preview left the proxy at 175-213 MiB from 75 MiB, for good:
the parsed entries and the serialized body are freed, but glibc keeps the freed pages in its arenas
(fragmented by what stayed alive), and Python asks it for no trim. After a response (or request
body) of TRIM_AFTER_BYTES or more, `malloc_trim(0)` returns the free pages to the system, in a
thread, after the response has gone out. Pure ASGI: the SSE stream is not buffered.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import re
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

TRIM_AFTER_BYTES = 1024 * 1024
MIN_INTERVAL_S = 1.0  # a burst of large responses trims once a second, not once each


def _load_trim() -> Callable[[], None] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim = getattr(libc, "malloc_trim", None)
    except OSError:
        return None
    if trim is None:  # not glibc (musl, macOS): nothing to trim
        return None
    return lambda: trim(0) and None


class TrimAfterLargeResponses:
    """`passthrough`: paths whose responses are many small writes (the SSE events stream): their
    `send` and `receive` go through unwrapped, no frame of ours per event."""

    def __init__(self, app: ASGIApp, threshold: int = TRIM_AFTER_BYTES, passthrough: str | None = None) -> None:
        self.app = app
        self.threshold = threshold
        self.passthrough = re.compile(passthrough) if passthrough else None
        self._trim = _load_trim()
        self._last = 0.0
        self._task: asyncio.Task[None] | None = None
        self._again = False  # a large response ended since the last trim began

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or self._trim is None
                or (self.passthrough is not None and self.passthrough.match(scope["path"]))):
            await self.app(scope, receive, send)
            return
        moved = 0

        async def counted_send(message: Message) -> None:
            nonlocal moved
            if message["type"] == "http.response.body":
                moved += len(message.get("body", b""))
            await send(message)

        async def counted_receive() -> Message:
            nonlocal moved
            message = await receive()
            if message["type"] == "http.request":
                moved += len(message.get("body", b""))
            return message

        try:
            await self.app(scope, counted_receive, counted_send)
        finally:
            if moved >= self.threshold:
                self._again = True
                if self._task is None:  # detached: the connection's next request does not wait for it
                    self._task = asyncio.ensure_future(self._trim_soon())

    async def _trim_soon(self) -> None:
        """At most once per MIN_INTERVAL_S; until no large response ended since the last trim began,
        then once more: what a response still held when it ended (the transport's write buffer until
        the client has read it, objects freed late) is only free a moment later, and without a next
        large response nothing would trim it (the clean-clone runs kept ~60 MiB of three previews)."""
        try:
            settling = 1
            while self._trim is not None and (self._again or settling):
                if not self._again:
                    settling -= 1
                await asyncio.sleep(max(0.0, self._last + MIN_INTERVAL_S - time.monotonic()))
                self._again, self._last = False, time.monotonic()
                await asyncio.to_thread(self._trim)
        finally:
            self._task = None
