"""The turn-start gate's contract (services/runtime/runs/turn_starts.py): FIFO order, the bound, the wait's
end by release, by `max_wait_s`, by `stop`, and by cancellation, never leaving a slot behind."""

from __future__ import annotations

import asyncio

from services.runtime.runs.turn_starts import StartGate, StartPass

LONG = 60.0  # a wait no test reaches (its end comes from a release, a stop or a cancel)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_passes_at_once_within_the_limit_and_holds_the_rest_in_order() -> None:
    gate = StartGate(2, LONG)
    first, second = await gate.enter(), await gate.enter()
    assert first.held and second.held and gate.active == 2
    order: list[int] = []
    passes: dict[int, StartPass] = {}

    async def turn(i: int) -> None:
        passes[i] = await gate.enter()
        order.append(i)

    waiting = [asyncio.ensure_future(turn(i)) for i in range(4)]
    await settle()
    assert order == [] and gate.waiting == 4 and gate.active == 2
    first.release()
    await settle()
    assert order == [0] and gate.active == 2  # one out, one in: never above the limit
    second.release()
    second.release()  # a second release does nothing
    await settle()
    assert order == [0, 1] and gate.active == 2
    passes[0].release()
    passes[1].release()
    await settle()
    assert order == [0, 1, 2, 3] and gate.active == 2 and gate.waiting == 0
    passes[2].release()
    passes[3].release()
    assert gate.active == 0
    await asyncio.gather(*waiting)


async def test_a_newcomer_queues_behind_waiters() -> None:
    gate = StartGate(1, LONG)
    held = await gate.enter()
    early = asyncio.ensure_future(gate.enter())
    await settle()
    held.release()  # the slot goes to the waiter, not to whoever asks next
    late = asyncio.ensure_future(gate.enter())
    await settle()
    assert early.done() and not late.done()
    early.result().release()
    await settle()
    assert late.done()
    late.result().release()
    assert gate.active == 0


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    gate = StartGate(1, LONG)
    held = await gate.enter()
    gone = asyncio.ensure_future(gate.enter())
    after = asyncio.ensure_future(gate.enter())
    await settle()
    gone.cancel()
    await settle()
    assert gone.cancelled() and gate.waiting == 1
    held.release()
    await settle()
    assert after.done() and after.result().held and gate.active == 1
    after.result().release()
    assert gate.active == 0 and gate.waiting == 0


async def test_a_slot_handed_to_a_waiter_cancelled_meanwhile_goes_to_the_next() -> None:
    gate = StartGate(1, LONG)
    held = await gate.enter()
    gone = asyncio.ensure_future(gate.enter())
    after = asyncio.ensure_future(gate.enter())
    await settle()
    held.release()  # hands the slot to `gone`, whose task has not run yet...
    gone.cancel()  # ...and is cancelled before it does
    await settle()
    assert gone.cancelled()
    assert after.done() and after.result().held and gate.active == 1
    after.result().release()
    assert gate.active == 0


async def test_stop_ends_the_wait_with_a_pass_that_holds_nothing() -> None:
    gate = StartGate(1, LONG)
    held = await gate.enter()
    stop = asyncio.Event()
    aborted = asyncio.ensure_future(gate.enter(stop))
    await settle()
    stop.set()
    await settle()
    assert aborted.done() and not aborted.result().held and gate.waiting == 0
    aborted.result().release()  # nothing to give back
    assert gate.active == 1
    assert not (await gate.enter(stop)).held  # already stopped: no wait at all
    held.release()
    assert gate.active == 0


async def test_a_waiter_passes_after_the_longest_wait_whatever_the_count() -> None:
    gate = StartGate(1, 0.01)
    leaked = await gate.enter()  # never released: the gate must not starve what comes after
    late = await gate.enter()
    assert late.held and gate.timed_out == 1 and gate.waiting == 0 and gate.active == 2
    late.release()
    leaked.release()
    assert gate.active == 0


async def test_off_lets_everything_through() -> None:
    gate = StartGate(0, LONG)
    passes = [await gate.enter() for _ in range(100)]
    assert not any(p.held for p in passes) and gate.active == 0
