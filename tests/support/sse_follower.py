"""An SSE client that follows a session's events the way an EventSource does: when the stream ends,
breaks or goes silent past two heartbeats, it reconnects with `Last-Event-ID` (the last id it saw).
It records every id it received, so a test compares them with the events stream in Redis: nothing
missed after a resume, nothing received twice."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import httpx

from tests.support.stack import API_TOKEN


@dataclass
class SseFollower:
    base_url: str
    sid: str
    heartbeat_s: float
    ids: list[str] = field(default_factory=list)
    reconnects: int = 0
    resets: int = 0
    statuses: list[int] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        timeout = httpx.Timeout(connect=5.0, read=2 * self.heartbeat_s + 1, write=5.0, pool=5.0)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=timeout,
                                     headers={"Authorization": f"Bearer {API_TOKEN}"}) as client:
            while not self._stop.is_set():
                with contextlib.suppress(httpx.TransportError, httpx.HTTPStatusError):
                    await self._follow(client)
                if not self._stop.is_set():
                    self.reconnects += 1
                    await asyncio.sleep(0.5)  # EventSource's retry (the proxy sends `retry: 2000`; shorter here)

    async def _follow(self, client: httpx.AsyncClient) -> None:
        headers = {"Last-Event-ID": self.ids[-1]} if self.ids else {}
        async with client.stream("GET", f"/sessions/{self.sid}/events", headers=headers) as resp:
            self.statuses.append(resp.status_code)
            resp.raise_for_status()
            event = ""
            async for line in resp.aiter_lines():
                if self._stop.is_set():
                    return
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("id: "):
                    if event == "reset":
                        self.resets += 1
                    self.ids.append(line[4:])
                elif line == "":
                    event = ""

    def stop(self) -> None:
        self._stop.set()


def id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def compare(received: list[str], stored: list[str]) -> tuple[list[str], list[str]]:
    """(missed, duplicated): ids in the stream the client never got, ids it got more than once or out
    of order."""
    seen: set[str] = set()
    duplicated = []
    last = (0, 0)
    for entry_id in received:
        if entry_id in seen or id_key(entry_id) <= last:
            duplicated.append(entry_id)
        seen.add(entry_id)
        last = max(last, id_key(entry_id))
    missed = [i for i in stored if i not in seen]
    return missed, duplicated
