"""A stand-in for the Redis client as services/runtime/live/sender.py's `Pipelines` port uses it: it
records the XADDs of each pipeline and of each batch script (XADD_ALL) when they run, and can be told
to fail or to hold its next round trips until released."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Xadd:
    stream: str
    event: dict[str, Any]  # the entry's `data` field, decoded


class FakePipeline:
    def __init__(self, owner: FakePipelines) -> None:
        self._owner = owner
        self._xadds: list[Xadd] = []

    def xadd(self, stream: str, fields: dict[str, str], maxlen: int | None = None,
             approximate: bool = True) -> None:
        self._xadds.append(Xadd(stream, json.loads(fields["data"])))

    def __len__(self) -> int:
        return len(self._xadds)

    async def execute(self) -> list[str]:
        await self._owner.gate.wait()
        if self._owner.fail is not None:
            raise self._owner.fail
        self._owner.pipelines.append(self._xadds)
        start = sum(len(p) for p in self._owner.pipelines) - len(self._xadds)
        return [f"{start + i + 1}-0" for i in range(len(self._xadds))]


@dataclass
class FakePipelines:
    pipelines: list[list[Xadd]] = field(default_factory=list)  # the XADDs of each pipeline run, in order
    fail: Exception | None = None  # raised by every pipeline run while set
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # cleared: pipelines wait until it is set

    def __post_init__(self) -> None:
        self.gate.set()

    scripts: int = 0  # batches sent as one script

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> FakePipeline:
        return FakePipeline(self)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        assert args[0] == "EVALSHA", args  # the sender's batch script, by its SHA
        n = int(args[2])
        streams, entries = args[3 : 3 + n], args[4 + n :]
        pipe = FakePipeline(self)
        for stream, data in zip(streams, entries, strict=True):
            pipe.xadd(stream, {"data": data})
        await pipe.execute()
        self.scripts += 1
        return n

    def events(self, stream: str) -> list[dict[str, Any]]:
        return [x.event for p in self.pipelines for x in p if x.stream == stream]

    def text(self, stream: str) -> str:
        return "".join(e["data"].get("delta", "") for e in self.events(stream))
