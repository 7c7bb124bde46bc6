"""Redis out of reach during an HTTP request: a clear, bounded answer instead of a 500.

A command that got no reply within its budget (shared/redis/reconnect.py: a partition, a half-open
connection) is a 504, the gateway's own timeout; a Redis that refuses or drops connections is a 503.
Both carry `Retry-After`: nothing was acknowledged, so the client may send the request again (a
write that did reach Redis before the reply was lost is deduplicated the way every retry is: prompt
ids, idempotency keys, notification ids, content; README "Reliability").
"""

from __future__ import annotations

import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError, TimeoutError

from shared.contracts.http import ErrorBody

RETRY_AFTER_S = 1
log = structlog.get_logger()


def redis_failure(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, TimeoutError):
        return 504, "the shared state (Redis) did not answer in time; nothing was acknowledged, retry"
    return 503, "the shared state (Redis) is unreachable; nothing was acknowledged, retry"


def install_redis_error_handlers(app: FastAPI) -> None:
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        status, message = redis_failure(exc)
        log.warning("redis_unavailable", status=status, path=request.url.path, error=str(exc)[:200])
        return JSONResponse(ErrorBody(error=message).model_dump(mode="json", exclude_none=True), status_code=status,
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    app.add_exception_handler(TimeoutError, handle)
    app.add_exception_handler(ConnectionError, handle)
