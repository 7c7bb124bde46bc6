"""The connector's side of the call stream: read `gamma:connectors:{brand}:calls` in the consumer
group `connector`, answer each call over HTTP (`POST /connectors/brand/results`), then XACK.

Unacked means unanswered: at start the worker first re-reads its own pending entries (a restart after
kill -9), and every pass claims entries another consumer left idle past `claim_idle_ms`. An answer
given twice is harmless (the notifications service settles a call once). A `kit` call is answered
`accepted` at once and acked only after its final answer, so a crash in between repeats both."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError
from redis.exceptions import ResponseError

from services.connectors.example.library import BrandLibrary, UnknownTool
from shared.contracts.records.connectors import ConnectorCall, ConnectorResultSubmit
from shared.redis import keys

log = structlog.get_logger()
Answer = Callable[[ConnectorResultSubmit], Awaitable[None]]
ACCEPTED = ("kit",)  # long-running tools: `accepted` first, the result later


class CallWorker:
    def __init__(self, client: aioredis.Redis, name: str, library: BrandLibrary, answer: Answer, consumer: str,
                 claim_idle_ms: int, registry: CollectorRegistry) -> None:
        self.r = client
        self.stream = keys.connector_calls(name)
        self.library = library
        self.answer = answer
        self.consumer = consumer
        self.claim_idle_ms = claim_idle_ms
        self.calls = Counter("gamma_connector_example_calls_total", "Calls answered", ["tool", "status"],
                             registry=registry)

    async def ensure_group(self) -> None:
        with contextlib.suppress(ResponseError):  # BUSYGROUP: it exists
            await self.r.xgroup_create(self.stream, keys.CONNECTOR_GROUP, id="0", mkstream=True)

    async def run_forever(self) -> None:
        await self.ensure_group()
        await self._read("0")  # this consumer's own pending entries: a restart answers them
        while True:
            try:
                claimed = await self.r.xautoclaim(self.stream, keys.CONNECTOR_GROUP, self.consumer,
                                                  self.claim_idle_ms, "0-0", count=16)
                for entry_id, fields in claimed[1]:
                    await self.handle(entry_id, fields)
                await self._read(">", block_ms=1000)
            except (OSError, ConnectionError) as exc:
                log.warning("connector_read_failed", error=str(exc))
                await asyncio.sleep(1.0)

    async def _read(self, start: str, block_ms: int | None = None) -> None:
        got: Any = await self.r.xreadgroup(keys.CONNECTOR_GROUP, self.consumer, {self.stream: start}, count=16,
                                      block=block_ms)
        for _, entries in got or []:
            for entry_id, fields in entries:
                await self.handle(entry_id, fields)

    async def handle(self, entry_id: Any, fields: dict[Any, Any]) -> None:
        if not fields:  # an entry trimmed away while pending
            await self.r.xack(self.stream, keys.CONNECTOR_GROUP, entry_id)
            return
        try:
            call = ConnectorCall.model_validate_json(fields.get(b"data") or fields.get("data") or b"")
        except ValidationError:
            log.warning("connector_call_invalid", entry_id=str(entry_id))
            await self.r.xack(self.stream, keys.CONNECTOR_GROUP, entry_id)
            return
        if call.tool in ACCEPTED:
            await self._reply(call, "accepted", json.dumps({"note": "assembling the kit"}))
        try:
            status, content = "ok", await asyncio.to_thread(self.library.answer, call.tool, call.arguments)
        except (UnknownTool, KeyError, ValueError, OSError) as exc:
            status, content = "error", f"{type(exc).__name__}: {exc}"
        await self._reply(call, status, content)
        await self.r.xack(self.stream, keys.CONNECTOR_GROUP, entry_id)

    async def _reply(self, call: ConnectorCall, status: str, content: str) -> None:
        await self.answer(ConnectorResultSubmit(call_id=call.call_id, session_id=call.session_id,
                                                status=status, content=content[:32_000]))  # type: ignore[arg-type]
        self.calls.labels(call.tool, status).inc()
        log.info("connector_call_answered", call_id=call.call_id, session_id=call.session_id, tool=call.tool,
                 status=status)
