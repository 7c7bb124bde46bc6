"""Contract of `gamma:deadletter`: every consumer -> operators. Field `data` = `DeadLetter` JSON."""

from __future__ import annotations

import redis.asyncio as aioredis

from shared.contracts.streams.deadletter import DeadLetter
from shared.redis import keys
from shared.streams.bus import dead_letter


async def read_letters(client: aioredis.Redis) -> list[DeadLetter]:
    return [DeadLetter.model_validate_json(f[b"data"]) for _, f in await client.xrange(keys.DEADLETTER)]


async def test_dead_letter_round_trips_with_binary_and_huge_fields(redis_client: aioredis.Redis) -> None:
    await dead_letter(redis_client, "gamma:lifecycle", "digest", "1-0", {b"data": b'{"a": 1}'}, "invalid entry: x", 1)
    await dead_letter(redis_client, "gamma:{s}:inbox", "runtime", "2-0", {b"__data__": b"\x89BIN\xff\x00",
                      "big": "x" * 50_000}, "e" * 5000, 6)
    first, second = await read_letters(redis_client)
    assert (first.stream, first.group, first.entry_id, first.error, first.deliveries) == (
        "gamma:lifecycle", "digest", "1-0", "invalid entry: x", 1)
    assert first.fields == {"data": '{"a": 1}'}
    assert second.fields["__data__"].startswith("\ufffdBIN")  # undecodable bytes replaced, not fatal
    assert len(second.fields["big"]) == 10_000  # bounded
    assert len(second.error) == 2000
    assert second.deliveries == 6 and second.ts >= first.ts


async def test_dead_letters_written_by_the_consumers_validate(redis_client: aioredis.Redis) -> None:
    """Both dead-letter writers (bus subscribers, inbox reader) go through one function; a record of
    the wrong shape would fail here."""
    for entry_id in ("3-0", "4-0"):
        await dead_letter(redis_client, "gamma:x", "g", entry_id, {}, "delivery cap reached", 6)
    raw = [f for _, f in await redis_client.xrange(keys.DEADLETTER)]
    assert all(set(f) == {b"data"} for f in raw)
    assert [d.entry_id for d in await read_letters(redis_client)] == ["3-0", "4-0"]


def test_a_malformed_dead_letter_is_rejected() -> None:
    try:
        DeadLetter.model_validate_json(b'{"stream": "s", "group": "g", "entry_id": "1-0"}')
    except ValueError as exc:
        assert "fields" in str(exc) and "error" in str(exc)
    else:
        raise AssertionError("accepted a dead letter without fields/error")
