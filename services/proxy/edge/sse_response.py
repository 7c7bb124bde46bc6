"""The events stream's response: its body frames go to the server's own `send`.

Every layer of the ASGI stack wraps `send` (Starlette's ServerErrorMiddleware and the two exception
handling layers, our middlewares, FastAPI's request span when tracing): a coroutine frame each per
message, for nothing on an event stream's body, where none of them has anything to do (they look at
the response start, or at the last body message). With 200 SSE clients that was 4 wrapped calls per
event per client. So the proxy app keeps the server's `send` in the request scope (`ProxyApp`), and
`EventStreamResponse` writes the body frames there. The response start and the final empty body
still go through the stack: every layer sees the response begin (status, headers, "started") and
end (the request span ends on it), as for any other response. The disconnect handling is
StreamingResponse's own (a listener on `receive`, the stream cancelled when the client goes).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

SERVER_SEND = "gamma.server_send"


class ProxyApp(FastAPI):
    """FastAPI, with the server's `send` of each HTTP request in its scope (`SERVER_SEND`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[SERVER_SEND] = send
        await super().__call__(scope, receive, send)


class EventStreamResponse(StreamingResponse):
    """A StreamingResponse whose body frames skip the stack's wrapped sends (module docstring).
    Outside `ProxyApp` (a test's bare app) it is a plain StreamingResponse."""

    _direct: Send | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._direct = scope.get(SERVER_SEND)
        await super().__call__(scope, receive, send)

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        write = self._direct or send
        async for chunk in self.body_iterator:
            await write({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
