"""Live writes: append to the session inbox, then wait for the runtime's reply (read-your-writes).

docs/integration.md "Forwarded live writes": the runtime RPUSHes an InboxReply on
`gamma:{sid}:reply:{request_id}` once the write is applied; the proxy BLPOPs it up to
GAMMA_REPLY_TIMEOUT_S and answers 504 after that. The BLPOP goes out on the blocking-command client:
under the ordinary client's 5 s read timeout a longer wait raised and was retried (500 after ~37 s).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import ValidationError

from services.proxy.edge.errors import ApiError
from services.proxy.edge.metrics import ProxyMetrics
from shared.contracts.streams.inbox import (
    Abort,
    Compact,
    DocumentDelete,
    DocumentEdit,
    FileDelete,
    FileWrite,
    InboxReply,
    ModelChange,
    Rewind,
    Stop,
    UiUpdate,
    UserPrompt,
)
from shared.redis import keys
from shared.streams import inbox

log = structlog.get_logger()
FORWARD_GRACE_S = 2.0  # beyond the reply timeout: the append and the reply's own round trips

Forwardable = (UiUpdate | FileWrite | DocumentEdit | Stop | Compact | FileDelete | DocumentDelete | Abort | UserPrompt
               | Rewind | ModelChange)


async def forward(redis: aioredis.Redis, blocking: aioredis.Redis, message: Forwardable, timeout_s: float,
                  metrics: ProxyMetrics | None = None) -> InboxReply:
    """The reply, or ApiError: 504 on timeout, the runtime's own 4xx (with its message) on refusal.
    `blocking` is a client whose read timeout outlasts `timeout_s` (shared.redis.reconnect.connect_blocking)."""
    started = time.monotonic()
    assert message.request_id is not None  # a UserPrompt is forwarded only with one (expected_run_id)
    try:
        # The whole exchange is bounded, not only the BLPOP's server-side wait: on a stalled link
        # (README "Reliability") the append and the reply's read would each wait out their own timeouts.
        async with asyncio.timeout(timeout_s + FORWARD_GRACE_S):
            await inbox.append(redis, message)
            got: Any = await blocking.blpop([keys.reply(message.session_id, message.request_id)], timeout=timeout_s)
    except TimeoutError as exc:
        if metrics is not None:
            metrics.forwards.labels(message.type, "timeout").inc()
        raise ApiError(504, f"no answer from the session runtime or Redis within {timeout_s + FORWARD_GRACE_S:g} s") from exc
    if metrics is not None:
        outcome = "timeout" if got is None else "answered"
        metrics.forwards.labels(message.type, outcome).inc()
        if got is not None:
            metrics.forward_seconds.labels(message.type).observe(time.monotonic() - started)
    if got is None:
        log.warning("forward_timeout", session_id=message.session_id, type=message.type,
                    request_id=message.request_id, timeout_s=timeout_s)
        raise ApiError(504, f"the session runtime did not answer within {timeout_s:g} s")
    try:
        reply = InboxReply.model_validate_json(got[1])
    except ValidationError as exc:
        raise ApiError(502, f"the session runtime sent an invalid reply: {exc.errors()[0]['msg']}") from exc
    if reply.status >= 400:
        message_text = reply.body.get("error") if isinstance(reply.body.get("error"), str) else "the runtime refused the request"
        raise ApiError(reply.status, str(message_text), reply.body.get("detail"))
    return reply
