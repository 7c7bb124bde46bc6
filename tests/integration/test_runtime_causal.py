"""The runtime's causal gate (services/runtime/inbox/causal.py) against a real Redis: which prompts it holds,
in what order it lets them go, and what it does when the wait runs out."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from pydantic import BaseModel

from services.runtime.inbox.causal import CausalGate
from shared.contracts.streams.causal import FlushRequest
from shared.contracts.streams.inbox import UserPrompt
from shared.streams import causal
from shared.streams.inbox import InboxEntry
from tests.support.ports import free_port

SID = "s_gate"


def entry(n: int, after: int | None) -> InboxEntry:
    return InboxEntry(SID, f"1-{n}", UserPrompt(session_id=SID, message=f"p{n}", after_seq=after))


def prompt(e: InboxEntry) -> UserPrompt:
    assert isinstance(e.message, UserPrompt)
    return e.message


REQUESTED = asyncio.Event()


def gate(client: aioredis.Redis, wait_ms: int = 5000) -> tuple[CausalGate, list[FlushRequest]]:
    sent: list[FlushRequest] = []

    async def publish(_stream: str, message: BaseModel) -> None:
        assert isinstance(message, FlushRequest)
        sent.append(message)
        REQUESTED.set()

    return CausalGate(SID, client, publish, wait_ms), sent


async def test_nothing_in_flight_nothing_held(redis_client: aioredis.Redis) -> None:
    g, sent = gate(redis_client)
    e = entry(1, None)
    assert await g.admit(e, prompt(e))
    assert sent == [] and g.held == []


async def test_a_stamped_prompt_waits_for_the_settled_marker_even_when_the_set_is_empty(
        redis_client: aioredis.Redis) -> None:
    """The set empties when the update is appended to the inbox, possibly after this prompt's entry:
    only the digest's `ChangesSettled`, behind that update, lets the prompt go."""
    g, sent = gate(redis_client)
    stamped = entry(1, 7)
    assert not await g.admit(stamped, prompt(stamped))
    assert [r.upto for r in sent] == [7]
    assert g.on_settled(7) == [stamped]
    assert await g.admit(stamped, prompt(stamped))  # handled again: goes on
    assert len(sent) == 1


async def test_held_until_settled_later_prompts_behind_it_in_order(redis_client: aioredis.Redis) -> None:
    g, sent = gate(redis_client)
    seq = await causal.register(redis_client, SID, "file:a.txt")
    first, second = entry(1, seq), entry(2, None)
    assert not await g.admit(first, prompt(first))
    assert not await g.admit(second, prompt(second))  # never overtakes the first
    assert [r.upto for r in sent] == [seq]
    await causal.settle(redis_client, SID, [(seq, "file:a.txt")])  # the digest delivered it
    assert g.on_settled(seq) == [first, second]
    assert g.timeout() is None


async def test_the_wait_runs_out_with_one_dirty_marker_per_ref_and_the_changes_forgotten(
        redis_client: aioredis.Redis) -> None:
    g, _ = gate(redis_client, wait_ms=50)
    a = await causal.register(redis_client, SID, "file:a.txt")
    b = await causal.register(redis_client, SID, "gamma:file:d1")
    await causal.register(redis_client, SID, "file:a.txt")
    later = await causal.register(redis_client, SID, "file:later.txt")  # acknowledged after the prompt
    held = entry(1, max(a, b) + 1)
    assert not await g.admit(held, prompt(held))
    timeout = g.timeout()
    assert timeout is not None
    await asyncio.sleep(timeout + 0.01)
    markers, released = await g.expire()
    assert released == [held]
    assert sorted(m.injection.content.split('"')[1] for m in markers) == ["file:a.txt", "gamma:file:d1"]
    prompt_id = prompt(held).prompt_id
    assert {m.source_id for m in markers} == {f"causal:{prompt_id}:file:a.txt", f"causal:{prompt_id}:gamma:file:d1"}
    assert await causal.in_flight(redis_client, SID) == [(later, "file:later.txt")]  # not the later write


async def test_before_steering_waits_for_the_digest_of_a_write_made_during_the_run(
        redis_client: aioredis.Redis) -> None:
    REQUESTED.clear()
    g, sent = gate(redis_client)
    seq = await causal.register(redis_client, SID, "file:during.txt")

    async def digest() -> None:
        await REQUESTED.wait()
        await causal.settle(redis_client, SID, [(seq, "file:during.txt")])
        g.on_settled(sent[0].upto)

    helper = asyncio.ensure_future(digest())
    assert await asyncio.wait_for(g.before_steering(), 5) == []
    await helper
    assert [r.upto for r in sent] == [seq]


async def test_an_expiry_that_cannot_reach_redis_keeps_the_prompts_held_for_the_next_try() -> None:
    """Redis restarting when a held prompt's wait runs out: the expiry fails and changes nothing (the
    dispatcher postpones it and tries again, services/runtime/inbox/dispatcher.py causal_expired), so no
    prompt leaves the gate unhandled."""
    dead = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    try:
        g, _ = gate(dead, wait_ms=10)
        first, second = entry(1, 5), entry(2, None)
        assert not await g.admit(first, prompt(first))
        assert not await g.admit(second, prompt(second))
        await asyncio.sleep(0.05)
        assert g.timeout() == 0.0
        try:
            await g.expire()
        except (aioredis.ConnectionError, OSError):
            pass
        else:
            raise AssertionError("the expiry reached a Redis that is not there")
        assert g.held == [first, second]
        g.postpone(30)
        assert g.timeout() is not None and g.timeout() > 1  # type: ignore[operator]
    finally:
        await dead.aclose()
