"""Doubles for the wake's last steps (services/runtime/hosting/wake_timing.py `start_reading`): an inbox reader
that records what it reads, and the few parts of a Session those steps touch."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


class RecordingReader:
    """`InboxReader.add`/`remove`: `pending` is returned by the add; `on_add` runs inside it (e.g. a
    close landing while the registration's round trips are under way)."""

    def __init__(self, pending: list[Any] | None = None, on_add: Any = None) -> None:
        self.pending = pending or []
        self.on_add = on_add
        self.reading: set[str] = set()

    async def add(self, sid: str) -> list[Any]:
        await asyncio.sleep(0)
        self.reading.add(sid)
        if self.on_add is not None:
            self.on_add()
        return list(self.pending)

    def remove(self, sid: str) -> None:
        self.reading.discard(sid)


class RecordingOutbox:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def event(self, type: str, data: dict[str, Any] | None = None, **_: Any) -> None:
        self.events.append((type, data or {}))


@dataclass
class _State:
    closed: bool = False
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)


@dataclass
class _Lease:
    fence: int = 7


@dataclass
class _Tools:
    viewable_files: list[str] = field(default_factory=list)


@dataclass
class WakingSession:
    sid: str = "s_wake"
    outbox: RecordingOutbox = field(default_factory=RecordingOutbox)
    state: _State = field(default_factory=_State)
    lease: _Lease = field(default_factory=_Lease)
    tools: _Tools = field(default_factory=_Tools)
