"""Wait, bounded, until the digest group has handled everything published before a wake.

Why: on wake the runtime holds the woken user prompt until our `Barrier` arrives. The digest builder
answers the same `SessionLive` (and late dormant-time artifact changes) with injections in the inbox.
If the barrier follows the digest's work, those injections sit in the inbox before the barrier, so the
runtime places them before the user message. If the digest is down we stop waiting after `timeout_s`:
the runtime still gets the dormant manifest from disk.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from shared import topology
from shared.redis_wire import parse_id

DIGEST_GROUP = topology.group_of("digest")


async def last_id(client: aioredis.Redis, stream: str) -> tuple[int, int] | None:
    try:
        info: dict[Any, Any] = await client.xinfo_stream(stream)
    except ResponseError:
        return None  # no such stream: nothing to wait for
    return parse_id(info.get("last-generated-id"))


async def group_done(client: aioredis.Redis, stream: str, group: str, upto: tuple[int, int]) -> bool:
    """True when `group` has read and acked every entry up to `upto` (or the group does not exist)."""
    try:
        groups: list[dict[Any, Any]] = await client.xinfo_groups(stream)
    except ResponseError:
        return True
    mine = [g for g in groups if (g.get("name") or b"") in (group, group.encode())]
    if not mine:
        return True
    if parse_id(mine[0].get("last-delivered-id")) < upto:
        return False
    if not int(mine[0].get("pending") or 0):
        return True
    summary: dict[Any, Any] = await client.xpending(stream, group)
    return parse_id(summary.get("min")) > upto


async def wait_for_group(
    client: aioredis.Redis, streams: list[str], group: str = DIGEST_GROUP, timeout_s: float = 2.0,
    poll_s: float = 0.01,
) -> bool:
    """Snapshot each stream's last id now, then poll until `group` is past all of them. False on timeout."""
    targets = [(s, upto) for s in streams if (upto := await last_id(client, s)) is not None]
    deadline = time.monotonic() + timeout_s
    while targets:
        targets = [(s, upto) for s, upto in targets if not await group_done(client, s, group, upto)]
        if not targets:
            break
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(poll_s)
    return True
