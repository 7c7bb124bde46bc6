"""Live writes: append to the session inbox, then wait for the runtime's reply (read-your-writes).

docs/integration.md "Forwarded live writes": the runtime RPUSHes an InboxReply on
`gamma:{sid}:reply:{request_id}` once the write is applied; the proxy BLPOPs it up to
GAMMA_REPLY_TIMEOUT_S and answers 504 after that.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError

from shared import inbox, keys
from shared.contracts.inbox import Compact, DocumentEdit, FileWrite, InboxReply, Stop, UiUpdate

from .errors import ApiError

Forwardable = UiUpdate | FileWrite | DocumentEdit | Stop | Compact


async def forward(redis: aioredis.Redis, message: Forwardable, timeout_s: float) -> InboxReply:
    """The reply, or ApiError: 504 on timeout, the runtime's own 4xx (with its message) on refusal."""
    await inbox.append(redis, message)
    got: Any = await redis.blpop([keys.reply(message.session_id, message.request_id)], timeout=timeout_s)
    if got is None:
        raise ApiError(504, f"the session runtime did not answer within {timeout_s:g} s")
    try:
        reply = InboxReply.model_validate_json(got[1])
    except ValidationError as exc:
        raise ApiError(502, f"the session runtime sent an invalid reply: {exc.errors()[0]['msg']}") from exc
    if reply.status >= 400:
        message_text = reply.body.get("error") if isinstance(reply.body.get("error"), str) else "the runtime refused the request"
        raise ApiError(reply.status, str(message_text), reply.body.get("detail"))
    return reply
