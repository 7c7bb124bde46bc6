"""One compaction request: read the transcript (read-only), summarize, answer through the inbox.

Delivery is at-least-once: a request can arrive twice (redelivery after a crash, the claimer). The
answer goes out once: a Lua script sets `gamma:{sid}:compaction-done:{request_id}` and XADDs the
`CompactionReady` in one step, so a crash leaves either both or neither. While the model works, the
handler keeps re-claiming its own stream entry, so the claimer does not hand a slow summary to a
second consumer, and renews `gamma:{sid}:compaction-working:{request_id}`, so a consumer that got
it anyway (after an event-loop stall) waits instead of paying for a second model call. If this
process dies, the entry goes idle and the lock lapses: the claimer of another replica (or of the
restarted one) takes it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from services.compaction.summarizer import Summarizer
from shared.contracts.records.spend import UsageRow
from shared.contracts.records.transcript import parse_entries
from shared.contracts.streams.compaction import CompactionRequest
from shared.contracts.streams.inbox import CompactionReady
from shared.history.summary_rules import file_operations, format_file_operations, summary_span
from shared.history.transcript_index import window_lines
from shared.history.transcript_tree import path_to
from shared.redis import keys, topology
from shared.redis.deletion import is_deleted
from shared.redis.redis_wire import COMPARE_AND_DELETE, COMPARE_AND_RENEW
from shared.storage.disk import iter_jsonl, session_paths
from shared.streams.inbox import entry_fields, ring_arg, ring_lua

log = structlog.get_logger()
GROUP = topology.group_of("compaction")
DONE_TTL_S = 7 * 24 * 3600

# KEYS[1] inbox, KEYS[2] done marker (same {sid} slot); ARGV: type, data, request id, ttl, ring channel
_DELIVER = f"""
if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'EX', ARGV[4]) then
  local id = redis.call('XADD', KEYS[1], '*', 'type', ARGV[1], 'data', ARGV[2])
  {ring_lua(5)}
  return id
end
return false
"""




done_key = keys.compaction_done
working_key = keys.compaction_working


def branch_lines(path: Path, upto: str) -> list[dict[str, Any]]:
    """The branch to `upto` as far as a summary reads it: the transcript index's window (from the latest
    compaction's first kept entry: docs/architecture.md "How a session wakes") when it holds `upto`, as
    it does for the runtime's requests; else the whole file once (a request from a branch since left)."""
    window = window_lines(path)
    ids = [d.get("id") for d in window]
    if upto in ids:
        return window[: ids.index(upto) + 1]
    return path_to(list(iter_jsonl(path)), upto)


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.outcomes = Counter("gamma_compaction_requests_total", "Compaction requests by outcome",
                                ["outcome"], registry=registry)
        self.seconds = Histogram("gamma_compaction_summary_seconds", "Time to summarize one request",
                                 registry=registry, buckets=(0.05, 0.25, 1, 2.5, 5, 10, 30, 60, 120))


def _answer(request: CompactionRequest) -> dict[str, Any]:
    """The fields every answer to `request` repeats."""
    return dict(session_id=request.session_id, request_id=request.request_id,
                first_kept_entry_id=request.first_kept_entry_id, upto_entry_id=request.upto_entry_id,
                tokens_before=request.tokens_before)


@dataclass
class CompactionHandler:
    redis: aioredis.Redis
    data_dir: Path
    summarizer: Summarizer
    consumer: str
    hold_interval_s: float
    lock_ms: int = 10_000
    metrics: Metrics | None = None

    async def __call__(self, request: CompactionRequest) -> None:
        sid, rid = request.session_id, request.request_id
        with structlog.contextvars.bound_contextvars(session_id=sid, request_id=rid):
            token = f"{self.consumer}:{uuid.uuid4().hex[:8]}"
            if await is_deleted(self.redis, sid):
                self._count("deleted")
                return
            if not await self._acquire(sid, rid, token):
                log.info("compaction_duplicate_request")
                self._count("duplicate")
                return
            log.info("compaction_started", upto=request.upto_entry_id, first_kept=request.first_kept_entry_id)
            done = asyncio.Event()
            hold = self._hold(done, sid, rid, token)
            try:
                try:
                    ready = await self._compact(request)
                except Exception as exc:  # noqa: BLE001 - e.g. an unreadable transcript: answer, so the
                    # runtime clears its in-flight request instead of waiting for a retry that fails alike
                    log.exception("compaction_failed")
                    self._count("failed")
                    ready = CompactionReady(**_answer(request), error=f"compaction failed: {exc!r}"[:2000])
                await self._deliver(ready)
            finally:
                # Not cancel(): cancelling a redis-py command in flight can leave the task hanging
                # (redis 8.1 asyncio); the loop sees the event and ends after its current command.
                done.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(hold), timeout=5)
                with contextlib.suppress(Exception):
                    await self.redis.eval(COMPARE_AND_DELETE, 1, working_key(sid, rid), token)  # type: ignore[misc]

    async def _acquire(self, sid: str, rid: str, token: str) -> bool:
        """Take the request, or learn that it is answered. A consumer that got it while another one is
        still working on it (a claim after an event-loop stall) waits instead of calling the model
        a second time; if the other one died, its lock lapses and this one takes over."""
        while True:
            if await self.redis.exists(done_key(sid, rid)):
                return False
            if await self.redis.set(working_key(sid, rid), token, nx=True, px=self.lock_ms):
                return True
            await asyncio.sleep(self.hold_interval_s)

    async def _compact(self, request: CompactionRequest) -> CompactionReady:
        base = _answer(request)
        path = session_paths(self.data_dir, request.session_id).transcript
        # The branch the request was made on (shared/history/transcript_tree.py): a rewind leaves others in the file.
        raw = await asyncio.to_thread(branch_lines, path, request.upto_entry_id)
        entries = parse_entries(raw)
        try:
            span = summary_span(entries, request.first_kept_entry_id, request.upto_entry_id)
        except LookupError as exc:
            log.warning("compaction_stale_request", error=str(exc))
            self._count("stale")
            return CompactionReady(**base, error=f"stale request: {exc}")
        previous = request.previous_summary or (span.previous.summary if span.previous else None)
        previous_details = request.previous_details or (span.previous.details if span.previous else None)
        started = time.perf_counter()
        rows: list[UsageRow] = []  # every summary call's usage, recorded by the runtime (docs/costs.md)
        try:
            summary = await self.summarizer.summarize(
                span, previous_summary=previous, custom_instructions=request.custom_instructions,
                reserve_tokens=request.reserve_tokens, model=request.model,
                session_root=session_paths(self.data_dir, request.session_id).root, rows=rows,
            )
        except Exception as exc:  # noqa: BLE001 - any model failure is an answer: the runtime retries later
            log.warning("compaction_model_error", error=repr(exc)[:500])
            self._count("model_error")
            return CompactionReady(**base, error=f"summarization failed: {exc}"[:2000], usage=rows)
        if self.metrics is not None:
            self.metrics.seconds.observe(time.perf_counter() - started)
        details = file_operations([*span.history, *span.turn_prefix], previous_details)
        log.info("compaction_summarized", entries=len(span.history) + len(span.turn_prefix),
                 split_turn=bool(span.turn_prefix), chars=len(summary))
        self._count("ok")
        return CompactionReady(**base, summary=summary + format_file_operations(details), details=details,
                               usage=rows)

    async def _deliver(self, ready: CompactionReady) -> None:
        if await is_deleted(self.redis, ready.session_id):  # deleted meanwhile: the answer would recreate its inbox
            log.info("compaction_ready_dropped_session_deleted")
            return
        fields = entry_fields(ready)
        sent = await self.redis.eval(  # type: ignore[misc]
            _DELIVER, 2, keys.inbox(ready.session_id), done_key(ready.session_id, ready.request_id),
            fields["type"], fields["data"], ready.request_id, str(DONE_TTL_S), ring_arg(self.redis, ready.session_id),
        )
        log.info("compaction_ready_sent" if sent else "compaction_ready_already_sent", error=ready.error)

    def _hold(self, done: asyncio.Event, sid: str, rid: str, token: str) -> asyncio.Task[None]:
        return asyncio.ensure_future(self._refresh(done, sid, rid, token))

    async def _refresh(self, done: asyncio.Event, sid: str, rid: str, token: str) -> None:
        """While the model works: renew the request lock, and keep the stream entry from looking
        abandoned (XCLAIM JUSTID resets its idle time without counting a delivery), so the claimer
        does not hand it to another consumer. The bus binds the entry id to the log context."""
        entry_id = structlog.contextvars.get_contextvars().get("entry_id")
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), self.hold_interval_s)
            if done.is_set():
                return
            with contextlib.suppress(Exception):
                await self.redis.eval(COMPARE_AND_RENEW, 1, working_key(sid, rid), token, str(self.lock_ms))  # type: ignore[misc]
                if entry_id and entry_id != "?":
                    await self.redis.xclaim(keys.COMPACTION_REQUESTS, GROUP, self.consumer, min_idle_time=0,
                                            message_ids=[str(entry_id)], justid=True)

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.outcomes.labels(outcome).inc()
