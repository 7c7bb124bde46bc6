"""Abort and interrupt (docs/integration.md "Abort and interrupt"): end the active run at the user's request, and refuse a message or
an abort aimed at a run that has already ended (`expected_run_id`, like Codex's expectedTurnId).

An abort sets the Agent's signal: the model stream is cancelled (model/openai_stream.py), running
tools get a grace second to end on it (bash kills its process group, sandbox/runner.py) and are then
cancelled, and every tool call that did not finish gets a result saying the user stopped it
(engine/loop.py). A run that does not end within ABORT_GRACE_S (a tool that ignores the signal) is
cancelled outright and the transcript repaired the same way. Then, in the transcript, a
`gamma.run_aborted` marker: the model reads that the user stopped the run, a restart does not
continue it (`interrupted`), and an idle steer injection does not start a run on its own until the
user speaks again (`stopped_by_user`). The todo is left as it is. Messages steered or queued as
follow-ups into the aborted run (user prompts, injections) are kept, in order, for the next prompt:
they go before its user message (docs/integration.md "Abort and interrupt").
Subagents the session started stop with the run (subagent.py): each still answers, as a
background_result saying the user stopped it, with what it had found so far.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

import structlog

from services.runtime.engine.agent import Agent
from services.runtime.live.events import Outbox
from services.runtime.live.state import SessionState
from services.runtime.runs.supervisor import repair_interrupted_run
from services.runtime.store.transcript import Transcript
from services.runtime.turns.pending_queue import PendingQueue
from shared.contracts.http import AbortResult
from shared.contracts.records.messages import AssistantMessage, CustomMessage, UserMessage
from shared.contracts.records.transcript import CustomMessageEntry, LeafEntry, MessageEntry
from shared.contracts.streams.events import RunAbortedData
from shared.contracts.streams.inbox import Abort, UserPrompt
from shared.streams.inbox import InboxEntry
from shared.trust.trusted_blocks import render

log = structlog.get_logger()
AbortReason = Literal["user", "interrupt"]
ABORT_GRACE_S = 3.0  # the run ends on the signal within this, else its task is cancelled
CANCEL_WAIT_S = 5.0
MARKER = "gamma.run_aborted"
NOTES: dict[AbortReason, str] = {
    "user": "The user stopped the run (Stop) before this tool call finished; it was killed and its effects "
            "may be partial.",
    "interrupt": "The user interrupted the run with a new message before this tool call finished; it was "
                 "killed and its effects may be partial.",
}
SUBAGENT_NOTES: dict[AbortReason, str] = {
    "user": "The user stopped the run (Stop) before this subagent finished; it was stopped and its findings "
            "may be partial.",
    "interrupt": "The user interrupted the run with a new message before this subagent finished; it was "
                 "stopped and its findings may be partial.",
}
MARKER_TEXT: dict[AbortReason, str] = {
    "user": "The user stopped the previous run before it finished. Do not resume the stopped work unless "
            "the user asks for it.",
    "interrupt": "The user interrupted the previous run before it finished, with the message that follows. "
                 "Answer that message; resume the stopped work only if it asks for it.",
}


def stopped_by_user(transcript: Transcript) -> bool:
    """The last thing in the conversation is an abort marker or a rewind (a leaf move): the user stopped
    the agent, or took the session back, and has not spoken since."""
    for e in reversed(transcript.entries):
        if (isinstance(e, CustomMessageEntry) and e.custom_type == MARKER) or isinstance(e, LeafEntry):
            return True
        if isinstance(e, MessageEntry):
            return False
    return False


def last_message_is_user(transcript: Transcript) -> bool:
    last = next((e for e in reversed(transcript.entries) if isinstance(e, MessageEntry)), None)
    return last is not None and isinstance(last.message, UserMessage)


def marker(run_id: str, reason: AbortReason) -> CustomMessage:
    return CustomMessage(custom_type=MARKER, content=render("run_aborted", None, MARKER_TEXT[reason]),
                         details={"trusted": True, "injectionType": "run_aborted", "source": "system",
                                  "runId": run_id, "reason": reason})


class SubagentStopper(Protocol):
    async def stop(self, note: str, grace_s: float) -> int: ...


class HeldBack(Protocol):
    """The run supervisor (supervisor.py), the only writer of the run's state: while an abort is on,
    no further run starts."""

    def held_back(self, reason: str) -> AbstractContextManager[None]: ...


class RunAborter:
    def __init__(self, state: SessionState, runs: HeldBack, agent: Agent, queue: PendingQueue, transcript: Transcript,
                 outbox: Outbox, subagents: SubagentStopper, ack: Callable[[str | None], Awaitable[None]], *,
                 reload: Callable[[], None]) -> None:
        self.state = state  # read: the run task and its ids (state.py)
        self.runs = runs
        self.agent = agent
        self.queue = queue  # the pending queue (pending_queue.py): what the run's queues held is kept
        self.reload = reload  # the model context from the transcript (turn_order.py `restore_context`)
        self.transcript = transcript
        self.outbox = outbox
        self.subagents = subagents  # stopped with the run (subagent.py)
        self.ack = ack

    @property
    def active_run_id(self) -> str | None:
        return self.state.run_id if self.state.running else None

    async def abort(self, reason: AbortReason) -> RunAbortedData | None:
        """End the active run; None when there is none. Returns once the run task has ended and the
        transcript is ready for the next run."""
        state = self.state
        task = state.run_task
        if task is None or task.done():
            # A subagent can outlive the run that started it: the Stop still reaches it.
            await self.subagents.stop(SUBAGENT_NOTES[reason], ABORT_GRACE_S)
            return None
        run_id = state.run_id or state.last_run_id or ""
        with self.runs.held_back(reason):
            self.agent.abort(NOTES[reason])
            await asyncio.gather(self._end(task, run_id), self.subagents.stop(SUBAGENT_NOTES[reason], ABORT_GRACE_S))
            kept = await self._settle(run_id, reason)
            data = RunAbortedData(run_id=run_id, reason=reason, kept=kept)
            await self.outbox.event("run_aborted", data.model_dump())
            log.info("run_aborted", session_id=state.sid, run_id=run_id, reason=reason, kept=kept)
            return data

    async def _end(self, task: asyncio.Task[None], run_id: str) -> None:
        done, _ = await asyncio.wait({task}, timeout=ABORT_GRACE_S)
        if not done:
            log.warning("abort_cancels_run", session_id=self.state.sid, run_id=run_id)
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_WAIT_S)

    async def _settle(self, run_id: str, reason: AbortReason) -> int:
        """Every started tool call has a result, the marker is recorded, the queued messages wait
        for the next prompt, and the context is the transcript's."""
        await repair_interrupted_run(self.transcript, NOTES[reason])
        if last_message_is_user(self.transcript):
            # Stopped before the model's first word (or its run cancelled outright): the prompt gets an
            # empty aborted answer, so no user message is left without one (the context skips it).
            await self.transcript.append_message(AssistantMessage(stop_reason="aborted"))
        kept = self.queue.keep_aborted()  # first in the next turn, in order
        await self.transcript.append_custom(marker(run_id, reason))
        self.reload()
        return kept

    # ------------------------------------------------------------ inbox

    async def on_abort(self, entry: InboxEntry, m: Abort) -> None:
        active = self.active_run_id
        if m.expected_run_id is not None and active != m.expected_run_id:
            await self.outbox.reply(m.request_id, 409, stale_body(m.expected_run_id, active))
        else:
            data = await self.abort("user")
            result = AbortResult(aborted=data is not None, run_id=data.run_id if data else None,
                                 kept=data.kept if data else 0)
            await self.outbox.reply(m.request_id, 200, result.model_dump())
        await self.ack(entry.entry_id)

    async def refuse_stale(self, entry: InboxEntry, m: UserPrompt) -> bool:
        """A prompt aimed at a run that is no longer the active one: answered 409 and acked, nothing
        queued. True when refused."""
        active = self.active_run_id
        if m.expected_run_id is None or active == m.expected_run_id:
            return False
        if m.request_id:
            await self.outbox.reply(m.request_id, 409, stale_body(m.expected_run_id, active))
        await self.ack(entry.entry_id)
        return True

    async def accepted(self, m: UserPrompt) -> None:
        if m.request_id:
            await self.outbox.reply(m.request_id, 202, {"run_id": self.active_run_id})


def stale_message(expected: str, active: str | None) -> str:
    """The 409 text (the proxy words its own the same way: services/proxy/routes/runs.py)."""
    return f"run {expected} is no longer active" + (f"; the active run is {active}" if active else "; no run is active")


def stale_body(expected: str, active: str | None) -> dict[str, Any]:
    return {"error": stale_message(expected, active), "detail": {"run_id": active}}
