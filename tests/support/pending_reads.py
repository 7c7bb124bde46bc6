"""What Redis knows of an inbox reader, for the lost-reply tests (a fault proxy drops a read's reply
once Redis has delivered its entries: tests/support/faultproxy.py `mute_replies`)."""

from __future__ import annotations

import redis.asyncio as aioredis

from shared.redis import keys
from shared.streams.inbox import GROUP


async def blocked_reads(client: aioredis.Redis, name: str | None = None) -> int:
    """Clients blocked in an XREADGROUP (a reader's read is in flight in Redis); with `name`, only
    connections of that client name."""
    return sum(1 for c in await client.client_list() if c.get("cmd") == "xreadgroup" and "b" in c.get("flags", "")
               and (name is None or c.get("name") == name))


async def delivered_to(client: aioredis.Redis, session: str, consumer: str) -> set[str]:
    """The ids of `session`'s inbox entries pending for `consumer` (delivered, not acked)."""
    detail = await client.xpending_range(keys.inbox(session), GROUP, "-", "+", 100, consumername=consumer)
    return {p["message_id"].decode() for p in detail}
