"""The inbox dispatcher: entries are handled one at a time per session (a per-session queue), each
retried in order on a transient failure, dead-lettered when it can never succeed, acked once its
effect is durable. Prompts wait for the wake barrier; a run executes as its own task, so steers and
UI updates are handled during a run."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any

import structlog
from opentelemetry.trace import Span

from services.runtime.inbox.dispatcher_ports import (
    EntryHandlers,
    Held,
    PromptRoutes,
    Replies,
)
from services.runtime.inbox.failures import disk_fault, refusal, transient
from services.runtime.live.lease import LeaseLost
from services.runtime.live.pending import PendingPrompt, TurnInput
from services.runtime.live.state import InboxState, SessionState
from services.runtime.runs.supervisor import interrupted
from services.runtime.turns.delivery_rules import Action, Prompt, When, decide, into_run, moment
from shared.contracts.records.messages import AgentMessage
from shared.contracts.streams.inbox import (
    Abort,
    Barrier,
    ChangesSettled,
    Compact,
    DocumentDelete,
    DocumentEdit,
    FileDelete,
    FileWrite,
    Injection,
    Rewind,
    Stop,
    UiUpdate,
    UserPrompt,
)
from shared.redis import keys
from shared.streams.bus import dead_letter
from shared.streams.inbox import InboxEntry
from shared.telemetry.tracing import span_from

log = structlog.get_logger()
EXPIRE_RETRY_S = 0.5  # a held prompt's wait ended but could not be settled: the next try
BARRIER_WAIT_S = 3.0
RETRY_FOR_S = 60.0
# a client waits on a reply key for these (a prompt only when it carries a request id: expected_run_id)
REPLIED = (UiUpdate, FileWrite, DocumentEdit, Stop, Compact, FileDelete, DocumentDelete, Abort, UserPrompt, Rewind)


RECENT_IDS = 4096  # inbox entry ids a session remembers having taken (RecentIds)
INBOX_SPAN = "gamma:{sid}:inbox process"


def processing(entry: InboxEntry) -> AbstractContextManager[Span]:
    """The span of handling one inbox entry, in its producer's trace (the entry's `traceparent`): a
    run started meanwhile is a child of it, so a prompt's run continues the proxy's request trace."""
    return span_from(INBOX_SPAN, entry.message.traceparent, attributes={
        "messaging.system": "redis", "messaging.operation.type": "process",
        "messaging.destination.name": "gamma:{sid}:inbox", "messaging.message.id": entry.entry_id,
        "gamma.session_id": entry.session_id, "gamma.inbox.type": entry.message.type})


class RecentIds:
    """The inbox entries a session took lately, so one handed to it twice is handled once: a write
    applied again after a later one would undo it. The inbox reader hands an entry out once, also when
    it re-reads what a lost reply held (shared/streams/stream_handed.py); this holds for any other path."""

    def __init__(self, size: int = RECENT_IDS) -> None:
        self._order: collections.deque[str] = collections.deque()
        self._ids: set[str] = set()
        self._size = size

    def first_time(self, entry_id: str) -> bool:
        if entry_id in self._ids:
            return False
        self._ids.add(entry_id)
        self._order.append(entry_id)
        if len(self._order) > self._size:
            self._ids.discard(self._order.popleft())
        return True


class InboxDispatcher:
    def __init__(self, state: SessionState, inbox: InboxState, lease: Held, routes: PromptRoutes, replies: Replies,
                 entries: EntryHandlers, *, trace: bool = False) -> None:
        self.state = state  # read: the session's ids, whether it is closed (state.py)
        self.inbox = inbox  # written here only: the barrier, held prompts, Stop (state.py)
        self.lease = lease
        self.agent, self.transcript = routes.agent, routes.transcript
        self.queue = routes.queue  # the pending queue (pending_queue.py): the idle turns
        # The turn builder (turn_order.py): a prompt reaches the pending queue through it only.
        self.turns = routes.turns
        self.runs, self.injections = routes.runs, routes.injections
        self.causal = routes.causal  # holds prompts until the writes before them are in (causal.py)
        self.calls, self.prompt_hook = routes.calls, routes.prompt_hook
        self.aborts = routes.aborts  # POST /abort, on_busy=interrupt, expected_run_id (abort.py)
        self.outbox, self.ack = replies.outbox, replies.ack
        self.client = replies.client  # Redis, for the dead-letter stream
        self.request_close = replies.request_close
        self.handlers = entries.handlers  # writes and compaction entries: type -> handler
        # At the wake barrier: the dormant artifact manifest queued, a form answered while dormant delivered.
        self.at_barrier = entries.at_barrier
        self.taken = RecentIds()
        self.trace = trace  # GAMMA_TRACE_INBOX: log where each entry's time went (bench/e2e.py --trace)

    async def process_forever(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BARRIER_WAIT_S
        while not self.state.closed:
            timeout = max(deadline - loop.time(), 0.05) if not self.state.barrier_passed else None
            if timeout is None and self.causal is not None:
                timeout = self.causal.timeout()
            try:
                entry = await asyncio.wait_for(self.state.queue.get(), timeout)
            except TimeoutError:
                async with self.state.turn_lock:  # idle recording (idle.py) waits meanwhile
                    if not self.state.barrier_passed:
                        await self.pass_barrier()  # no Barrier within 3 s: go on without it
                    elif self.causal is not None:
                        await self.causal_expired()
                continue
            if not self.taken.first_time(entry.entry_id):
                log.warning("inbox_entry_repeated", session_id=self.state.sid, entry_id=entry.entry_id)
                continue
            self.inbox.taken_at = loop.time()  # the idle clock (state.py)
            async with self.state.turn_lock:  # nothing recorded between a prompt's routing and its run
                if not await self.dispatch(entry):
                    return

    async def dispatch(self, entry: InboxEntry) -> bool:
        """One entry, its failure settled here; False once the lease is lost (the session ends)."""
        if self.causal is not None and self.causal.timeout() == 0.0:
            await self.causal_expired()  # a busy inbox must not keep a held prompt past its wait
        dequeued = time.time()
        try:
            with processing(entry):
                await self.handle_retrying(entry)
            if self.trace:
                _trace(self.state.sid, entry, dequeued)
        except LeaseLost:
            log.warning("lease_lost", session_id=self.state.sid)
            return False
        except Exception as exc:  # noqa: BLE001 - one bad entry must not stop the session
            if _client_waits(entry) and disk_fault(exc) is not None:
                await self.refuse(entry, exc)
            elif transient(exc):  # still failing after RETRY_FOR_S: pending, the next holder retries
                log.exception("inbox_entry_gave_up", session_id=self.state.sid, entry_id=entry.entry_id)
            else:
                log.exception("inbox_entry_failed", session_id=self.state.sid, entry_id=entry.entry_id)
                await self.dead_letter(entry, exc)
        return True

    async def handle_retrying(self, entry: InboxEntry, action: Callable[[], Awaitable[None]] | None = None) -> None:
        """Handle one entry (or run `action` for it); on a transient failure (Redis restarting, a dropped
        connection) retry it here, in order, with backoff. Handlers are idempotent: a prompt or injection
        already recorded is only acked, a file or deck write rewrites the same content, a Yjs update merges."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + RETRY_FOR_S
        delay = 0.1
        while True:
            try:
                await (action() if action is not None else self.handle(entry))
                return
            except Exception as exc:
                if not transient(exc) or self.state.closed or self.lease.lost:
                    raise
                # A full or failing disk: a client waiting on this write is answered 507/503 at once;
                # anything else waits for the disk however long it takes (the session resumes by
                # itself when it is back, README "Reliability"); other transient failures give up.
                if disk_fault(exc) is not None:
                    if _client_waits(entry):
                        raise
                elif loop.time() + delay > give_up:
                    raise
                log.warning("inbox_entry_retry", session_id=self.state.sid, entry_id=entry.entry_id, delay_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def refuse(self, entry: InboxEntry, exc: Exception) -> None:
        """A write refused because the disk is full or failing: nothing of it was applied (atomic
        writes leave no partial file), the client is told why (507/503) and retries when the disk is
        back; the entry is acked, not dead-lettered: it was answered, not lost."""
        status, message = refusal(exc)
        log.warning("inbox_entry_refused_disk", session_id=self.state.sid, entry_id=entry.entry_id, status=status,
                    error=message)
        with contextlib.suppress(Exception):
            await self.outbox.reply(getattr(entry.message, "request_id", ""), status,
                                      {"error": message, "detail": {"cause": getattr(disk_fault(exc), "cause", None)}})
        await self.ack(entry.entry_id)

    async def dead_letter(self, entry: InboxEntry, exc: Exception) -> None:
        """An entry that can never succeed (a handler bug, a disk error no retry fixes): answer a
        waiting client at once, park the entry in gamma:deadletter and ack, so it cannot block the
        session or be retried at every wake."""
        request_id = getattr(entry.message, "request_id", None)
        if isinstance(entry.message, REPLIED) and request_id:
            status, message = refusal(exc)
            with contextlib.suppress(Exception):
                await self.outbox.reply(request_id, status, {"error": message})
        with contextlib.suppress(Exception):
            m = entry.message
            await dead_letter(self.client, keys.inbox(self.state.sid), keys.RUNTIME_GROUP, entry.entry_id,
                              {"type": m.type, "data": m.model_dump_json()}, f"{type(exc).__name__}: {exc}", 1)
            await self.ack(entry.entry_id)

    async def handle(self, entry: InboxEntry) -> None:
        m = entry.message
        if isinstance(m, UserPrompt):
            await self.on_prompt(entry, m)
        elif isinstance(m, Injection):
            await self.injections.deliver(m, entry.entry_id)
        elif isinstance(m, Barrier):
            if m.wake_id == self.state.wake_id:  # a barrier of an earlier wake (claimed from a dead holder) is moot
                await self.pass_barrier()
            await self.ack(entry.entry_id)
        elif isinstance(m, ChangesSettled):
            released = self.causal.on_settled(m.upto) if self.causal is not None else []
            await self.ack(entry.entry_id)
            await self.release([], released)
        elif isinstance(m, Stop):
            await self.on_stop(entry, m)
        elif isinstance(m, Abort) and self.aborts is not None:
            await self.aborts.on_abort(entry, m)
        else:
            handler = self.handlers.get(type(m))
            if handler is not None:
                await handler(entry, m)

    async def on_stop(self, entry: InboxEntry, m: Stop) -> None:
        # Answered only once the lease is gone (worker.close): a client told "dormant" must find
        # the session dormant, and may write dormant state at once.
        self.inbox.stop_requested = m.reason
        if self.request_close is None:
            await self.outbox.reply(m.request_id, 200, {"status": "dormant"})
        else:
            self.inbox.stop_replies.append(m.request_id)
        await self.ack(entry.entry_id)
        if self.request_close is not None:
            self.request_close(self.state.sid, m.reason)

    async def on_prompt(self, entry: InboxEntry, m: UserPrompt) -> None:
        if m.prompt_id in self.transcript.prompts:
            await self.ack(entry.entry_id)  # a redelivered prompt: already recorded
            return
        if (on_its_way := self.queue.pending_prompt(m.prompt_id)) is not None:
            await self._twin(entry, on_its_way)
            return
        if self.aborts is not None and await self.aborts.refuse_stale(entry, m):
            return  # aimed at a run that has ended: refused, nothing queued
        if self.causal is not None and not await self.causal.admit(entry, m):
            return  # writes acknowledged before it are still on their way (causal.py)
        fetched = await self.prompt_hook.fetch() if self.prompt_hook else None  # before `running` is read
        # Decided once, here, with no await between the decision and its action (delivery_rules.py).
        action = decide(Prompt(m.on_busy), self._moment())
        if action is Action.HOLD:
            self.inbox.held.append(entry)  # before the wake's barrier: started there (pass_barrier)
            return
        if action is Action.REJECT:
            await self.outbox.event("error", {"error": "busy", "promptId": m.prompt_id})
            await self.ack(entry.entry_id)
            return
        if action is Action.INTERRUPT:
            if self.aborts is None:
                action = Action.STEER  # nothing can abort the run (a host without an aborter): steered
            else:
                await self.aborts.abort("interrupt")  # returns once the run has ended: this one starts next
                action = Action.START_TURN
        busy = action is not Action.START_TURN
        turn = self.turns.build(TurnInput(m, entry.entry_id, self._hints(m, fetched), busy=busy))
        if busy:
            into_run(self.agent, action, turn.messages)
        else:
            self.runs.start_run(turn)
        await self._accepted(m)

    async def _twin(self, entry: InboxEntry, first: PendingPrompt) -> None:
        """The same prompt id already taken in and not yet recorded: another entry of it (an append
        retried) is acked at once, since the first entry stays unacked until the prompt is recorded
        (recorder.py), and a crash before then redelivers that one; the same entry read twice (claimed
        from the last holder as it was also read) is left to that record. It is recorded once either
        way, and asked before anything holds, refuses or interrupts for it."""
        if entry.entry_id != first.entry_id:
            await self.ack(entry.entry_id)

    def _moment(self) -> When:
        # A prompt's rules do not tell the idle moments apart: no active task is asked for.
        return moment(held=not self.state.barrier_passed, running=self.state.running, active_task=lambda: False)

    async def _accepted(self, m: UserPrompt) -> None:
        if self.aborts is not None:
            await self.aborts.accepted(m)  # the 202 a prompt with expected_run_id waits for

    def _hints(self, m: UserPrompt, fetched: Any) -> tuple[AgentMessage, ...]:
        """The prompt-time hints, an input of the prompt's turn (before its user message). Asked only
        once the prompt's turn is decided: a hook counts what it hands out as told (the connector
        catalog), so a prompt held or refused must not ask."""
        return tuple(self.prompt_hook.hints(m.message, fetched)) if self.prompt_hook is not None else ()

    async def causal_expired(self) -> None:
        """A held prompt's wait ran out. Failing to settle it (Redis restarting) keeps the prompts held
        and tries again shortly: an exception here, outside any entry's retry, would end the loop."""
        assert self.causal is not None
        try:
            markers, prompts = await self.causal.expire()
        except LeaseLost:
            raise
        except Exception as exc:  # noqa: BLE001 - the prompts stay held; see above
            (log.warning if transient(exc) else log.exception)("causal_expire_retry", session_id=self.state.sid,
                                                                error=repr(exc))
            self.causal.postpone(EXPIRE_RETRY_S)
            return
        await self.release(markers, prompts)

    async def release(self, markers: list[Injection], prompts: list[InboxEntry]) -> None:
        """The gate's released prompts, in order, after a timed-out wait's dirty markers; retried as entries are."""
        for marker in markers:
            await self.handle_retrying(prompts[0], functools.partial(self.injections.deliver, marker, None))
        for entry in prompts:
            assert isinstance(entry.message, UserPrompt)  # the gate holds prompts only
            with processing(entry):
                await self.handle_retrying(entry, functools.partial(self.on_prompt, entry, entry.message))

    async def pass_barrier(self) -> None:
        inbox, queue = self.inbox, self.queue
        if inbox.barrier_passed:
            return
        inbox.barrier_passed = True
        await self.at_barrier()
        held, inbox.held = inbox.held, []
        prompts = [e for e in held if isinstance(e.message, UserPrompt)]
        if prompts:
            first = prompts[0]
            assert isinstance(first.message, UserPrompt)
            fetched = await self.prompt_hook.fetch() if self.prompt_hook else None
            turn = self.turns.build(TurnInput(first.message, first.entry_id, self._hints(first.message, fetched)))
            with processing(first):  # the held prompt's run continues the prompt's trace
                self.runs.start_run(turn)
            for extra in prompts[1:]:
                with processing(extra):
                    await self.on_prompt(extra, extra.message)  # type: ignore[arg-type]
        elif interrupted(self.transcript) or (self.calls is not None and self.calls.pending):
            # The run task awaits the open connector call first; the run goes on whatever the task, so it
            # takes what would start a turn for an active one.
            self.runs.start_run(queue.take_idle(When.IDLE_TASK_ACTIVE))
        elif (idle_turn := queue.take_idle()) is not None:
            self.runs.start_run(idle_turn)


def _trace(sid: str, entry: InboxEntry, dequeued: float) -> None:
    appended = int(entry.entry_id.split("-")[0]) / 1000
    done = time.time()
    log.info("inbox_entry_timing", session_id=sid, entry_id=entry.entry_id, type=entry.message.type,
             read_ms=round((entry.read_at - appended) * 1000, 1), queued_ms=round((dequeued - entry.read_at) * 1000, 1),
             handle_ms=round((done - dequeued) * 1000, 1), done=round(done, 4))


def _client_waits(entry: InboxEntry) -> bool:
    """A client is blocked on this entry's reply key (a forwarded write, a prompt to a named run)."""
    return isinstance(entry.message, REPLIED) and bool(getattr(entry.message, "request_id", None))
