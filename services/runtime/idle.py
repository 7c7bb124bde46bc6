"""Idle recording (issue 20): an update for an idle agent is recorded at once, not held for the next turn.

Held for the next turn, a digest's artifact_update or a notification for a session with no run waited
for the user's next prompt (seconds in bench-e2e, unbounded in real use): its owner heard "recorded"
late and the digest kept the change in flight. Once the wake barrier has passed and no run is active,
each held steer / follow-up injection is appended to the transcript (fsynced), then added to the
Agent's context where the next turn's prompt messages would have put it (the next model call sees the
same messages in the same order, so the cached prefix holds), and only then is its inbox entry acked
and its owner told (the Recorder, as for a run). An update that starts a run (an active task) still
does; next-turn-only kinds (client_view, system_note) still wait for a prompt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from shared.contracts.messages import AgentMessage

from .engine.agent import Agent
from .protocol import SessionProtocolController
from .transcript import Transcript

Record = Callable[[AgentMessage], Awaitable[None]]


class IdleHost(Protocol):
    agent: Agent
    protocol: SessionProtocolController
    transcript: Transcript
    barrier_passed: bool

    @property
    def running(self) -> bool: ...


class IdleRecorder:
    def __init__(self, host: IdleHost, record: Record) -> None:
        self.h = host
        self.record = record  # Recorder.record: the transcript line, then the owner, then the acks

    async def flush(self, *, in_run_task: bool = False) -> int:
        """Record what is held for an idle session; returns how many messages were recorded.
        `in_run_task`: called by the run task itself as it ends (no run is active, yet the task is)."""
        h = self.h
        # Before the barrier the held updates go with the woken prompt; a run takes them itself.
        if not h.barrier_passed or h.agent.is_running or (h.running and not in_run_task):
            return 0
        anchor_before = h.protocol.anchor_revision
        messages = h.protocol.take_recordable()
        for i, m in enumerate(messages):
            written = len(h.transcript.entries)
            try:
                await self.record(m)
            except BaseException:
                if len(h.transcript.entries) > written:  # in the transcript, only its acks failed
                    h.agent.add_idle(m)
                    i += 1
                self._requeue(messages[i:], anchor_before)
                raise
            h.agent.add_idle(m)
        return len(messages)

    def _requeue(self, left: list[AgentMessage], anchor_before: int | None) -> None:
        """Not recorded (a lost lease, Redis or the disk failing): back to the front of the next-turn
        list, still pending with their inbox entries, so a retry or the next turn records them."""
        p = self.h.protocol
        held = [m for m in left if p.pending_of(m) is not None]
        if len(held) < len(left):
            p.anchor_revision = anchor_before  # the todo anchor was not recorded: the next turn brings it
        p.next_turn = [*held, *p.next_turn]
