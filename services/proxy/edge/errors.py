"""JSON errors for every 4xx/5xx: `{"error": "<message>", "detail": ...}` (shared.contracts.http.ErrorBody).

FastAPI answers validation errors with `{"detail": [...]}` and Starlette answers 404/405 with a plain
`{"detail": "Not Found"}`; clients of this API read one shape, so every handler below produces it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.storage.disk import DiskError, storage_fault
from shared.ui.validation import validation_summary

# The session disk's faults, on every route that reads or writes it (README "Reliability"): the
# body's `detail.cause` is `disk_full`, `disk_read_only` or `disk_io_error`.
DISK_ERRORS: dict[int | str, dict[str, Any]] = {
    503: {"description": "the session disk is failing (EIO) or read-only; retry later"},
    507: {"description": "the session disk is full (ENOSPC, EDQUOT), or the session's workspace quota is"},
}


class ApiError(Exception):
    """Raised by routes and helpers; becomes `{"error": message}` with `status`."""

    def __init__(self, status: int, message: str, detail: Any | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail
        self.headers = headers


def error_response(status: int, message: str, detail: Any | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.detail, exc.headers)

    @app.exception_handler(DiskError)
    async def _disk(_: Request, exc: DiskError) -> JSONResponse:
        cause = getattr(exc, "cause", None)
        return error_response(exc.status, str(exc), {"cause": cause} if cause else None)

    @app.exception_handler(OSError)
    async def _os(request: Request, exc: OSError) -> JSONResponse:
        # A full, failing or read-only session disk is an answer (507/503 naming the cause), not a
        # bug; any other OS error stays a 500.
        fault = storage_fault(exc)
        if fault is None:
            raise exc
        return await _disk(request, fault)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, detail = validation_summary(list(exc.errors()))
        return error_response(422, message, detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        detail = None if isinstance(exc.detail, str) else exc.detail
        return error_response(exc.status_code, message, detail, getattr(exc, "headers", None))
