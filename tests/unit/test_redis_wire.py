"""shared/redis/redis_wire.py: the reply decoding, the stream-id order, and the holder-only Lua scripts
(against a real Redis)."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from shared.redis.redis_wire import (
    COMPARE_AND_DELETE,
    COMPARE_AND_RENEW,
    id_ms,
    lenient_text,
    optional_text,
    parse_id,
    text,
)


def test_text_decodes_bytes_and_passes_str() -> None:
    assert text(b"gamma:{s}:inbox") == "gamma:{s}:inbox"
    assert text("1-0") == "1-0"
    assert text(7) == "7"
    with pytest.raises(ValueError):  # UnicodeDecodeError: invalid bytes are not silently changed
        text(b"\xff\xfe")
    assert lenient_text(b"ok\xff") == "ok\ufffd"
    assert optional_text(None) is None
    assert optional_text(b"3") == "3"


@pytest.mark.parametrize(("entry_id", "expected"), [
    ("1733150000000-3", (1733150000000, 3)), (b"1733150000000-12", (1733150000000, 12)),
    ("1733150000000", (1733150000000, 0)), ("0", (0, 0)), ("", (0, 0)), (None, (0, 0)),
])
def test_parse_id(entry_id: str | bytes | None, expected: tuple[int, int]) -> None:
    assert parse_id(entry_id) == expected


def test_parse_id_orders_as_redis_does() -> None:
    ids = ["1000-10", "999-99", "1000-9", "1000-0", "1001-0"]
    assert sorted(ids, key=parse_id) == ["999-99", "1000-0", "1000-9", "1000-10", "1001-0"]


@pytest.mark.parametrize(("entry_id", "expected"), [
    ("1733150000999-0", 1733150000999), (b"1733150000999-4", 1733150000999), ("1733150000999", None),
    ("x-0", None), ("", None), (None, None),
])
def test_id_ms(entry_id: str | bytes | None, expected: int | None) -> None:
    assert id_ms(entry_id) == expected


async def test_only_the_holder_renews_or_deletes(redis_client: aioredis.Redis) -> None:
    key = f"gamma:test:{uuid.uuid4().hex[:8]}:lock"
    await redis_client.set(key, "worker-a:1", px=1_000)
    assert await redis_client.eval(COMPARE_AND_RENEW, 1, key, "worker-b:2", "60000") == 0
    assert 0 < await redis_client.pttl(key) <= 1_000
    assert await redis_client.eval(COMPARE_AND_RENEW, 1, key, "worker-a:1", "60000") == 1
    assert await redis_client.pttl(key) > 1_000
    assert await redis_client.eval(COMPARE_AND_DELETE, 1, key, "worker-b:2") == 0
    assert await redis_client.get(key) == b"worker-a:1"
    assert await redis_client.eval(COMPARE_AND_DELETE, 1, key, "worker-a:1") == 1
    assert await redis_client.exists(key) == 0
    # A key that is gone: neither renews nor deletes anything.
    assert await redis_client.eval(COMPARE_AND_RENEW, 1, key, "worker-a:1", "60000") == 0
    assert await redis_client.eval(COMPARE_AND_DELETE, 1, key, "worker-a:1") == 0
