"""JSON body limits at the edge: nesting depth and number length, for every JSON body of the proxy and
notifications (docs/architecture.md "Limits on hostile input").

Python's `json` recurses per nesting level (a 10,000-deep array raised RecursionError: 500), refuses ints
over 4,300 digits with a ValueError (500), and pydantic's parser stops at 200 levels: a deck nested 250
deep was stored, then every read of it failed, and the runtime could not parse its own inbox entry. The
check below runs before any parser, without recursion: strings are blanked with one regex, and the
depth is a running sum over the remaining brackets (C loops throughout, ~10 ms per MiB).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from itertools import accumulate

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.contracts.http import ErrorBody

# A JSON string (escapes included): its content can hold neither structure nor numbers.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_STEP = [0] * 256
for _open in b"[{":
    _STEP[_open] = 1
for _close in b"]}":
    _STEP[_close] = -1
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@lru_cache(maxsize=8)
def _digit_run(max_digits: int) -> re.Pattern[bytes]:
    return re.compile(rb"[0-9]{%d}" % (max_digits + 1))


def json_problem(raw: bytes, max_depth: int, max_number_digits: int) -> str | None:
    """Why `raw` exceeds the limits, or None. Says nothing about whether it is valid JSON otherwise."""
    bare = _STRING.sub(b'""', raw)
    if _digit_run(max_number_digits).search(bare):
        return f"a JSON number has more than {max_number_digits} digits (GAMMA_MAX_JSON_NUMBER_DIGITS)"
    brackets = bare.translate(None, _NOT_BRACKETS)
    if len(brackets) > max_depth and max(accumulate(map(_STEP.__getitem__, brackets))) > max_depth:
        return f"JSON nesting is deeper than {max_depth} levels (GAMMA_MAX_JSON_DEPTH)"
    return None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(ErrorBody(error=message).model_dump(mode="json", exclude_none=True), status_code=status)


class JsonBodyGuard:
    """Pure ASGI middleware: reads a request body (up to `max_bytes`), answers 422 when it breaks a
    limit, else hands the same bytes on. Every body is checked whatever its Content-Type (FastAPI parses
    a body without one as JSON, and notifications parse any); `exempt` paths carry opaque bytes
    (workspace files). Add it inside a byte cap (the proxy's BodyLimit): an HTTPException raised by
    the outer `receive` becomes its answer here."""

    def __init__(self, app: ASGIApp, *, max_depth: int, max_number_digits: int, max_bytes: int,
                 exempt: Iterable[str] = ()) -> None:
        self.app = app
        self.max_depth = max_depth
        self.max_number_digits = max_number_digits
        self.max_bytes = max_bytes
        self.exempt = [re.compile(p) for p in exempt]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] not in _BODY_METHODS
                or any(p.match(scope["path"]) for p in self.exempt)):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away before its body was in
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_bytes:
                    await _error(413, f"request body is larger than the limit of {self.max_bytes} bytes")(
                        scope, receive, send)
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        except HTTPException as exc:
            await _error(exc.status_code, str(exc.detail))(scope, receive, send)
            return
        body = b"".join(chunks)
        problem = json_problem(body, self.max_depth, self.max_number_digits) if body else None
        if problem is not None:
            await _error(422, problem)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # a disconnect, for whoever waits for one

    return replayed
