"""The run supervisor: one run task per session, which starts the next run itself while anything is
left to do, and recovers a run cut by a Redis failure from what is durable (the transcript)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Iterator
from typing import Any, Literal, Protocol

import structlog

from services.runtime.engine.agent import Agent
from services.runtime.engine.spans import run_span
from services.runtime.live.lease import LeaseLost
from services.runtime.live.pending import PendingTurn
from services.runtime.live.state import RunState, SessionState
from services.runtime.runs.ack import TRANSIENT
from services.runtime.runs.turn_starts import FREE, StartGate, StartPass
from services.runtime.store.transcript import Transcript
from services.runtime.turns.pending_queue import PendingQueue
from shared.contracts.base import new_id
from shared.contracts.records.messages import AssistantMessage, TextContent, ToolResultMessage, UserMessage
from shared.contracts.records.transcript import CustomMessageEntry, LeafEntry, MessageEntry
from shared.contracts.streams.events import EventType
from shared.redis import keys
from shared.storage.disk import storage_fault
from shared.telemetry.tracing import recorded_traceparent

log = structlog.get_logger()
# What a run starts from: a PendingTurn (new messages), None (continue the context as it is: an
# interrupted run), or "queued" (the Agent's steer / follow-up queues).
RunInput = PendingTurn | Literal["queued"] | None
RunOutcome = Literal["done", "stop", "transient"]
ABORT_MARKER = "gamma.run_aborted"  # the transcript entry an abort leaves (services/runtime/inbox/abort.py)
INTERRUPTED = ("Interrupted: the session's worker restarted before this tool finished. Check its effect "
               "before repeating it.")


class AfterRun(Protocol):
    async def after_run(self) -> None: ...


class RunOutbox(Protocol):
    """The session's outbox as a run uses it (events.py): the status events, and the run's id and
    traceparent, which every event of the run carries."""

    def for_run(self, run_id: str | None, traceparent: str | None = None) -> None: ...

    async def event(self, type: EventType, data: dict[str, Any] | None = None, also: Any = None, *,
                    wait: bool = True) -> str | None: ...


class Held(Protocol):
    """The session's lease (lease.py)."""

    @property
    def lost(self) -> bool: ...

    @property
    def fence(self) -> int: ...


class OpenCalls(Protocol):
    async def await_pending(self) -> bool: ...


async def repair_interrupted_run(transcript: Transcript, note: str = INTERRUPTED,
                                 pending: Collection[str] = ()) -> None:
    """A holder that died mid-batch (or a run cancelled by an abort) left tool calls without results:
    give each one (every tool call gets a result), so the context stays valid and the run can continue.
    `pending`: calls whose answer is still to come (a connector's, services/runtime/connector/connectors.py): the
    run task appends their result before the run goes on."""
    answered: set[str] = set()  # results after the last assistant message: only its calls can lack one
    for m in reversed(transcript.context()):
        if isinstance(m, ToolResultMessage):
            answered.add(m.tool_call_id)
        if isinstance(m, AssistantMessage):
            for call in m.tool_calls():
                if call.id not in answered and call.id not in pending:
                    await transcript.append_message(ToolResultMessage(
                        tool_call_id=call.id, tool_name=call.name, is_error=True,
                        content=[TextContent(text=note)]))
            break


def interrupted(transcript: Transcript) -> bool:
    """The transcript ends inside a run: its last message is a user message or a tool result that
    did not end the run (message_user with blockOnUser ends it). A run the user aborted is not one,
    nor a branch the user rewound to (it waits for the user's next message)."""
    if transcript.entries and isinstance(transcript.entries[-1], LeafEntry):
        return False
    last_entry = next((e for e in reversed(transcript.entries) if isinstance(e, MessageEntry) or (
        isinstance(e, CustomMessageEntry) and e.custom_type == ABORT_MARKER)), None)
    last = last_entry.message if isinstance(last_entry, MessageEntry) else None
    if isinstance(last, UserMessage):
        return True
    if isinstance(last, ToolResultMessage):
        return not (last.details or {}).get("blockOnUser")
    return False


class RunSupervisor:
    def __init__(self, state: SessionState, run: RunState, lease: Held, outbox: RunOutbox, agent: Agent,
                 queue: PendingQueue, transcript: Transcript, *, reload: Callable[[], None], client: Any,
                 lease_ms: int, after_run: AfterRun, calls: OpenCalls | None = None,
                 after_task: Callable[[], None] = lambda: None, starts: StartGate | None = None) -> None:
        self.state = state  # read: the session's id, whether it is closed (state.py)
        self.run = run  # written here only: the run task, its ids and `aborting` (state.py)
        self.lease = lease
        self.outbox = outbox
        self.agent = agent
        self.queue = queue  # the pending queue (pending_queue.py): what is left to run
        self.reload = reload  # the model context from the transcript (turn_order.py `restore_context`)
        self.transcript = transcript
        self.client = client  # Redis: pinged until it answers after a failed run
        self.lease_ms = lease_ms
        self.after_run = after_run  # the compactor: deferred results are applied between runs
        self.calls = calls  # connector calls a dead holder sent (connectors.py)
        self.after_task = after_task  # what a run task ended with held is recorded (idle.py)
        self.starts = starts  # the worker's pacing of turn starts (turn_starts.py)
        self.start_pass: StartPass = FREE  # the current run's, until its model request is open

    def model_opened(self) -> None:
        """The run's model request is open: its start is over (OpenAIStream's `opened`)."""
        self.start_pass.release()

    @contextlib.contextmanager
    def held_back(self, reason: str) -> Iterator[None]:
        """An abort (abort.py) is on: no further run starts until it is done."""
        self.run.aborting = reason
        try:
            yield
        finally:
            self.run.aborting = None

    def _gone(self) -> bool:
        return self.state.closed or self.lease.lost

    def start_run(self, turn: PendingTurn | None) -> None:
        if self.state.running:
            # A turn built for the idle session, a run started meanwhile: it joins that run where
            # delivery_rules.py `decide` says; the run task takes it before it ends (`left_to_run`).
            if turn is not None:
                self.queue.join_run(turn)
            return
        self.run.run_task = task = asyncio.ensure_future(self._run(turn))
        task.add_done_callback(lambda _: self.after_task())

    async def _run(self, turn: RunInput) -> None:
        """One run task. When a run ends it starts the next one itself while anything is left to do
        (Pi: after a run, queued steering or follow-ups continue with another run). Messages that
        arrive after the loop stopped polling but before this task ends (during the `running` key
        delete, the status event, a deferred compaction) see `running` still true and are queued, so
        the check below, with no await between it and the task's end, is what picks them up."""
        while True:
            outcome = await self.run_once(turn)
            if outcome == "stop" or self.state.aborting:
                return
            if outcome == "transient":
                go_on, resumed = await self.recover(turn)
                if not go_on:
                    return
                turn = resumed  # the run was cut by a Redis failure: go on from what is durable
                continue
            next_input = self.left_to_run()
            if next_input is None:
                return
            turn = next_input

    async def _wait_for_redis(self) -> bool:
        delay = 0.2
        while not self._gone():
            try:
                await self.client.ping()
                return True
            except TRANSIENT:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        return False

    async def _repair_when_disk_allows(self) -> bool:
        """Close the interrupted run in the transcript; a full or failing disk is waited for as long
        as the lease holds (the run resumes by itself when it is back, README "Reliability")."""
        delay = 0.2
        while True:
            try:
                await repair_interrupted_run(self.transcript)
                return True
            except LeaseLost:
                return False
            except TRANSIENT as exc:
                if storage_fault(exc) is None or self._gone():
                    return False
                log.warning("run_waits_for_disk", session_id=self.state.sid, error=str(storage_fault(exc)))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def recover(self, failed: RunInput) -> tuple[bool, RunInput]:
        """After a run failed on Redis: wait until Redis answers, rebuild the context from what is
        durable (the transcript), give every unanswered tool call a result, and requeue injections
        the failed run had taken but not recorded. Returns (go on, what to run next): continue (None)
        when the transcript ends inside the run, the failed run's unrecorded user messages (with what
        is queued for the next turn) when the failure came before them, else what is left to run."""
        if not await self._wait_for_redis():
            return False, None
        if not await self._repair_when_disk_allows():
            # Still held (or about to be dropped): what the failed run took stays deliverable, else a
            # redelivered entry merges into a record no queue holds and is never recorded (stuck).
            self.queue.requeue_untaken()
            return False, None
        queue = self.queue
        self.reload()
        own = failed.messages if isinstance(failed, PendingTurn) else []
        queue.rejoin_untaken(own)  # prompts steered or followed up into the failed run: the next run's again
        queue.requeue_untaken()
        if interrupted(self.transcript):
            return True, None
        unrecorded = [m for m in own if queue.prompt_of(m) is not None]
        if unrecorded:
            return True, queue.take_next_turn(unrecorded)
        left = self.left_to_run()
        return left is not None, left

    def left_to_run(self) -> RunInput | None:
        """What a finished run leaves queued: the Agent's steer / follow-up queues (prompts and
        injections steered into the run), else steer / follow-up injections the protocol holds for
        an idle session, which start a turn only for an active task. After a yield the queues are
        not run as they are: their injections are held by those idle rules, and a prompt among them
        (the user spoke) starts a new user turn (docs/architecture.md "Delivery, yield and the idle rules")."""
        if self._gone() or self.state.aborting:
            return None
        queue = self.queue
        if self.agent.yielded:
            if queue.hold_queued():
                return queue.take_user_turn()
        elif self.agent.has_queued():
            return "queued"
        return queue.take_idle()  # what the idle rules start now (delivery_rules.py), else nothing

    async def _status(self, running: bool, *, wait: bool) -> None:
        sid = self.state.sid
        run_id = self.state.run_id or ""
        also = ((lambda pipe: pipe.set(keys.running(sid), run_id, px=self.lease_ms)) if running
                else (lambda pipe: pipe.delete(keys.running(sid))))
        await self.outbox.event("status", {"status": "live", "running": running, "fence": self.lease.fence,
                                             "run_id": self.state.run_id}, also=also, wait=wait)

    async def _drive(self, turn: RunInput) -> None:
        agent = self.agent
        # Connector calls a dead holder sent, still unanswered at the wake: their results come first
        # (the run waits for them, never the wake), and prompts arriving meanwhile queue behind them.
        if self.calls is not None and await self.calls.await_pending():
            self.reload()  # the model context takes the results the transcript got
        if self.starts is not None:
            # Its wait ends on an abort (the Agent's signal, while a previous abort has not left it set).
            signal = agent.signal
            self.start_pass = await self.starts.enter(None if signal.is_set() else signal)
        # No await between this check and the Agent taking the run (it clears the abort signal when a
        # run starts): an abort that came before is seen here, one that comes after sets the signal.
        if self.state.aborting:
            return
        if turn == "queued":
            await agent.run_queued()
        elif turn is None:
            await agent.continue_()
        else:
            await agent.prompt(turn.messages)
        while agent.has_queued() and not agent.yielded and not self.state.closed and not self.state.aborting:
            await agent.run_queued()  # a steer that arrived as the loop stopped (a yield holds: `left_to_run`)

    async def run_once(self, turn: RunInput) -> RunOutcome:
        """One agent run: "stop" when the session must not run again (the lease is gone),
        "transient" when it failed on Redis (see `recover`). In a span of its own, a child of the
        span current when the run task started (the prompt's inbox entry); while the span is
        recorded its traceparent rides beside every event of the run (the SSE delivery span)."""
        run_id = self.run.run_id = self.run.last_run_id = new_id("run_")
        with run_span(self.state.sid, run_id) as span:
            traceparent = recorded_traceparent(span)
            self.outbox.for_run(run_id, traceparent)
            try:
                outcome = await self._run_once(turn, traceparent)
            finally:
                self.outbox.for_run(None)
            span.set_attribute("gamma.run.outcome", outcome)
        return outcome

    async def _run_once(self, turn: RunInput, traceparent: str | None) -> RunOutcome:
        outcome: RunOutcome = "done"
        try:
            with contextlib.suppress(*TRANSIENT):  # informational; the housekeeping refreshes the key
                # Queued like a progress event: the run does not wait for it, and the end-of-run
                # status (awaited) goes out after it.
                await self._status(True, wait=False)
            await self._drive(turn)
        except LeaseLost:
            log.warning("lease_lost_during_run", session_id=self.state.sid)
            return "stop"
        except asyncio.CancelledError:
            raise
        except TRANSIENT as exc:
            if storage_fault(exc) is not None:  # the disk full or failing: no traceback, the cause
                log.warning("run_interrupted_by_disk", session_id=self.state.sid, error=str(storage_fault(exc)))
            else:
                log.exception("run_interrupted_by_redis", session_id=self.state.sid)
            outcome = "transient"
        except Exception:  # noqa: BLE001 - the worker survives a broken run
            log.exception("run_failed", session_id=self.state.sid)
            self.queue.requeue_untaken()  # injections the broken run took go to the next turn
            with contextlib.suppress(Exception):
                await self.outbox.event("error", {"error": "run failed"})
        finally:
            self.start_pass.release()  # a run that ended before its model request opened
            self.run.ended_at = asyncio.get_running_loop().time()  # the idle clock (state.py)
            if not self._gone():  # a taken lease: the new holder speaks now
                with contextlib.suppress(Exception):  # through the outbox: after the queued SET running
                    await self._status(False, wait=True)
            self.run.run_id = None
            self.outbox.for_run(None, traceparent)  # what follows the run (a compaction) stays in its trace
        if not self._gone() and outcome == "done":
            try:
                await self.after_run.after_run()
            except LeaseLost:
                return "stop"
        return outcome
