"""The runtime side of compaction (docs/architecture.md "Compaction"): when to ask, and how to apply the answer.

Triggers: the threshold before a model request (counted on the whole next request: system prompt,
tool schemas and messages), a provider context-overflow error (compact, then retry the request
once), and the inbox `Compact` command. At most one request in flight per session; one unanswered
for `compaction_timeout_s` no longer counts. After a failed summary the threshold backs off for
`compaction_retry_calls` model calls or `compaction_retry_s` seconds (whichever ends first, doubled
per consecutive failure) instead of asking again on every model call. A `CompactionReady` is applied at a safe point (idle, or before the next model call of a
run, when every tool call has its result): check_ready, the compaction entry plus the restored
anchors in one append, then the context reloads. It is acked only after that, so a result that
arrives while dormant (or before a crash) is applied at the next wake.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol

import structlog

from services.runtime.engine.types import AgentContext, Emit, StreamFn, Tool
from services.runtime.live.events import Outbox
from services.runtime.live.state import SessionState
from services.runtime.runs.compaction_trigger import (
    check_ready,
    is_context_overflow,
    make_request,
    should_compact,
)
from services.runtime.store.transcript import Transcript
from shared.contracts.records.messages import AgentMessage, AssistantMessage, CustomMessage
from shared.contracts.streams.inbox import Compact, CompactionReady
from shared.history.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    TextTokens,
    context_tokens,
    context_tokens_bound,
    count_text_tokens,
    message_texts,
)
from shared.redis import keys
from shared.settings import Settings
from shared.streams.inbox import InboxEntry

log = structlog.get_logger()
OVERFLOW_WAIT_S = 120.0
STATIC_COUNTS = 64  # distinct static prefixes counted per process (variants x tool sets)
MAX_BACKOFF_FACTOR = 8


def static_tokens(system_prompt: str, tools: list[Tool]) -> int:
    """Tokens of what every request carries besides the messages: the system message and the tool
    schemas (as serialized for the provider)."""
    return _static_count(system_prompt, _schemas(tools))


def _schemas(tools: list[Tool] | tuple[Tool, ...]) -> str:
    return json.dumps([t.schema() for t in tools], ensure_ascii=False, separators=(",", ":"))


@functools.lru_cache(maxsize=STATIC_COUNTS)
def _static_count(system_prompt: str, schemas: str) -> int:
    """One count per distinct (system prompt, tool set) in the process: every session of a variant
    with the same tools sends the same static prefix, and tokenizing it took ~5% of the runtime's
    event loop under bench-e2e when it was counted again per model call (bench/README.md "bench-e2e")."""
    return MESSAGE_OVERHEAD_TOKENS + count_text_tokens(system_prompt) + count_text_tokens(schemas)


class _Static(NamedTuple):
    """The last static prefix a session counted: its prompt and tools held (so `is` compares them)."""

    prompt: str
    tools: tuple[Tool, ...]
    tokens: int


class Progress(Protocol):
    async def publish(self, force: bool = False) -> None: ...


class Compactor:
    """Its hooks (`wrap_stream`, `before_model_call`) go into the session's RunHooks when the session
    builds its Agent; nothing is patched afterwards."""

    def __init__(self, state: SessionState, context: AgentContext, transcript: Transcript, outbox: Outbox,
                 progress: Progress, ack: Callable[[str | None], Awaitable[None]], *,
                 anchors: Callable[[], list[CustomMessage]], reload: Callable[[], None], settings: Settings,
                 model: str, context_window: int) -> None:
        self.state = state  # the session's id, and whether a run is on
        self.context = context  # the Agent's context (the same object: its messages as they are now)
        self.transcript = transcript
        # The turn order's (turn_order.py): the anchors kept past a compaction, the context reload.
        self.anchors = anchors
        self.reload = reload
        self.outbox = outbox
        self.progress = progress  # the checklist, re-sent after a compaction reloads the context
        self.ack = ack
        self.model = model
        self.image_detail = settings.images.image_detail  # the detail every image part is sent with
        self.context_window = context_window
        self.reserve_tokens = settings.compaction.reserve_tokens
        self.keep_recent_tokens = settings.compaction.keep_recent_tokens
        self.retry_calls = settings.compaction.compaction_retry_calls
        self.retry_s = settings.compaction.compaction_retry_s
        self.timeout_s = settings.compaction.compaction_timeout_s
        self.clock: Callable[[], float] = time.monotonic
        self._in_flight: str | None = None
        self._in_flight_at = 0.0
        self.failures = 0  # consecutive failed summaries
        self._skip_calls = 0  # backoff: threshold checks still to skip ...
        self._skip_until = 0.0  # ... unless this time has passed
        self._static: _Static | None = None
        self._bounds: dict[int, tuple[AgentMessage, int]] = {}  # id -> (message, its bytes bound)
        # The counts of this session's texts, counted again before every model call: they go with the
        # session (shared/history/tokens.py TextTokens).
        self.counts = TextTokens()
        self.deferred: list[tuple[InboxEntry, CompactionReady]] = []
        self._waiters: dict[str, asyncio.Future[bool]] = {}

    # ------------------------------------------------------------ triggers

    @property
    def in_flight(self) -> str | None:
        """The request still awaited; one unanswered past the timeout is given up (its answer, if it
        ever comes, is still vetted by check_ready), so a lost request cannot block compaction."""
        if self._in_flight is not None and self.clock() - self._in_flight_at > self.timeout_s:
            log.warning("compaction_request_timed_out", session_id=self.state.sid, request_id=self._in_flight)
            self._in_flight = None
        return self._in_flight

    @in_flight.setter
    def in_flight(self, request_id: str | None) -> None:
        self._in_flight = request_id
        self._in_flight_at = self.clock()

    def _static_tokens(self, context: AgentContext) -> int:
        """The tool policy hands a new list of the same tools at every model call (tool_policy.py):
        the same objects are the same prefix, compared one by one, not by the list's identity."""
        last, prompt, tools = self._static, context.system_prompt, context.tools
        if (last is not None and last.prompt is prompt and len(last.tools) == len(tools)
                and all(a is b for a, b in zip(last.tools, tools, strict=True))):
            return last.tokens
        self._static = _Static(prompt, tuple(tools), _static_count(prompt, _schemas(tools)))
        return self._static.tokens

    def request_tokens(self, context: AgentContext) -> int:
        """The whole next request: system prompt + tool schemas (counted once per session, they never
        change) + the messages."""
        return self._static_tokens(context) + context_tokens(context.messages, self.model, self.image_detail, self.counts)

    def request_tokens_bound(self, context: AgentContext) -> int:
        """At least `request_tokens(context)`, without tokenizing the messages: their UTF-8 bytes
        (shared/history/tokens.py `context_tokens_bound`). Each message's bound is kept while it stays
        in the context: a recorded message does not change, and rendering every tool call's arguments
        again at every model call was a tenth of the loop under a tool-heavy session (bench-stalls'
        profile, docs/architecture.md "Bounded work")."""
        total, kept = self._static_tokens(context), self._bounds
        fresh: dict[int, tuple[AgentMessage, int]] = {}
        for m in context.messages:
            known = kept.get(id(m))
            if known is None or known[0] is not m:  # the message itself held: its id is not reused meanwhile
                known = (m, context_tokens_bound((m,), self.model, self.image_detail))
            fresh[id(m)] = known
            total += known[1]
        self._bounds = fresh  # only the current context's: a compacted or rewound one's go
        return total

    def _backing_off(self) -> bool:
        """One threshold check during a backoff: True (skip it) until the calls are used up or the
        time has passed."""
        if self._skip_calls <= 0:
            return False
        if self.clock() >= self._skip_until:
            self._skip_calls = 0
            return False
        self._skip_calls -= 1
        return True

    def _back_off(self) -> None:
        factor = min(2 ** max(self.failures - 1, 0), MAX_BACKOFF_FACTOR)
        self._skip_calls = self.retry_calls * factor
        self._skip_until = self.clock() + self.retry_s * factor

    async def before_model_call(self, context: AgentContext) -> None:
        await self._apply_deferred()
        if self.in_flight is not None or self._backing_off():
            return
        limit = self.context_window - self.reserve_tokens
        if self.request_tokens_bound(context) <= limit:
            # Under the window by its bytes: under it by its tokens (a woken session's first call
            # would otherwise tokenize its whole context on the loop while other sessions stream).
            return
        await self.counts.prepare(message_texts(context.messages))  # the long new texts, off the loop
        tokens = self.request_tokens(context)
        if should_compact(tokens, self.context_window, self.reserve_tokens):
            await self.request(None, tokens)

    async def request(self, instructions: str | None, tokens: int | None = None, manual: bool = False) -> str | None:
        if self.in_flight is not None:
            return self.in_flight
        keep = self.keep_recent_tokens
        if manual:
            # Asked for explicitly: compact even a context smaller than the recent-token budget,
            # keeping about a quarter of it (the latest turn, at least).
            keep = min(keep, max(context_tokens(self.context.messages, self.model, self.image_detail,
                                                self.counts) // 4, 1))
        req = make_request(self.state.sid, self.transcript.entries, keep_recent_tokens=keep,
                           custom_instructions=instructions, model=self.model,
                           reserve_tokens=self.reserve_tokens, tokens_before=tokens, detail=self.image_detail,
                           count=self.counts)
        if req is None:
            return None
        self.in_flight = req.request_id
        await self.outbox.publish(keys.COMPACTION_REQUESTS, req)
        await self.outbox.event("compaction", {"phase": "requested", "requestId": req.request_id,
                                                 "tokensBefore": req.tokens_before})
        log.info("compaction_requested", session_id=self.state.sid, request_id=req.request_id)
        return req.request_id

    def wrap_stream(self, inner: StreamFn) -> StreamFn:
        """The model stream with the overflow rule: compact, then retry the request once."""
        async def stream(context: AgentContext, emit: Emit, signal: asyncio.Event) -> AssistantMessage:
            message = await inner(context, emit, signal)
            if not is_context_overflow(message):
                return message
            rid = await self.request(None)
            if rid is None:
                return message
            waiter = self._waiters.setdefault(rid, asyncio.get_running_loop().create_future())
            # An abort ends the wait (the request stays in flight; its result is applied when it comes).
            stopper: asyncio.Future[Any] = asyncio.ensure_future(signal.wait())
            either: set[asyncio.Future[Any]] = {waiter, stopper}
            try:
                await asyncio.wait(either, timeout=OVERFLOW_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
                applied = waiter.done() and not waiter.cancelled() and waiter.result()
            finally:
                stopper.cancel()
                self._waiters.pop(rid, None)
            if signal.is_set():
                message.stop_reason = "aborted"
                return message
            if not applied:
                return message
            return await inner(context, emit, signal)  # retry once, on the compacted context

        return stream

    # ------------------------------------------------------------ inbox

    async def on_command(self, entry: InboxEntry, m: Compact) -> None:
        rid = await self.request(m.instructions, manual=True)
        if rid is None:
            await self.outbox.reply(m.request_id, 409, {"error": "nothing to compact yet"})
        else:
            await self.outbox.reply(m.request_id, 200, {"request_id": rid})
        await self.ack(entry.entry_id)

    async def on_ready(self, entry: InboxEntry, ready: CompactionReady) -> None:
        if self.state.running and ready.request_id not in self._waiters:
            self.deferred.append((entry, ready))  # applied before the next model call or after the run
            return
        applied = await self.apply(entry, ready)
        waiter = self._waiters.get(ready.request_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(applied)

    async def after_run(self) -> None:
        await self._apply_deferred()

    async def _apply_deferred(self) -> None:
        deferred, self.deferred = self.deferred, []
        for entry, ready in deferred:
            await self.apply(entry, ready)

    async def apply(self, entry: InboxEntry, ready: CompactionReady) -> bool:
        if self._in_flight == ready.request_id:
            self._in_flight = None
        verdict = check_ready(ready, self.transcript.entries)
        if ready.error and verdict == "stale":
            self.failures += 1
            self._back_off()  # the summarizer failed: do not ask again on the very next model call
        if verdict != "apply":
            log.info("compaction_discarded", session_id=self.state.sid, request_id=ready.request_id, verdict=verdict,
                     error=ready.error)
            await self.outbox.event("compaction", {"phase": verdict, "requestId": ready.request_id,
                                                     "error": ready.error})
            await self.ack(entry.entry_id)
            return False
        anchors = self.anchors()
        await self.transcript.append_compaction(ready.summary, ready.first_kept_entry_id, ready.tokens_before,
                                                  ready.details, ready.request_id, anchors)
        self.reload()
        self.counts.clear()  # the summarized messages are not counted again
        self.failures, self._skip_calls = 0, 0
        await self.ack(entry.entry_id)
        await self.counts.prepare(message_texts(self.context.messages))  # counted again: off the loop
        await self.outbox.event("compaction", {
            "phase": "applied", "requestId": ready.request_id, "tokensBefore": ready.tokens_before,
            "tokensAfter": self.request_tokens(self.context), "anchors": [a.custom_type for a in anchors]})
        await self.progress.publish(force=True)  # the checklist as it stands, re-sent after the reload
        log.info("compaction_applied", session_id=self.state.sid, request_id=ready.request_id)
        return True
