"""Helpers for the per-stream contract tests: run a real consumer (shared.streams.bus.subscribe, the services'
own entry point) against a real Redis, publish with the producer's real code, and compare."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from faststream.redis import RedisBroker
from pydantic import BaseModel, TypeAdapter
from structlog.testing import capture_logs

from shared.contracts.streams.deadletter import DeadLetter
from shared.redis import keys
from shared.streams.bus import ensure_group, make_broker, publish, subscribe
from tests.support.polling import eventually

Publish = Callable[[RedisBroker, BaseModel], Awaitable[Any]]


@dataclass
class Consumer:
    """What a subscribed consumer received, in order, per group."""

    received: dict[str, list[Any]] = field(default_factory=dict)

    def all(self, group: str) -> list[Any]:
        return self.received.setdefault(group, [])


@asynccontextmanager
async def producer_broker(redis_url: str) -> AsyncIterator[RedisBroker]:
    """A producer-side broker, connected only (as the proxy and the runtime publish)."""
    broker = make_broker(redis_url)
    await broker.connect()
    try:
        yield broker
    finally:
        await broker.stop()


@asynccontextmanager
async def consumer(
    redis_url: str,
    client: aioredis.Redis,
    stream: str,
    groups: list[str],
    model: type[BaseModel] | TypeAdapter[Any],
    handlers: dict[str, Callable[[Any], Awaitable[None]]] | None = None,
) -> AsyncIterator[Consumer]:
    """One broker subscribed with `shared.streams.bus.subscribe` for every group; records what each handler got.

    `handlers` replaces the recording handler of a group by a service's real handler (which is
    wrapped so the value is still recorded after the real handler returned)."""
    broker = make_broker(redis_url)
    got = Consumer()
    for group in groups:
        real = (handlers or {}).get(group)

        def make(group: str = group, real: Callable[[Any], Awaitable[None]] | None = real) -> Any:
            async def handle(value: Any) -> None:
                if real is not None:
                    await real(value)
                got.all(group).append(value)

            return handle

        subscribe(broker, client, stream=stream, group=group, consumer=f"{group}-contract", model=model,
                  handler=make(), claim_idle_ms=60_000)
        await ensure_group(client, stream, group)
    await broker.start()
    try:
        yield got
    finally:
        await broker.stop()


async def assert_round_trip(
    redis_url: str,
    client: aioredis.Redis,
    *,
    stream: str,
    groups: list[str],
    model: type[BaseModel] | TypeAdapter[Any],
    messages: list[BaseModel],
    produce: Publish | None = None,
    handlers: dict[str, Callable[[Any], Awaitable[None]]] | None = None,
) -> None:
    """Every message, published by the producer's code, reaches every group equal to what was sent."""
    send: Publish = produce or (lambda broker, msg: publish(broker, stream, msg))
    async with consumer(redis_url, client, stream, groups, model, handlers) as got, producer_broker(redis_url) as pub:
        for msg in messages:
            await send(pub, msg)
        for group in groups:
            await eventually(_has(got.all(group), len(messages)), what=f"{len(messages)} messages in group {group}")
            assert got.all(group) == messages, f"group {group} received something else than was sent"
            for value, sent in zip(got.all(group), messages, strict=True):
                assert type(value) is type(sent)
                assert value.model_dump(mode="json") == sent.model_dump(mode="json")
        for group in groups:
            await eventually(_pel_empty(client, stream, group), what=f"acks in group {group}")
    assert await client.xlen(keys.DEADLETTER) == 0


async def assert_invalid_dead_lettered(
    redis_url: str,
    client: aioredis.Redis,
    *,
    stream: str,
    group: str,
    model: type[BaseModel] | TypeAdapter[Any],
    bad_bodies: list[dict[str, Any]],
    valid: BaseModel,
    handlers: dict[str, Callable[[Any], Awaitable[None]]] | None = None,
) -> list[DeadLetter]:
    """Bad entries (FastStream envelopes with invalid bodies, and a plain XADD of garbage) are
    dead-lettered at once with an error log line; the consumer then handles the valid entry."""
    async with consumer(redis_url, client, stream, [group], model, handlers) as got, producer_broker(redis_url) as pub:
        with capture_logs() as logs:
            bad_ids = []
            for body in bad_bodies:
                entry_id = await pub.publish(body, stream=stream)
                bad_ids.append(entry_id.decode())
            garbage = await client.xadd(stream, {"data": b"\xff\xfe not json"})
            bad_ids.append(garbage.decode())
            await publish(pub, stream, valid)
            await eventually(_has(got.all(group), 1), what="the valid entry after the bad ones")
            letters: list[DeadLetter] = await eventually(
                _dead_letters(client, len(bad_ids)), what=f"{len(bad_ids)} dead letters"
            )
            await eventually(_pel_empty(client, stream, group), what="an empty PEL")
    assert got.all(group) == [valid]
    assert [d.entry_id for d in letters] == bad_ids
    for letter in letters:
        assert (letter.stream, letter.group, letter.deliveries) == (stream, group, 1)
        assert letter.error.startswith("invalid entry:"), letter.error
    lines = [e for e in logs if e["event"] == "dead_letter"]
    assert [e["entry_id"] for e in lines] == bad_ids
    for line in lines:
        assert line["log_level"] == "error"
        assert line["stream"] == stream and line["group"] == group
        assert "invalid entry" in line["error"]
    return letters


def _has(items: list[Any], n: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return len(items) >= n

    return probe


def _pel_empty(client: aioredis.Redis, stream: str, group: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return int((await client.xpending(stream, group))["pending"]) == 0

    return probe


def _dead_letters(client: aioredis.Redis, n: int) -> Callable[[], Awaitable[list[DeadLetter]]]:
    async def probe() -> list[DeadLetter]:
        entries = await client.xrange(keys.DEADLETTER)
        letters = [DeadLetter.model_validate_json(f[b"data"]) for _, f in entries]
        return letters if len(letters) >= n else []

    return probe

pel_empty = _pel_empty  # public name for the contract tests
