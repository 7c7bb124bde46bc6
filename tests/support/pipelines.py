"""A stand-in for the Redis client's non-transactional pipelines (services/runtime/sender.py's
`Pipelines` port): it records each pipeline's XADDs when it runs, and can be told to fail or to hold
its next pipelines until released."""

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

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> FakePipeline:
        return FakePipeline(self)

    def events(self, stream: str) -> list[dict[str, Any]]:
        return [x.event for p in self.pipelines for x in p if x.stream == stream]

    def text(self, stream: str) -> str:
        return "".join(e["data"].get("delta", "") for e in self.events(stream))
