"""shared/serving/gcpolicy.py: gen 2 collected by the freezer's passes only, startup's frozen heap never."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import weakref
from collections.abc import Callable
from unittest import mock

import pytest

from shared.serving import gcpolicy
from shared.serving.gcpolicy import (
    MANAGED_GEN2,
    defer_while,
    deferred,
    full_pass,
    full_pass_due,
    heap_freezer,
    released,
    young_threshold,
)


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture(autouse=True)
def restored():
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()  # the rest of the test process keeps its usual GC
    gc.set_threshold(*threshold)


def old(obj: object) -> None:
    """Promotes what is alive into gen 2, as a session's state gets there while it lives."""
    gc.collect(1)
    assert any(o is obj for o in gc.get_objects(2))


async def freed(ref: weakref.ref[object], within_s: float = 1.0) -> bool:
    """True once `ref`'s object is gone (a pass in the freezer's task frees it), polled for `within_s`."""
    for _ in range(int(within_s / 0.01)):
        if ref() is None:
            return True
        await asyncio.sleep(0.01)
    return ref() is None


def test_a_cycle_in_gen_2_waits_for_the_full_pass() -> None:
    gc.set_threshold(700, 10, MANAGED_GEN2)
    node = Node()
    ref = weakref.ref(node)
    old(node)
    del node
    for _ in range(20):
        gc.collect(1)  # the young collections, as CPython runs them: gen 2 is not theirs
    assert ref() is not None
    full_pass()
    assert ref() is None


def test_the_frozen_startup_heap_is_never_walked_again() -> None:
    node = Node()
    ref = weakref.ref(node)
    gc.freeze()  # shared/serving/service.py settle_heap
    frozen = gc.get_freeze_count()
    del node
    full_pass()
    assert ref() is not None  # out of the pass's reach, as everything startup made
    assert gc.get_freeze_count() == frozen


@pytest.mark.timeout(10)
async def test_the_freezer_owns_gen_2_while_it_runs_and_gives_it_back() -> None:
    before = gc.get_threshold()
    assert before[2] != MANAGED_GEN2
    task = asyncio.ensure_future(heap_freezer(0.01, 600))
    await asyncio.sleep(0.02)
    assert gc.get_threshold() == (*before[:2], MANAGED_GEN2)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert gc.get_threshold() == before


@pytest.mark.timeout(10)
async def test_the_freezer_runs_full_passes_and_zero_turns_it_off() -> None:
    await asyncio.wait_for(heap_freezer(0, 600), 1)  # off: returns at once
    task = asyncio.ensure_future(heap_freezer(0.01, 0.05))
    try:
        node = Node()
        ref = weakref.ref(node)
        old(node)
        del node
        assert await freed(ref)  # the full pass freed it
    finally:
        task.cancel()


def test_a_full_pass_is_due_on_time_or_once_the_frozen_heap_outgrew_the_last_one() -> None:
    assert full_pass_due(600, 600, 100, 100, 0.25)  # the timed pass
    assert not full_pass_due(10, 600, 125, 100, 0.25)  # grown by exactly the fraction: not yet
    assert full_pass_due(10, 600, 126, 100, 0.25)  # past it: closed sessions' cycles go now
    assert not full_pass_due(10, 600, 90, 100, 0.25)
    assert not full_pass_due(10, 600, 100, 100, 0.25, released_since=31, full_released=32)
    assert full_pass_due(10, 600, 100, 100, 0.25, released_since=32, full_released=32)  # a wave of closes
    assert not full_pass_due(10, 600, 100, 100, 0.25, released_since=1000, full_released=0)  # off


@pytest.mark.timeout(10)
async def test_a_wave_of_released_states_brings_a_full_pass_before_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each step waits for the freezer's own calls, never a fixed time: on a loaded machine a tick can
    # come late (a fixed 0.3 s once ran the first pass after the node was made, freeing it early).
    calls = {"full": 0}
    real_full = gcpolicy.full_pass

    def counted_full(trim: bool = False) -> None:
        calls["full"] += 1
        real_full(trim)

    async def until(cond: Callable[[], bool]) -> None:
        for _ in range(2000):
            if cond():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the freezer did not get there in 20 s")

    monkeypatch.setattr(gcpolicy, "full_pass", counted_full)
    task = asyncio.ensure_future(heap_freezer(0.01, 600, 100.0, full_released=3))
    try:
        node = Node()
        ref = weakref.ref(node)
        old(node)
        del node
        await asyncio.sleep(0.05)  # a few of the freezer's looks: the timed pass is ten minutes away
        assert ref() is not None  # cyclic garbage in gen 2: only a full pass frees it
        full = calls["full"]
        released(3)
        await until(lambda: calls["full"] > full)
        assert ref() is None
    finally:
        task.cancel()


def test_young_threshold_sets_generation_0_only() -> None:
    before = gc.get_threshold()
    try:
        young_threshold(20_000)
        assert gc.get_threshold() == (20_000, before[1], before[2])
    finally:
        gc.set_threshold(*before)



def test_a_due_pass_waits_only_while_busy_and_at_most_defer_s() -> None:
    try:
        assert not deferred(0, 30)  # nobody said when it is busy
        defer_while(lambda: True)
        assert deferred(29.9, 30)
        assert not deferred(30, 30)  # waited long enough: it runs, busy or not
        assert not deferred(0, 0)  # 0: never waits
        defer_while(lambda: False)
        assert not deferred(0, 30)
    finally:
        defer_while(None)


@pytest.mark.timeout(10)
async def test_a_timed_pass_waits_for_the_busy_spell_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcpolicy, "DEFER_POLL_S", 0.01)
    busy = [True]
    defer_while(lambda: busy[0])
    task = asyncio.ensure_future(heap_freezer(0.01, 0.05, defer_s=60))
    try:
        node = Node()
        ref = weakref.ref(node)
        old(node)
        del node
        await asyncio.sleep(0.2)  # the timed pass fell due meanwhile: it waits
        assert ref() is not None
        busy[0] = False
        assert await freed(ref)
    finally:
        task.cancel()
        defer_while(None)


@pytest.mark.timeout(10)
async def test_a_full_pass_trims_malloc_when_asked() -> None:
    trims: list[int] = []
    with mock.patch.object(gcpolicy, "_trim", side_effect=lambda pad: trims.append(pad) or 1):
        full_pass()
        assert trims == []  # off by default (GAMMA_GC_MALLOC_TRIM)
        task = asyncio.ensure_future(heap_freezer(0.01, 0.02, trim=True))
        try:
            for _ in range(100):
                if trims:
                    break
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
    assert trims and set(trims) == {0}  # malloc_trim(0): every free page, not only the heap's top


def test_malloc_trim_is_glibcs_on_linux() -> None:
    assert gcpolicy.malloc_trim() is sys.platform.startswith("linux")


@pytest.mark.timeout(10)
async def test_young_cycles_go_within_a_tick_in_an_idle_process() -> None:
    gc.set_threshold(100_000, 10, MANAGED_GEN2)  # no allocation-driven collection in the test's time
    task = asyncio.ensure_future(heap_freezer(0.01, 600))
    try:
        node = Node()
        ref = weakref.ref(node)
        del node
        assert await freed(ref)
    finally:
        task.cancel()
