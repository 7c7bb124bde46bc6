"""End to end in one runtime worker (in process, real Redis, scripted model), whose every Redis
connection goes through a fault proxy: the inbox read that delivered a prompt loses its reply (the
proxy drops it, then resets every connection). The worker's reader hands the prompt out from its
consumer's pending list (shared/streams/stream_handed.py): the session answers it, once, and acks it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from shared.contracts.streams.inbox import UserPrompt
from shared.redis import keys
from shared.streams.inbox import GROUP, append
from tests.integration.runtime_inproc import inproc_worker
from tests.integration.runtime_support import done, script, transcript
from tests.support.faultproxy import proxy_for
from tests.support.pending_reads import blocked_reads, delivered_to
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(90)


async def events(client: aioredis.Redis, sid: str, type_: str) -> list[dict[str, Any]]:
    """The session's events of one type, read past the proxy."""
    out = [json.loads(fields[b"data"]) for _, fields in await client.xrange(keys.events(sid))]
    return [e["data"] for e in out if e["type"] == type_]


async def test_a_prompt_whose_read_reply_was_lost_is_answered_once(redis_url: str, redis_client: aioredis.Redis,
                                                                   data_dir: Path) -> None:
    proxy, url = proxy_for(redis_url, lifetime_s=85)
    sid = "lost-reply"
    try:
        async with inproc_worker(url, data_dir) as inp:
            session = await inp.live(sid)
            await eventually(lambda: blocked_reads(redis_client), timeout=15, what="the worker's inbox read blocked")
            assert proxy.mute_replies() >= 1
            prompt = UserPrompt(session_id=sid, message=script(done("answered once")))
            entry_id = await append(redis_client, prompt)

            async def delivered() -> bool:
                return entry_id in await delivered_to(redis_client, sid, inp.worker.worker_id)

            await eventually(delivered, timeout=15, what="the prompt delivered to the worker's consumer")
            proxy.reset()

            async def answered() -> bool:
                return any(e.get("message") == "answered once" for e in await events(redis_client, sid, "message_user"))

            await eventually(answered, timeout=30, what="the prompt's answer")

            async def acked() -> bool:
                return int((await redis_client.xpending(keys.inbox(sid), GROUP))["pending"]) == 0

            await eventually(acked, timeout=30, what="the prompt acked")
            users = [e for e in transcript(data_dir, sid) if e["type"] == "message" and e["message"]["role"] == "user"]
            assert [u.get("promptId") for u in users] == [prompt.prompt_id]
            async def ended() -> bool:  # the prompt is acked as its message is recorded, before the run ends
                return bool(await events(redis_client, sid, "agent_end"))

            await eventually(ended, timeout=30, what="the run's end")
            assert len(await events(redis_client, sid, "agent_end")) == 1
            assert session is inp.worker.sessions[sid]  # the same holder: no takeover did it
    finally:
        proxy.stop()
