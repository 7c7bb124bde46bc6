"""The recorder: engine events in, the transcript line first, then the ack, then InjectionRecorded
and the client event. What to ack comes from the protocol's pending prompts and injections (the
PendingTurn a run was given), looked up by the recorded message itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from services.runtime.engine.types import AgentEvent
from services.runtime.live.events import Outbox
from services.runtime.live.pending import PendingInjection
from services.runtime.runs.model_outcome import announce, count_usage, mark_implicit
from services.runtime.skillset.skill_lifecycle import SkillContracts
from services.runtime.store.transcript import Transcript
from services.runtime.turns.pending_queue import PendingQueue
from services.runtime.ui.forms import form_delivered
from services.runtime.ui.liveui import UiHost
from shared.contracts.records.messages import (
    AgentMessage,
    AssistantMessage,
    CustomMessage,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.streams.recorded import InjectionRecorded
from shared.redis import keys
from shared.telemetry import metrics

# Engine events that only report progress: sent without holding up the run (Outbox.event(wait=False)).
PROGRESS_EVENTS = frozenset({"agent_start", "turn_start", "message_start", "message_update", "reasoning_update",
                             "tool_call_progress", "tool_execution_start", "tool_execution_update", "model_request"})


class Recorder:
    def __init__(self, sid: str, transcript: Transcript, queue: PendingQueue, outbox: Outbox,
                 ack: Callable[[str | None], Awaitable[None]], contracts: SkillContracts,
                 ui: UiHost, registry: CollectorRegistry | None, model: Callable[[], str],
                 context: Callable[[], list[AgentMessage]],
                 snapshot: Callable[[str], Awaitable[object]] | None = None,
                 after_tool_result: Sequence[Callable[[], Awaitable[None]]] = (),
                 after_run_end: Sequence[Callable[[], Awaitable[None]]] = (),
                 after_model_message: Sequence[Callable[[], Awaitable[None]]] = ()) -> None:
        self.sid = sid
        self.transcript = transcript
        self.queue = queue  # the pending queue (pending_queue.py): what a recorded message settles
        self.outbox = outbox
        self.ack = ack
        self.contracts = contracts
        self.ui = ui
        self.registry = registry
        self.model = model  # the model name, for the request metrics
        self.context = context  # the Agent's messages, for the implicit message_user announcement
        # reason -> a workspace snapshot keyed to the leaf (services/runtime/store/snapshots.py)
        self.snapshot = snapshot
        # Called after each tool result is recorded (checklist progress, services/runtime/skillset/progress.py).
        self.after_tool_result = tuple(after_tool_result)
        # Called when a run ends, after its `agent_end` event (cost records, services/runtime/ui/costs.py).
        self.after_run_end = tuple(after_run_end)
        # Called after each model reply is recorded (the live cost records, services/runtime/ui/costs.py).
        self.after_model_message = tuple(after_model_message)

    async def emit(self, event: AgentEvent) -> None:
        """Engine events: persist on message_end (before publishing), then publish."""
        data = event.data
        if event.type == "message_end" and event.message is not None:
            mark_implicit(event.message)  # flagged before it is recorded
            prompt_id = await self._record(event.message)
            if prompt_id is not None:  # which prompt this user message carried (the AG-UI route ends its run on it)
                data = {**data, "promptId": prompt_id}
        elif event.type == "model_request" and self.registry is not None:
            self._count_request(event.data)
        elif self.snapshot is not None and (event.type == "agent_end" or (
                event.type == "turn_end" and event.data.get("toolResults"))):
            await self.snapshot("run_end" if event.type == "agent_end" else "batch")
        also = count_usage(self.sid, event.data) if event.type == "model_request" else None
        await self.outbox.event(event.type, data, also, wait=event.type not in PROGRESS_EVENTS)
        if event.type == "message_end" and event.message is not None:
            await announce(self.outbox, event.message, self.context())
            if isinstance(event.message, AssistantMessage):
                for hook in self.after_model_message:
                    await hook()
        elif event.type == "agent_end":
            for hook in self.after_run_end:
                await hook()

    def _count_request(self, d: dict[str, Any]) -> None:
        assert self.registry is not None
        metrics.model_request(self.registry, prompt_tokens=int(d.get("prompt_tokens", 0)),
                              shared_prefix_tokens=int(d.get("shared_prefix_tokens", 0)),
                              completion_tokens=int(d.get("output_tokens", 0)),
                              cached_tokens=int(d.get("cached_tokens", 0)),
                              reasoning_tokens=int(d.get("reasoning_tokens", 0)),
                              input_tokens=int(d.get("input_tokens", 0)),
                              model=self.model(), api=str(d.get("api", "")))

    async def record(self, message: AgentMessage) -> None:
        await self._record(message)

    async def _record(self, message: AgentMessage) -> str | None:
        """Records `message`; for a user message, returns the id of the prompt that carried it."""
        if isinstance(message, UserMessage):
            prompt = self.queue.take_prompt(message)
            await self.transcript.append_message(message, prompt_id=prompt.prompt_id if prompt else None)
            await self.ack(prompt.entry_id if prompt else None)
            if self.snapshot is not None:
                await self.snapshot("prompt")  # the state this message was sent in: what a rewind to it restores
            return prompt.prompt_id if prompt else None
        if isinstance(message, CustomMessage):
            await self._record_custom(message)
            return None
        await self.transcript.append_message(message)
        if isinstance(message, ToolResultMessage):
            for hook in self.after_tool_result:
                await hook()
        return None

    async def _record_custom(self, message: CustomMessage) -> None:
        # A skill the harness activated (`/skill:NAME`, a skill rule); a restored anchor is already live.
        skills = self.contracts.skills
        if message.custom_type == "gamma.active_skill" and message.details.get("skill") in skills:
            skill = skills[str(message.details["skill"])]
            if skill.name not in self.contracts.names():
                required_by = message.details.get("requiredBy")
                await self.contracts.activate(skill, required_by if isinstance(required_by, str) else None)
        entry = await self.transcript.append_custom(message)
        pending = self.queue.take_injection(message)
        if pending is None:
            return
        # Its owner hears first; a crash before the acks redelivers the entries, found recorded.
        await self._settle(pending, entry.id)
        if self.registry is not None:
            metrics.injection_delivered(self.registry, str(message.details.get("injectionType")), pending.source)
        if pending.ref and pending.to_revision is not None:
            for covered in self.queue.artifact_recorded(pending.ref, pending.to_revision):
                for e in covered.entry_ids:
                    await self.ack(e)
                await self.recorded(covered.source, covered.source_id, entry.id, covered.ref, covered.to_revision)
        if pending.source_id.startswith("form:"):
            await form_delivered(self.ui, pending.source_id.split(":")[1])

    async def _settle(self, pending: PendingInjection, entry_id: str) -> None:
        await self.recorded(pending.source, pending.source_id, entry_id, pending.ref, pending.to_revision)
        for e in pending.entry_ids:
            await self.ack(e)

    async def recorded(self, source: str, source_id: str, entry_id: str, ref: str | None,
                       to_revision: int | None) -> None:
        await self.outbox.publish(keys.INJECTIONS_RECORDED, InjectionRecorded(
            session_id=self.sid, source=source, source_id=source_id, entry_id=entry_id,  # type: ignore[arg-type]
            ref=ref, to_revision=to_revision))
        await self.outbox.event("injection", {"source": source, "sourceId": source_id, "entryId": entry_id,
                                              "ref": ref}, wait=False)
