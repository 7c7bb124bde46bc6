"""Every disk write of a live session goes through its `WriteGuard`: the session is still open, the
lease still held, and the disk fence ours (diskfence.py) from the check until the write is done.

The write itself runs in the I/O pool (`write`): on a network filesystem an fsync or a rename takes
milliseconds, and a write on the event loop would hold every other session of the worker for them
(README "Reliability", slow disk). The fence therefore stays held across an await, so a session's
writes take turns (`_turn`): `flock` is per open file description, and without the turn a second
write of the same session would pass the lock the first one holds and release it when it ends, while
the first is still writing. Writes of different sessions never wait for each other.

`__call__` is the check alone, for what cannot run in a thread: a `bash` command (the sandbox writes
by itself; it is fenced at its start, docs/architecture.md "Ownership: one writer per slice") and a caller whose
synchronous write follows with no await (the turn ends when its task next yields).

`write(..., after=...)` runs a second step in the same hand-off, the fence still held, while the
caller goes on with the first step's result: a client's write and the snapshot that records it
(snapshots.py `after_write`), one hand-off and one fence check instead of two (bench/README.md
"bench-e2e", fourth pass).

`changes` counts the writes that may have changed the session's files (every one but those that
say `files=False`: the transcript's appends), so a snapshot can tell that nothing was written since
the last one without scanning the disk (snapshots.py). Once a check alone was asked for, a writer
outside the guard may still be writing (a command runs on after its check): `changes` is None from
then on, and every snapshot scans."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import structlog

log = structlog.get_logger()
T = TypeVar("T")


class FenceLock(Protocol):
    """The disk fence as the guard uses it (diskfence.py `DiskFence`)."""

    async def hold(self) -> None:
        """Return with the fence's lock held and the fence still ours, else raise LeaseLost."""
        ...

    def release(self) -> None: ...


class Guard(Protocol):
    @property
    def changes(self) -> int | None: ...

    async def __call__(self) -> None: ...

    async def write(self, fn: Callable[[], T], written: Callable[[T], None] | None = None, *,
                    files: bool = True, then: Callable[[T], None] | None = None,
                    after: Callable[[T], None] | None = None) -> T: ...


async def _unchecked() -> None:
    return None


def _failed_after(done: asyncio.Future[None]) -> None:
    """`after` raised: nobody awaits it (the caller has the write's result), so it is logged here."""
    if not done.cancelled() and (exc := done.exception()) is not None:
        log.error("write_after_failed", error=repr(exc))


class WriteGuard:
    def __init__(self, check: Callable[[], Awaitable[None]] = _unchecked, disk: FenceLock | None = None) -> None:
        self._check = check  # raises LeaseLost when the session may no longer write
        self.disk = disk
        self._turn = asyncio.Lock()
        self._changes: int | None = 0

    @property
    def changes(self) -> int | None:
        return self._changes

    async def __call__(self) -> None:
        await self._enter()
        self._changes = None
        asyncio.get_running_loop().call_soon(self._leave)

    async def write(self, fn: Callable[[], T], written: Callable[[T], None] | None = None, *,
                    files: bool = True, then: Callable[[T], None] | None = None,
                    after: Callable[[T], None] | None = None) -> T:
        """`fn()` in the I/O pool with the fence held until it returns, also when the caller is
        cancelled meanwhile (the write goes on; cancelling cannot free the fence mid-write). `written`
        gets the result on the event loop before the fence is released: what must follow a visible
        write whatever happens to the caller (the transcript's index of its new lines). `files=False`:
        `fn` writes nothing a snapshot records (`changes` stays). `then`: run on the result in the same
        thread once the fence is on its way back (the transcript's fsync): one hand-off instead of two.
        `after`: run on the result in the same thread with the fence still held, once the caller has
        the result (it does not wait for `after`); `written` is not taken with it."""
        await self._enter(files)
        if after is not None:
            return await self._write_after(fn, after)
        if then is not None:
            return await self._write_then(fn, written, then)
        try:
            done = asyncio.get_running_loop().run_in_executor(None, fn)
        except BaseException:
            self._leave()
            raise

        def finished(f: asyncio.Future[T]) -> None:
            try:
                if written is not None and not f.cancelled() and f.exception() is None:
                    written(f.result())
            finally:
                self._leave()

        done.add_done_callback(finished)
        return await asyncio.shield(done)

    async def _write_then(self, fn: Callable[[], T], written: Callable[[T], None] | None,
                          then: Callable[[T], None]) -> T:
        loop = asyncio.get_running_loop()

        def visible(result: T) -> None:  # on the loop, as `write`'s `finished`
            try:
                if written is not None:
                    written(result)
            finally:
                self._leave()

        def run() -> T:  # in the I/O pool
            try:
                result = fn()
            except BaseException:
                loop.call_soon_threadsafe(self._leave)
                raise
            loop.call_soon_threadsafe(visible, result)
            then(result)
            return result

        try:
            done = loop.run_in_executor(None, run)
        except BaseException:
            self._leave()
            raise
        return await asyncio.shield(done)

    async def _write_after(self, fn: Callable[[], T], after: Callable[[T], None]) -> T:
        loop = asyncio.get_running_loop()
        first: asyncio.Future[T] = loop.create_future()

        def give(result: T | None, exc: BaseException | None) -> None:  # on the loop
            if first.done():
                return
            if exc is not None:
                first.set_exception(exc)
            else:
                first.set_result(result)  # type: ignore[arg-type]

        def run() -> None:  # in the I/O pool
            try:
                try:
                    result = fn()
                except BaseException as exc:
                    loop.call_soon_threadsafe(give, None, exc)
                    return
                loop.call_soon_threadsafe(give, result, None)
                after(result)
            finally:
                loop.call_soon_threadsafe(self._leave)

        try:
            done = loop.run_in_executor(None, run)
        except BaseException:
            self._leave()
            raise
        done.add_done_callback(_failed_after)
        return await asyncio.shield(first)

    async def _enter(self, files: bool = True) -> None:
        await self._turn.acquire()
        try:
            await self._check()
            if self.disk is not None:
                await self.disk.hold()
        except BaseException:
            self._turn.release()
            raise
        if files and self._changes is not None:
            self._changes += 1

    def _leave(self) -> None:
        if self.disk is not None:
            self.disk.release()
        self._turn.release()
