"""Wait, bounded, until the digest group has handled everything of a session published before its wake.

Why: on wake the runtime holds the woken user prompt until our `Barrier` arrives. The digest builder
answers the same `SessionLive` (and late dormant-time artifact changes) with injections in the inbox.
If the barrier follows the digest's work, those injections sit in the inbox before the barrier, so the
runtime places them before the user message. If the digest is down we stop waiting after `timeout_s`:
the runtime still gets the dormant manifest from disk.

Only the session's own entries count (`session` given): under load the digest always has some entry
in flight, so waiting for the whole group held every woken prompt for up to the timeout (bench-e2e,
200 sessions). The entries up to the snapshot that the group has not acked (pending or not yet read)
are looked at, at most SCAN_MAX of them; beyond that the wait falls back to the whole group.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from shared.redis import topology
from shared.redis.redis_wire import parse_id

DIGEST_GROUP = topology.group_of("digest")
SCAN_MAX = 500  # unacked entries looked at one by one for a session's wait; more: wait for the group


async def last_id(client: aioredis.Redis, stream: str) -> tuple[int, int] | None:
    try:
        info: dict[Any, Any] = await client.xinfo_stream(stream)
    except ResponseError:
        return None  # no such stream: nothing to wait for
    return parse_id(info.get("last-generated-id"))


async def _group_info(client: aioredis.Redis, stream: str, group: str) -> dict[Any, Any] | None:
    """XINFO GROUPS' entry for `group` (None: no such stream or group, nothing to wait for)."""
    try:
        groups: list[dict[Any, Any]] = await client.xinfo_groups(stream)
    except ResponseError:
        return None
    return next((g for g in groups if (g.get("name") or b"") in (group, group.encode())), None)


async def group_done(client: aioredis.Redis, stream: str, group: str, upto: tuple[int, int]) -> bool:
    """True when `group` has read and acked every entry up to `upto` (or the group does not exist)."""
    info = await _group_info(client, stream, group)
    return True if info is None else await _group_past(client, stream, group, info, upto)


async def _group_past(client: aioredis.Redis, stream: str, group: str, info: dict[Any, Any],
                      upto: tuple[int, int]) -> bool:
    if parse_id(info.get("last-delivered-id")) < upto:
        return False
    if not int(info.get("pending") or 0):
        return True
    summary: dict[Any, Any] = await client.xpending(stream, group)
    return parse_id(summary.get("min")) > upto


async def session_done(client: aioredis.Redis, stream: str, group: str, upto: tuple[int, int], session: str,
                       others: set[Any] | None = None) -> bool:
    """True when `group` has acked every entry of `session` up to `upto` (the group's other entries
    may still be in flight). `others`: ids of pending entries already read and found to be another
    session's, kept by the caller across polls (an entry's content never changes, so it is not read
    again: under load most pending entries are other sessions', and every poll re-read each of them)."""
    info = await _group_info(client, stream, group)
    if info is None:
        return True
    delivered = parse_id(info.get("last-delivered-id"))
    waiting: list[Any] = []
    if int(info.get("pending") or 0):
        pending = await client.xpending_range(stream, group, min="-", max=_id(upto), count=SCAN_MAX + 1)
        waiting += [row["message_id"] for row in pending]
    if delivered < upto:
        unread = await client.xrange(stream, min="(" + _id(delivered), max=_id(upto), count=SCAN_MAX + 1) or []
        if any(_names(fields, session) for _, fields in unread):
            return False
        waiting_unread = len(unread)
    else:
        waiting_unread = 0
    if len(waiting) + waiting_unread > SCAN_MAX:
        return await _group_past(client, stream, group, info, upto)  # too many to look at one by one
    if others is not None:
        waiting = [entry_id for entry_id in waiting if entry_id not in others]
    if not waiting:
        return True
    pipe = client.pipeline(transaction=False)
    for entry_id in waiting:
        pipe.xrange(stream, min=entry_id, max=entry_id)
    ours = False
    for entry_id, rows in zip(waiting, await pipe.execute(), strict=True):
        if any(_names(fields, session) for _, fields in rows or []):
            ours = True
        elif others is not None and rows:  # read and not ours (an entry trimmed away is not remembered)
            others.add(entry_id)
    return not ours


def _names(fields: dict[Any, Any] | None, session: str) -> bool:
    """The entry belongs to `session` (its id inside the encoded message: ids are unique tokens)."""
    if not fields:
        return False  # trimmed away meanwhile
    needle = session.encode()
    return any(needle in (v if isinstance(v, bytes) else str(v).encode()) for v in fields.values())


def _id(parsed: tuple[int, int]) -> str:
    return f"{parsed[0]}-{parsed[1]}"


async def wait_for_group(
    client: aioredis.Redis, streams: list[str], group: str = DIGEST_GROUP, timeout_s: float = 2.0,
    poll_s: float = 0.01, session: str | None = None, max_poll_s: float = 0.1,
) -> bool:
    """Snapshot each stream's last id now, then poll until `group` is past all of them (with `session`:
    past that session's entries among them). False on timeout."""
    targets = [(s, upto) for s in streams if (upto := await last_id(client, s)) is not None]
    deadline = time.monotonic() + timeout_s
    others: dict[str, set[Any]] = {s: set() for s in streams}  # per stream: pending entries found not ours

    async def done(stream: str, upto: tuple[int, int]) -> bool:
        if session is None:
            return await group_done(client, stream, group, upto)
        return await session_done(client, stream, group, upto, session, others[stream])

    while targets:
        targets = [(s, upto) for s, upto in targets if not await done(s, upto)]
        if not targets:
            break
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(poll_s)
        # Backing off: 200 wakes' waits side by side, each polling every 10 ms with four commands,
        # were enough Redis traffic to slow every other request of the stack (bench-e2e).
        poll_s = min(poll_s * 1.5, max_poll_s)
    return True
