"""shared/redis/session_locks.py: a session's lock serialises its holders and is forgotten once
none holds or waits for it (the worker serves sessions that come and go)."""

from __future__ import annotations

import asyncio

from shared.redis.session_locks import SessionLocks


def test_serialises_and_forgets() -> None:
    async def main() -> list[str]:
        locks = SessionLocks()
        order: list[str] = []
        gate = asyncio.Event()

        async def first() -> None:
            async with locks.hold("s1"):
                order.append("first in")
                await gate.wait()
                order.append("first out")

        async def second() -> None:
            async with locks.hold("s1"):
                order.append("second in")

        tasks = [asyncio.ensure_future(first()), asyncio.ensure_future(second())]
        await asyncio.sleep(0)
        async with locks.hold("s2"):  # another session's lock does not wait for s1's
            order.append("other")
        assert len(locks) == 1
        gate.set()
        await asyncio.gather(*tasks)
        assert len(locks) == 0
        return order

    assert asyncio.run(main()) == ["first in", "other", "first out", "second in"]


def test_forgotten_after_an_error() -> None:
    async def main() -> int:
        locks = SessionLocks()
        try:
            async with locks.hold("s1"):
                raise ValueError("boom")
        except ValueError:
            pass
        return len(locks)

    assert asyncio.run(main()) == 0
