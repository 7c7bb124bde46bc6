"""Causal order of live writes before prompts (docs/architecture.md "Causal order").

A user's write and the prompt after it take different paths: the write's `ArtifactChange` goes
proxy -> `gamma:artifacts:changes` -> digest (debounced) -> inbox, the prompt proxy -> inbox. So that
the prompt cannot overtake the write:

1. the proxy numbers every artifact change it acknowledges (`register`: a global `INCR`) and adds it to
   the session's in-flight set `keys.changes_in_flight(sid)` (member `"{seq} {ref}"`, score `seq`)
   before it publishes the change and answers the write;
2. a prompt carries the newest number in flight when the proxy accepted it (`watermark`): `after_seq`;
3. the digest removes a change from the set once it has delivered it (its `artifact_update` is in
   the inbox, or in the dormant manifest) or dismissed it (nothing the agent has not seen);
4. the runtime holds a prompt while changes numbered up to its `after_seq` are in flight, asks the
   digest to flush them at once (`FlushRequest`), and goes on at its `ChangesSettled`, or past
   `GAMMA_CAUSAL_WAIT_MS` with a dirty marker for each ref still in flight (whose change it then
   forgets here, so the next prompt does not wait for it again; the real update follows later).

Writes acknowledged after the prompt have higher numbers and are not waited for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis

from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.inbox import Injection
from shared.redis import keys
from shared.redis.redis_wire import text
from shared.trust.trusted_blocks import artifact_update

# A set left behind (a proxy that died between registering and publishing) does not live forever.
IN_FLIGHT_TTL_S = 24 * 3600


def member(seq: int, ref: str) -> str:
    return f"{seq} {ref}"


def parse_member(value: bytes | str) -> tuple[int, str]:
    seq, _, ref = text(value).partition(" ")
    return int(seq), ref


async def register(client: aioredis.Redis, sid: str, ref: str) -> int:
    """Number a change the proxy is about to acknowledge and mark it in flight; returns its `seq`."""
    seq = int(await client.incr(keys.CHANGE_SEQ))
    async with client.pipeline(transaction=False) as pipe:
        pipe.zadd(keys.changes_in_flight(sid), {member(seq, ref): seq})
        pipe.expire(keys.changes_in_flight(sid), IN_FLIGHT_TTL_S)
        await pipe.execute()
    return seq


async def unregister(client: aioredis.Redis, sid: str, seq: int, ref: str) -> None:
    """The change was never published (its publish failed): nothing will settle it."""
    await client.zrem(keys.changes_in_flight(sid), member(seq, ref))


async def watermark(client: aioredis.Redis, sid: str) -> int | None:
    """The newest change of the session still in flight, or None (the common case: nothing to wait for)."""
    top: list[Any] = await client.zrevrange(keys.changes_in_flight(sid), 0, 0, withscores=True)
    return int(top[0][1]) if top else None


async def in_flight(client: aioredis.Redis, sid: str, upto: int | None = None) -> list[tuple[int, str]]:
    """(seq, ref) of the session's changes in flight, numbered up to `upto` (all when None), oldest first."""
    raw: list[Any] = await client.zrangebyscore(keys.changes_in_flight(sid), "-inf",
                                                "+inf" if upto is None else upto)
    return [parse_member(m) for m in raw]


async def settle(client: aioredis.Redis, sid: str, changes: Iterable[tuple[int, str]]) -> None:
    members = [member(seq, ref) for seq, ref in changes]
    if members:
        await client.zrem(keys.changes_in_flight(sid), *members)


def dirty_marker(sid: str, ref: str, waited_for: str) -> Injection:
    """The update a prompt goes on with when `ref`'s digest did not arrive in time (the digest is down
    or slow). Its own source id (`causal:{waited_for}:{ref}`), no revisions: the real digest is not
    covered by it and follows as its own `artifact_update` when the digest catches up."""
    body = ("It was changed before this point; the details of the change have not arrived yet (they follow in "
            "a later artifact_update). Read it if you need its current content now.")
    content = artifact_update(ref, None, None, body, state="in_flight")
    return Injection(session_id=sid, injection=RuntimeInjection(kind="artifact_update", content=content),
                     source="system", source_id=f"causal:{waited_for}:{ref}")
