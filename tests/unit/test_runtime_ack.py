"""Acks in process: an empty entry id is nothing to ack; a failed ack is retried in the background
(never raised into the run), until it lands."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from services.runtime.runs.ack import Acker


@pytest.mark.timeout(10)
async def test_a_failed_ack_is_retried_in_the_background() -> None:
    calls: list[tuple[str, str]] = []

    async def flaky(sid: str, entry_id: str) -> None:
        calls.append((sid, entry_id))
        if len(calls) < 3:
            raise RedisConnectionError("down")

    background: set[asyncio.Task[None]] = set()
    acker = Acker("s1", flaky, background)
    await acker.ack(None)
    await acker.ack("")
    assert calls == []
    await acker.ack("1-0")  # fails: does not raise
    assert calls == [("s1", "1-0")] and len(background) == 1
    await asyncio.wait_for(asyncio.gather(*background), 5)
    assert calls == [("s1", "1-0")] * 3 and not background
