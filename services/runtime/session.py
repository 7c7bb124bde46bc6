"""One live session: restored state, the Agent, the protocol controller, the inbox handlers.

Inbox entries are handled one at a time per session (a per-session queue), while a run executes as
its own task, so steers and UI updates are handled during a run. Every disk write checks the lease
first; an inbox entry is acked only once its effect is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from openai import AsyncOpenAI
from prometheus_client import CollectorRegistry
from redis.exceptions import RedisError

from shared import keys, metrics
from shared.blobs import write_blob
from shared.bus import dead_letter
from shared.contracts.artifacts import ArtifactChange
from shared.contracts.inbox import (
    Barrier,
    Compact,
    CompactionReady,
    DocumentEdit,
    FileWrite,
    InboxMessage,
    Injection,
    Stop,
    UiUpdate,
    UserPrompt,
)
from shared.contracts.messages import (
    AgentMessage,
    AssistantMessage,
    CustomMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.recorded import InjectionRecorded
from shared.contracts.todo import TodoList
from shared.contracts.transcript import MessageEntry
from shared.disk import SessionPaths, atomic_write_json, read_json, workspace_files
from shared.inbox import InboxEntry
from shared.quota import WorkspaceQuota
from shared.settings import Settings
from shared.tokens import TokenCounter
from shared.uirules import UiLimits, repair_snapshot

from .engine.agent import Agent
from .engine.openai_stream import ModelSettings, OpenAIStream
from .engine.types import AgentContext, AgentEvent, LoopConfig
from .events import Outbox
from .failures import refusal, transient
from .forms import deliver_answered_form, form_delivered
from .lease import Lease, LeaseLost
from .manifest import queue_manifest
from .model_outcome import announce, count_usage, mark_implicit
from .paths import skills_dir
from .protocol import SessionProtocolController, TurnInput
from .sandbox import select_sandbox
from .skills import Skill
from .todo import TodoController
from .tools import Toolset
from .transcript import Transcript
from .uistate import UiDoc
from .writes import WriteHandlers

log = structlog.get_logger()
BARRIER_WAIT_S = 3.0
# Failures that may pass (a Redis restart, a dropped connection): retried, never dead-lettered. The inbox
# loop retries only what `failures.transient` accepts (no disk error a retry cannot fix).
TRANSIENT = (RedisError, OSError)
RETRY_FOR_S = 60.0
# Engine events that only report progress: sent without holding up the run (Outbox.event(wait=False)).
PROGRESS_EVENTS = frozenset({"agent_start", "turn_start", "message_start", "message_update",
                             "tool_execution_start", "tool_execution_update", "model_request"})
# What a run starts from: new messages, None (continue the context as it is: an interrupted run),
# or "queued" (the Agent's steer / follow-up queues).
RunInput = list[AgentMessage] | Literal["queued"] | None


@dataclass
class SessionDeps:
    settings: Settings
    client: Any  # redis.asyncio.Redis
    model_client: AsyncOpenAI
    skills: Mapping[str, Skill]
    system_prompt: str
    counter: TokenCounter
    ack: Any  # async (sid, entry_id) -> None
    static_prefix: str = ""
    preloaded: tuple[Skill, ...] = ()  # the variant's preloaded skills, recorded at session start
    registry: CollectorRegistry | None = None  # the service's Prometheus registry
    # (sid, reason) -> None: the worker closes the session now (persist, release the lease, then
    # answer the Stop); without it a Stop is answered at once and closed by the next housekeeping.
    request_close: Any = None


class Session:
    def __init__(self, deps: SessionDeps, paths: SessionPaths, lease: Lease, outbox: Outbox,
                 model: ModelSettings, wake_id: str) -> None:
        self.deps = deps
        self.sid = lease.sid
        self.paths = paths
        self.lease = lease
        self.outbox = outbox
        self.wake_id = wake_id
        self.max_file_bytes = deps.settings.max_file_bytes
        self.ui_limits = UiLimits.of(deps.settings)
        self.workspace_quota = WorkspaceQuota.from_settings(deps.settings)
        self.sandbox = select_sandbox(deps.settings, skills_dir())  # probed once per process
        self.skills = deps.skills
        self.transcript = Transcript.load(paths.transcript, self.guard)
        self.todo = TodoController.load(paths.todo, self.guard)
        self._ui: UiDoc | None = None  # built from state.json on first use (see `ui`)
        self.viewable_files: list[str] = workspace_files(paths.workspace)  # server-owned projection
        self.toolset = Toolset(self)
        self.stream = OpenAIStream(deps.model_client, model, deps.counter, static_prefix=deps.static_prefix)
        config = LoopConfig(stream=self.stream, prepare_batch=self.toolset.prepare_batch)
        self.agent = Agent(AgentContext(deps.system_prompt, [], self.toolset.tools), config, self.emit)
        self.protocol = SessionProtocolController(self.agent, self.transcript, self.todo, deps.skills,
                                                  lambda: self.todo.has_active_task)
        self.writes = WriteHandlers(self, after_ui_sync=lambda: deliver_answered_form(self))
        self.queue: asyncio.Queue[InboxEntry] = asyncio.Queue()
        self.run_task: asyncio.Task[None] | None = None
        self.loop_task: asyncio.Task[None] | None = None
        self.held: list[InboxEntry] = []  # prompts held until the wake barrier
        self.barrier_passed = False
        self.last_activity = asyncio.get_running_loop().time()
        self.closed = False
        self.stop_requested: str | None = None
        self.stop_replies: list[str] = []  # Stop request ids, answered once the lease is released
        self.compactor: Any = None  # set by the worker (services.runtime.compactor)
        self.background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ lifecycle

    async def restore(self) -> None:
        if not self.transcript.entries:
            await self.transcript.ensure_header()
            for skill in self.deps.preloaded:  # a preloaded workflow skill is as active as a loaded one
                await self.transcript.append_skill(skill.name, skill.type, None, preloaded=True)
        await self._repair_interrupted_run()
        self.protocol.restore_context()

    async def _repair_interrupted_run(self) -> None:
        """A holder that died mid-batch left tool calls without results: give each one (every tool
        call gets a result), so the context stays valid and the run can continue."""
        context = self.transcript.context()
        answered: set[str] = set()  # results after the last assistant message: only its calls can lack one
        for m in reversed(context):
            if isinstance(m, ToolResultMessage):
                answered.add(m.tool_call_id)
            if isinstance(m, AssistantMessage):
                for call in m.tool_calls():
                    if call.id not in answered:
                        await self.transcript.append_message(ToolResultMessage(
                            tool_call_id=call.id, tool_name=call.name, is_error=True,
                            content=[TextContent(text="Interrupted: the session's worker restarted before this "
                                                      "tool finished. Check its effect before repeating it.")]))
                break

    def interrupted(self) -> bool:
        """The transcript ends inside a run: its last message is a user message or a tool result that
        did not end the run (message_user with blockOnUser ends it)."""
        last = next((e.message for e in reversed(self.transcript.entries) if isinstance(e, MessageEntry)), None)
        if isinstance(last, UserMessage):
            return True
        if isinstance(last, ToolResultMessage):
            return not (last.details or {}).get("blockOnUser")
        return False

    @property
    def ui(self) -> UiDoc:
        """The UI document, rebuilt from state.json when first needed (a UI sync, a tool, the barrier's
        form check), not on the wake path. Safe to read late: once the lease is held and the proxy's
        dormant-write lock is gone, only this holder writes state.json."""
        if self._ui is None:
            self._ui = UiDoc.from_snapshot(repair_snapshot(read_json(self.paths.state)), self.ui_limits)
        return self._ui

    async def guard(self) -> None:
        if self.closed:
            raise LeaseLost(self.sid)
        await self.lease.check()

    def touch(self) -> None:
        self.last_activity = asyncio.get_running_loop().time()

    @property
    def running(self) -> bool:
        return self.run_task is not None and not self.run_task.done()

    def idle_for(self) -> float:
        if self.running or self.held or not self.queue.empty():
            return 0.0
        return asyncio.get_running_loop().time() - self.last_activity

    async def process_forever(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BARRIER_WAIT_S
        while not self.closed:
            timeout = max(deadline - loop.time(), 0.05) if not self.barrier_passed else None
            try:
                entry = await asyncio.wait_for(self.queue.get(), timeout)
            except TimeoutError:
                await self._pass_barrier()  # no Barrier within 3 s: go on without it
                continue
            self.touch()
            try:
                await self._handle_retrying(entry)
            except LeaseLost:
                log.warning("lease_lost", session_id=self.sid)
                return
            except Exception as exc:  # noqa: BLE001 - one bad entry must not stop the session
                if transient(exc):
                    # Still failing after RETRY_FOR_S: the entry stays pending; the next holder retries it.
                    log.exception("inbox_entry_gave_up", session_id=self.sid, entry_id=entry.entry_id)
                else:
                    log.exception("inbox_entry_failed", session_id=self.sid, entry_id=entry.entry_id)
                    await self._dead_letter(entry, exc)

    async def _handle_retrying(self, entry: InboxEntry) -> None:
        """Handle one entry; on a transient failure (Redis restarting, a dropped connection) retry
        it here, in order, with backoff. Handlers are idempotent: a prompt or injection already
        recorded is only acked, a file or deck write rewrites the same content, a Yjs update merges."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + RETRY_FOR_S
        delay = 0.1
        while True:
            try:
                await self.handle(entry)
                return
            except Exception as exc:
                if not transient(exc) or self.closed or self.lease.lost or loop.time() + delay > give_up:
                    raise
                log.warning("inbox_entry_retry", session_id=self.sid, entry_id=entry.entry_id, delay_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _dead_letter(self, entry: InboxEntry, exc: Exception) -> None:
        """An entry that can never succeed (a handler bug, a disk error no retry fixes): answer a
        waiting client at once, park the entry in gamma:deadletter and ack, so it cannot block the
        session or be retried at every wake."""
        request_id = getattr(entry.message, "request_id", None)
        if isinstance(entry.message, UiUpdate | FileWrite | DocumentEdit | Stop | Compact) and request_id:
            status, message = refusal(exc)
            with contextlib.suppress(Exception):
                await self.outbox.reply(request_id, status, {"error": message})
        with contextlib.suppress(Exception):
            m = entry.message
            await dead_letter(self.deps.client, keys.inbox(self.sid), keys.RUNTIME_GROUP, entry.entry_id,
                              {"type": m.type, "data": m.model_dump_json()}, f"{type(exc).__name__}: {exc}", 1)
            await self.ack(entry.entry_id)

    # ------------------------------------------------------------ inbox

    async def handle(self, entry: InboxEntry) -> None:
        m: InboxMessage = entry.message
        if isinstance(m, UserPrompt):
            await self._on_prompt(entry, m)
        elif isinstance(m, Injection):
            await self.on_injection(entry, m)
        elif isinstance(m, Barrier):
            if m.wake_id == self.wake_id:  # a barrier of an earlier wake (claimed from a dead holder) is moot
                await self._pass_barrier()
            await self.ack(entry.entry_id)
        elif isinstance(m, UiUpdate):
            await self.writes.ui_update(entry, m)
        elif isinstance(m, FileWrite):
            await self.writes.file_write(entry, m)
        elif isinstance(m, DocumentEdit):
            await self.writes.document_edit(entry, m)
        elif isinstance(m, CompactionReady):
            if self.compactor is not None:
                await self.compactor.on_ready(entry, m)
        elif isinstance(m, Compact):
            if self.compactor is not None:
                await self.compactor.on_command(entry, m)
        elif isinstance(m, Stop):
            # Answered only once the lease is gone (worker.close): a client told "dormant" must find
            # the session dormant, and may write dormant state at once.
            self.stop_requested = m.reason
            if self.deps.request_close is None:
                await self.outbox.reply(m.request_id, 200, {"status": "dormant"})
            else:
                self.stop_replies.append(m.request_id)
            await self.ack(entry.entry_id)
            if self.deps.request_close is not None:
                self.deps.request_close(self.sid, m.reason)

    async def ack(self, entry_id: str | None) -> None:
        """Ack once the effect is durable. A failed ack never undoes the effect or stops a run: the
        ack is retried in the background, and until it lands a redelivery is deduplicated."""
        if not entry_id:
            return
        try:
            await self.deps.ack(self.sid, entry_id)
        except TRANSIENT:
            log.warning("ack_failed_retrying", session_id=self.sid, entry_id=entry_id)
            t = asyncio.ensure_future(self._ack_later(entry_id))
            self.background.add(t)
            t.add_done_callback(self.background.discard)

    async def _ack_later(self, entry_id: str) -> None:
        delay = 0.2
        for _ in range(12):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            with contextlib.suppress(*TRANSIENT):
                await self.deps.ack(self.sid, entry_id)
                return

    async def _on_prompt(self, entry: InboxEntry, m: UserPrompt) -> None:
        if m.prompt_id in self.transcript.prompts:
            await self.ack(entry.entry_id)  # a redelivered prompt: already recorded
            return
        if not self.barrier_passed:
            self.held.append(entry)
            return
        if self.running:
            if m.on_busy == "reject":
                await self.outbox.event("error", {"error": "busy", "promptId": m.prompt_id})
                await self.ack(entry.entry_id)
                return
            for message in self.protocol.busy_turn_messages(m, entry.entry_id):
                (self.agent.follow_up if m.on_busy == "follow_up" else self.agent.steer)(message)
            return
        self.start_run(self.protocol.build_turn_messages(TurnInput(prompt=m, entry_id=entry.entry_id,
                                                                   restore_todo=True)))

    async def on_injection(self, entry: InboxEntry, m: Injection) -> None:
        result = self.protocol.route_update(m, entry.entry_id, hold=not self.barrier_passed)
        if result == "recorded":
            # Already consumed (a redelivery): tell the owner again, it may have missed it.
            entry_id = self.transcript.sources[(m.source, m.source_id)]
            await self._recorded(m.source, m.source_id, entry_id, m.ref, m.to_revision)
            await self.ack(entry.entry_id)
        elif result == "covered" and m.ref:
            # Everything it reports is in an artifact_update already recorded: that entry answers for it.
            await self._recorded(m.source, m.source_id, self.transcript.told[m.ref][1], m.ref, m.to_revision)
            await self.ack(entry.entry_id)
        elif result == "start" and not self.running:
            self.start_run(self.protocol.take_idle())

    async def _pass_barrier(self) -> None:
        if self.barrier_passed:
            return
        self.barrier_passed = True
        queue_manifest(self)  # pending_artifacts.json: dormant artifact changes, before the prompt
        await deliver_answered_form(self)  # answers given while dormant, restored from state.json
        held, self.held = self.held, []
        prompts = [e for e in held if isinstance(e.message, UserPrompt)]
        if prompts:
            first = prompts[0]
            assert isinstance(first.message, UserPrompt)
            self.start_run(self.protocol.build_turn_messages(TurnInput(prompt=first.message, entry_id=first.entry_id,
                                                                       restore_todo=True)))
            for extra in prompts[1:]:
                await self._on_prompt(extra, extra.message)  # type: ignore[arg-type]
        elif self.interrupted():
            self.start_run(self.protocol.take_idle() or None)  # a run cut by a dead worker continues
        elif self.todo.has_active_task and self.protocol.take_idle_peek():
            self.start_run(self.protocol.take_idle())

    # ------------------------------------------------------------ runs

    def start_run(self, messages: list[AgentMessage] | None) -> None:
        if self.running:
            for m in messages or []:
                self.agent.steer(m)  # the run task takes them before it ends (`_left_to_run`)
            return
        self.run_task = asyncio.ensure_future(self._run(messages))

    async def _run(self, messages: RunInput) -> None:
        """One run task. When a run ends it starts the next one itself while anything is left to do
        (Pi: after a run, queued steering or follow-ups continue with another run). Messages that
        arrive after the loop stopped polling but before this task ends (during the `running` key
        delete, the status event, a deferred compaction) see `running` still true and are queued, so
        the check below, with no await between it and the task's end, is what picks them up."""
        while True:
            outcome = await self._run_once(messages)
            if outcome == "stop":
                return
            if outcome == "transient":
                go_on, resumed = await self._recover_run(messages)
                if not go_on:
                    return
                messages = resumed  # the run was cut by a Redis failure: go on from what is durable
                continue
            next_input = self._left_to_run()
            if next_input is None:
                return
            messages = next_input

    async def _recover_run(self, failed: RunInput) -> tuple[bool, RunInput]:
        """After a run failed on Redis: wait until Redis answers, rebuild the context from what is
        durable (the transcript), give every unanswered tool call a result, and requeue injections
        the failed run had taken but not recorded. Returns (go on, what to run next): continue (None)
        when the transcript ends inside the run, the failed run's unrecorded user messages (with what
        is queued for the next turn) when the failure came before them, else what is left to run."""
        delay = 0.2
        while not (self.closed or self.lease.lost):
            try:
                await self.deps.client.ping()
                break
            except TRANSIENT:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        if self.closed or self.lease.lost:
            return False, None
        try:
            await self._repair_interrupted_run()
        except (LeaseLost, *TRANSIENT):
            return False, None
        self.protocol.restore_context()
        own = failed if isinstance(failed, list) else []
        for prompt in self.protocol.untaken_prompts(own):
            self.agent.steer(prompt)  # a prompt steered into the failed run: the next run takes it first
        self.protocol.requeue_untaken()
        if self.interrupted():
            return True, None
        unrecorded = [m for m in own if id(m) in self.protocol.prompts]
        if unrecorded:
            return True, self.protocol.take_next_turn() + unrecorded
        left = self._left_to_run()
        return left is not None, left

    def _left_to_run(self) -> RunInput | None:
        """What a finished run leaves queued: the Agent's steer / follow-up queues (prompts and
        injections steered into the run), else steer / follow-up injections the protocol holds for
        an idle session, which start a turn only for an active task (seed: "Delivery policy")."""
        if self.closed or self.lease.lost:
            return None
        if self.agent.has_queued():
            return "queued"
        if self.todo.has_active_task and self.protocol.take_idle_peek():
            return self.protocol.take_idle()
        return None

    async def _run_once(self, messages: RunInput) -> Literal["done", "stop", "transient"]:
        """One agent run: "stop" when the session must not run again (the lease is gone),
        "transient" when it failed on Redis (see `_recover_run`)."""
        outcome: Literal["done", "stop", "transient"] = "done"
        try:
            with contextlib.suppress(*TRANSIENT):  # informational; the housekeeping refreshes the key
                # Queued like a progress event: the run does not wait for it, and the end-of-run
                # status (awaited) goes out after it.
                await self.outbox.event("status", {"status": "live", "running": True, "fence": self.lease.fence},
                                        also=lambda pipe: pipe.set(keys.running(self.sid), "1",
                                                                   px=self.deps.settings.lease_ms), wait=False)
            if messages == "queued":
                await self.agent.run_queued()
            elif messages is None:
                await self.agent.continue_()
            else:
                await self.agent.prompt(messages)
            while self.agent.has_queued() and not self.closed:
                await self.agent.run_queued()  # a steer that arrived as the loop stopped
        except LeaseLost:
            log.warning("lease_lost_during_run", session_id=self.sid)
            return "stop"
        except asyncio.CancelledError:
            raise
        except TRANSIENT:
            log.exception("run_interrupted_by_redis", session_id=self.sid)
            outcome = "transient"
        except Exception:  # noqa: BLE001 - the worker survives a broken run
            log.exception("run_failed", session_id=self.sid)
            with contextlib.suppress(Exception):
                await self.outbox.event("error", {"error": "run failed"})
        finally:
            self.touch()
            if not self.closed and not self.lease.lost:  # a taken lease: the new holder speaks now
                with contextlib.suppress(Exception):  # through the outbox: after the queued SET running
                    await self.outbox.event("status", {"status": "live", "running": False, "fence": self.lease.fence},
                                            also=lambda pipe: pipe.delete(keys.running(self.sid)))
        if self.compactor is not None and not self.closed and not self.lease.lost and outcome == "done":
            try:
                await self.compactor.after_run()
            except LeaseLost:
                return "stop"
        return outcome

    async def emit(self, event: AgentEvent) -> None:
        """Engine events: persist on message_end (before publishing), then publish."""
        if event.type == "message_end" and event.message is not None:
            mark_implicit(event.message)  # flagged before it is recorded
            await self._record(event.message)
        elif event.type == "model_request" and self.deps.registry is not None:
            d = event.data
            metrics.model_request(self.deps.registry, prompt_tokens=int(d.get("prompt_tokens", 0)),
                                  shared_prefix_tokens=int(d.get("shared_prefix_tokens", 0)),
                                  completion_tokens=int(d.get("output_tokens", 0)),
                                  cached_tokens=int(d.get("cached_tokens", 0)),
                                  reasoning_tokens=int(d.get("reasoning_tokens", 0)),
                                  input_tokens=int(d.get("input_tokens", 0)),
                                  model=self.stream.settings.model, api=str(d.get("api", "")))
        also = count_usage(self.sid, event.data) if event.type == "model_request" else None
        await self.outbox.event(event.type, event.data, also, wait=event.type not in PROGRESS_EVENTS)
        if event.type == "message_end" and event.message is not None:
            await announce(self.outbox, event.message, self.agent.messages)

    async def _record(self, message: AgentMessage) -> None:
        if isinstance(message, UserMessage):
            prompt_id, entry_id, _ = self.protocol.prompts.pop(id(message), (None, None, message))
            await self.transcript.append_message(message, prompt_id=prompt_id)
            await self.ack(entry_id)
            return
        if isinstance(message, CustomMessage):
            if message.custom_type == "gamma.active_skill" and message.details.get("skill") in self.skills:
                skill = self.skills[str(message.details["skill"])]
                if skill.name not in self.active_skill_names():
                    await self.transcript.append_skill(skill.name, skill.type, message.details.get("requiredBy"))
            entry = await self.transcript.append_custom(message)
            pending = self.protocol.pending.pop(id(message), None)
            if pending is not None:
                # Its owner hears first; a crash before the acks redelivers the entries, found recorded.
                await self._recorded(pending.source, pending.source_id, entry.id, pending.ref, pending.to_revision)
                for e in pending.entry_ids:
                    await self.ack(e)
                if self.deps.registry is not None:
                    metrics.injection_delivered(self.deps.registry, str(message.details.get("injectionType")),
                                                pending.source)
                if pending.ref and pending.to_revision is not None:
                    for covered in self.protocol.artifact_recorded(pending.ref, pending.to_revision):
                        for e in covered.entry_ids:
                            await self.ack(e)
                        await self._recorded(covered.source, covered.source_id, entry.id, covered.ref,
                                             covered.to_revision)
                if pending.source_id.startswith("form:"):
                    await form_delivered(self, pending.source_id.split(":")[1])
            return
        await self.transcript.append_message(message)

    async def _recorded(self, source: str, source_id: str, entry_id: str, ref: str | None,
                        to_revision: int | None) -> None:
        await self.outbox.publish(keys.INJECTIONS_RECORDED, InjectionRecorded(
            session_id=self.sid, source=source, source_id=source_id, entry_id=entry_id,  # type: ignore[arg-type]
            ref=ref, to_revision=to_revision))
        await self.outbox.event("injection", {"source": source, "sourceId": source_id, "entryId": entry_id,
                                              "ref": ref}, wait=False)

    # ------------------------------------------------------------ ToolHost

    async def artifact_changed(self, ref: str, kind: str, *, document: dict[str, Any] | None = None, deleted: bool = False,
                               content: bytes | None = None) -> None:
        """`content`: a file's new bytes. They go to a content
        blob on the session disk (shared/blobs.py); the ArtifactChange only names it."""
        if kind == "file":
            self.viewable_files = workspace_files(self.paths.workspace)
        change = ArtifactChange(session_id=self.sid, ref=ref, actor="agent", kind=kind,  # type: ignore[arg-type]
                                document=document, deleted=deleted)
        if content is not None and not deleted:
            name = "b_" + change.id
            sha = await asyncio.to_thread(write_blob, self.deps.settings.data_dir, self.sid, name, content)
            change = change.model_copy(update={"blob": name, "sha256": sha, "size": len(content)})
        await self.outbox.publish(keys.ARTIFACT_CHANGES, change)

    async def open_tab(self, ari: str, title: str | None) -> str:
        tab, update = await self.ui.open_tab(ari, title)
        await self.persist_ui()
        await self.writes.publish_ui(update)
        return tab

    async def show_form(self, form: dict[str, Any]) -> str:
        form_update = await self.ui.set_form(form)
        tab, tab_update = await self.ui.open_tab(f"form:{form['id']}", str(form.get("title") or form["id"]))
        await self.persist_ui()
        await self.writes.publish_ui(form_update)
        await self.writes.publish_ui(tab_update)
        return tab

    async def persist_ui(self) -> None:
        if self._ui is None:
            return  # never loaded, so never changed: state.json is already what it should be
        await self.guard()
        atomic_write_json(self.paths.state, self._ui.snapshot())

    async def todo_changed(self, todo: TodoList, tool_call_id: str) -> None:
        await self.outbox.event("todo", {"todo": todo.model_dump(), "toolCallId": tool_call_id})

    def active_skill_names(self) -> set[str]:
        return {e.name for e in self.transcript.active_skills()}

    async def record_activation(self, skill: Skill, required_by: str | None) -> None:
        await self.transcript.append_skill(skill.name, skill.type, required_by)
        await self.outbox.event("skill_activated", {"name": skill.name, "type": skill.type,
                                                    "requiredBy": required_by})

    async def start_subagent(self, task: str, tool_call_id: str) -> str:
        from .subagent import run_subagent

        child = f"sa_{tool_call_id[-8:]}"
        t = asyncio.ensure_future(run_subagent(self, child, task))
        self.background.add(t)
        t.add_done_callback(self.background.discard)
        return child

    async def message_user(self, message: str, block_on_user: bool, tool_call_id: str) -> None:
        await self.outbox.event("message_user", {"message": message, "block_on_user": block_on_user,
                                                 "tool_call_id": tool_call_id})

    # ------------------------------------------------------------ shutdown

    async def shutdown(self) -> None:
        """Stop the run and the inbox loop; the worker persists and releases the lease."""
        self.agent.abort()
        tasks = [t for t in (self.run_task, *self.background) if t is not None and not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)  # bounded: shutdown must never hang on one task
        self.closed = True  # also ends process_forever's loop if its cancel is lost in a timeout race
        if self.loop_task is not None and self.loop_task is not asyncio.current_task():
            self.loop_task.cancel()
            await asyncio.wait({self.loop_task}, timeout=5.0)
