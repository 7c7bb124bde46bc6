"""Request body caps. A body over the limit gets 413 with the limit in the message, before a route
reads it (Content-Length) or while it streams in (chunked bodies are counted)."""

from __future__ import annotations

import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.proxy.edge.errors import error_response


class BodyTooLarge(HTTPException):
    """An HTTPException so FastAPI's body parsing re-raises it as is (it wraps other errors in a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than the limit of {limit} bytes")


class BodyLimit:
    """Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer the SSE stream)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope["gamma.arrived"] = time.time()  # bench/e2e.py --trace: request arrival -> handler
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0:
                    await error_response(400, "invalid Content-Length header")(scope, receive, send)
                    return
                if declared > self.max_bytes:
                    await error_response(413, f"request body is {declared} bytes; the limit is {self.max_bytes} bytes")(
                        scope, receive, send
                    )
                    return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted, send)
