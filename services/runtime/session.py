"""One live session: the composition root. It holds the session's state (restored transcript, todo
and UI document, the barrier, the held prompts, Stop) and wires the parts that act on it:

- `InboxDispatcher` (dispatcher.py): inbox entries one at a time, retried, dead-lettered, acked;
- `RunSupervisor` (supervisor.py): the run task, its typed outcomes, recovery after Redis failures;
- `Recorder` (recorder.py): engine events -> transcript line, then ack, then InjectionRecorded;
- `SessionToolHost` (toolhost.py): the session as the tools see it;
- `Compactor` (compactor.py): its hooks go into the LoopConfig built here.

Every disk write checks the lease first; an inbox entry is acked only once its effect is durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openai import AsyncOpenAI
from prometheus_client import CollectorRegistry

from shared.contracts.inbox import (
    Compact,
    CompactionReady,
    ConnectorResult,
    DocumentDelete,
    DocumentEdit,
    FileDelete,
    FileWrite,
    Injection,
    Rewind,
    UiUpdate,
)
from shared.contracts.messages import AgentMessage
from shared.disk import SessionPaths, atomic_write_json, read_json
from shared.inbox import InboxEntry
from shared.quota import WorkspaceQuota
from shared.settings import Settings
from shared.snapshots import SnapshotLimits
from shared.tokens import TokenCounter
from shared.uirules import UiLimits, repair_snapshot

from .abort import RunAborter, stopped_by_user
from .ack import Acker
from .audit import Auditor
from .causal import CausalGate, causal_wait
from .compactor import Compactor
from .connectors import ConnectorHub
from .costs import CostProjection
from .diskfence import DiskFence
from .dispatcher import Handler, InboxDispatcher
from .engine.agent import Agent
from .engine.openai_stream import ModelSettings, OpenAIStream
from .engine.sse import ReadGate
from .engine.types import AgentContext, AgentEvent, RunHooks, StreamFn
from .events import Outbox
from .forms import deliver_answered_form
from .knowledge import KnowledgeReader, PromptKnowledge
from .lease import Lease, LeaseLost
from .paths import sandbox_skills_dir
from .pending import PendingTurn
from .progress import ChecklistProgress
from .protocol import SessionProtocolController
from .recorder import Recorder
from .rewind import Rewinder
from .sandbox import select_sandbox
from .skill_lifecycle import SkillContracts
from .skill_rules import SkillRuleGuard, load_rules
from .skills import Skill
from .snapshots import SessionSnapshots
from .supervisor import RunSupervisor, interrupted, repair_interrupted_run
from .todo import TodoController
from .tool_policy import ToolPolicy
from .toolhost import SessionToolHost
from .tools import Toolset
from .transcript import Transcript
from .uistate import UiDoc
from .writes import WriteHandlers


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
    read_gate: ReadGate | None = None  # model streams read once per delta tick (sender.py)
    preloaded: tuple[Skill, ...] = ()  # the variant's preloaded skills, recorded at session start
    registry: CollectorRegistry | None = None  # the service's Prometheus registry
    # (sid, reason) -> None: the worker closes the session now (persist, release the lease, then
    # answer the Stop); without it a Stop is answered at once and closed by the next housekeeping.
    request_close: Any = None


class Session:
    def __init__(self, deps: SessionDeps, paths: SessionPaths, lease: Lease, outbox: Outbox,
                 model: ModelSettings, wake_id: str, context_window: int | None = None,
                 disk: DiskFence | None = None) -> None:
        self.deps = deps
        self.sid = lease.sid
        self.paths = paths
        self.lease = lease
        self.disk = disk  # the lease's fence, checked by the disk at each write (diskfence.py)
        self.outbox = outbox
        self.wake_id = wake_id
        self.ui_limits = UiLimits.of(deps.settings)
        self.skills = deps.skills
        # The disk fence's lock goes as soon as a line is readable, not after its fsync (diskfence.py).
        self.transcript = Transcript.load(paths.transcript, self.guard, disk.unlock if disk is not None else None)
        self.todo = TodoController.load(paths.todo, self.guard)
        self.snapshots = SessionSnapshots(self.sid, paths, SnapshotLimits.of(deps.settings), self.guard,
                                          lambda: self.transcript.leaf_id)
        self._ui: UiDoc | None = None  # built from state.json on first use (see `ui`)
        self.queue: asyncio.Queue[InboxEntry] = asyncio.Queue()
        self.held: list[InboxEntry] = []  # prompts held until the wake barrier
        self.barrier_passed = False
        self.last_activity = asyncio.get_running_loop().time()
        self.closed = False
        self.stop_requested: str | None = None
        self.stop_replies: list[str] = []  # Stop request ids, answered once the lease is released
        self.loop_task: asyncio.Task[None] | None = None
        self.background: set[asyncio.Task[None]] = set()
        self._wire(model, context_window or deps.settings.context_window)

    def _wire(self, model: ModelSettings, context_window: int) -> None:
        deps = self.deps
        self.acker = Acker(self.sid, deps.ack, self.background)
        self.contracts = SkillContracts(self.transcript, self.skills, self.outbox)
        self.tools = SessionToolHost(
            sid=self.sid, paths=self.paths, settings=deps.settings, sandbox=select_sandbox(deps.settings, sandbox_skills_dir()),
            todo=self.todo, skills=self.skills, transcript=self.transcript, outbox=self.outbox, guard=self.guard,
            ui=self, subagent_stream=self._subagent_stream, client=deps.client, background=self.background,
            contracts=self.contracts)
        self.subagents = self.tools.subagents  # stopped with the run (abort.py)
        reader = KnowledgeReader(deps.client, self.sid)
        self.toolset = Toolset(self.tools, reader, deps.settings.knowledge_inline_chars)
        self.stream = OpenAIStream(deps.model_client, model, deps.counter, static_prefix=deps.static_prefix,
                                   gate=deps.read_gate)
        self.compactor = Compactor(self, deps.settings, model.model, context_window)
        # Knowledge and skill-rule hooks (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools"): skill rules around the batch preflight, the dynamic tool subset (when on)
        # before the compactor's check; prompt-time knowledge in the dispatcher.
        self.rules = SkillRuleGuard(self.toolset.prepare_batch, load_rules(), deps.skills, self._messages,
                                    self.contracts.scope, self._steer, deps.registry)
        before, tools = self.compactor.before_model_call, self.toolset.tools
        self.connectors = ConnectorHub(self.sid, deps.client, self.transcript, self.ack, deps.registry)
        if deps.settings.dynamic_tools:  # connectors are namespaces: offered only with dynamic tool loading
            policy = ToolPolicy(self.toolset.tools, lambda: self.transcript.entries, before, self.connectors)
            before, tools = policy.before_model_call, policy.active_tools()
        self.causal = CausalGate(self.sid, deps.client, self.outbox.publish, deps.settings.causal_wait_ms)
        hooks = RunHooks(stream=self.compactor.wrap_stream(self.stream), prepare_batch=self.rules.prepare_batch,
                         before_model_call=before, before_steering=causal_wait(self.causal, self.deliver_injection))
        self.agent = Agent(AgentContext(deps.system_prompt, [], tools), hooks, self._emit)
        # An active task lets an idle steer start a run, unless the user stopped the agent (abort.py).
        self.protocol = SessionProtocolController(
            self.agent, self.transcript, self.todo, deps.skills,
            lambda: self.todo.has_active_task and not stopped_by_user(self.transcript))
        knowledge = PromptKnowledge(reader, self.transcript, self.protocol.pending, deps.settings.knowledge_top_k,
                                    deps.settings.knowledge_min_score, deps.registry)
        self.recorder = Recorder(self.sid, self.transcript, self.protocol, self.outbox, self.ack, self.contracts,
                                 self, deps.registry, lambda: self.stream.settings.model, lambda: self.agent.messages,
                                 snapshot=self.snapshots.take)
        self._wire_checklists()
        self.writes = WriteHandlers(self, after_ui_sync=lambda: deliver_answered_form(self),
                                    after_write=self._snapshot_upload)
        self.runs = RunSupervisor(self, deps.client, deps.settings.lease_ms, self.compactor)
        handlers: dict[type, Handler] = {UiUpdate: self.writes.ui_update, FileWrite: self.writes.file_write,
                    DocumentEdit: self.writes.document_edit, CompactionReady: self.compactor.on_ready,
                    Compact: self.compactor.on_command, FileDelete: self.writes.file_delete,
                    DocumentDelete: self.writes.document_delete, ConnectorResult: self.connectors.on_result}
        self.aborts = RunAborter(self)
        self.rewinder = Rewinder(self)
        handlers[Rewind] = self.rewinder.on_rewind
        self.dispatcher = InboxDispatcher(self, self, self, handlers, self.recorder.recorded,
                                          deps.client, deps.request_close, knowledge, self.aborts,
                                          trace=deps.settings.trace_inbox)
        self.dispatcher.causal = self.causal

    async def _snapshot_upload(self) -> None:
        """A client's write between runs is a point to return to; during a run the next batch records it."""
        if not self.running:
            await self.snapshots.take("upload")

    def _messages(self) -> list[AgentMessage]:
        return self.agent.messages

    def _steer(self, message: AgentMessage) -> None:
        self.agent.steer(message)

    def _wire_checklists(self) -> None:
        """Completion audits and checklist progress (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools"): both read the transcript and the todo list."""
        self.tools.auditor = Auditor(self.transcript, self.todo, self.skills, self.outbox, self.deps.registry,
                                     self.contracts)
        self.progress = ChecklistProgress(self.transcript, self.todo, self.skills, self.outbox)
        self.recorder.after_tool_result.append(self.progress.publish)
        self.protocol.extra_anchors.append(self.progress.anchor)
        self.costs = CostProjection(lambda: self.transcript.entries, self, self.deps.settings.prices)
        self.recorder.after_run_end.append(self.costs.refresh_quietly)

    async def _emit(self, event: AgentEvent) -> None:
        # The recorder needs the protocol, which needs the Agent: the Agent reaches it through here.
        await self.recorder.emit(event)

    def _subagent_stream(self) -> StreamFn:
        return OpenAIStream(self.deps.model_client, self.stream.settings, self.deps.counter)

    # ------------------------------------------------------------ lifecycle

    async def restore(self) -> None:
        if not self.transcript.entries:
            await self.transcript.ensure_header()
            for skill in self.deps.preloaded:  # a preloaded workflow skill is as active as a loaded one
                await self.transcript.append_skill(skill.name, skill.type, None, preloaded=True)
        await self.rewinder.finish_pending()  # a rewind a crash cut short (shared/rewind.py)
        # A connector call a dead holder sent: its answer, not "interrupted"; one still unanswered is
        # awaited by the run task (`await_connector_calls`), never here.
        await self.connectors.resume()
        await repair_interrupted_run(self.transcript, pending=self.connectors.pending)
        await self.tools.refresh_viewable()
        self.protocol.restore_context()
        await self.progress.publish(force=True)  # a client sees where the workflow stands after a wake
        # The cost records are rebuilt from the transcript, off the wake path (the UI document loads lazily).
        task = asyncio.ensure_future(self.costs.refresh_quietly())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def interrupted(self) -> bool:
        return interrupted(self.transcript)

    @property
    def awaiting_connector(self) -> bool:
        """A connector call sent before the wake is still open: a run goes on once it is answered."""
        return bool(self.connectors.pending)

    async def await_connector_calls(self) -> None:
        if await self.connectors.await_pending():
            self.protocol.restore_context()  # the model context takes the results the transcript got

    @property
    def ui(self) -> UiDoc:
        """The UI document, rebuilt from state.json when first needed (a UI sync, a tool, the barrier's
        form check), not on the wake path. Safe to read late: once the lease is held and the proxy's
        dormant-write lock is gone, only this holder writes state.json."""
        if self._ui is None:
            self._ui = UiDoc.from_snapshot(repair_snapshot(read_json(self.paths.state)), self.ui_limits)
        return self._ui

    async def refresh_files(self) -> None:
        """The viewable files listed again from the disk (after a rewind restored the workspace)."""
        await self.tools.refresh_viewable()

    @property
    def viewable_files(self) -> list[str]:
        return self.tools.viewable_files  # one list, kept by the tool host (agent writes) and writes (client ones)

    @viewable_files.setter
    def viewable_files(self, files: list[str]) -> None:
        self.tools.viewable_files = files

    @property
    def max_file_bytes(self) -> int:
        return self.tools.max_file_bytes

    @property
    def workspace_quota(self) -> WorkspaceQuota:
        return self.tools.workspace_quota

    async def guard(self) -> None:
        if self.closed:
            raise LeaseLost(self.sid)
        await self.lease.check()
        if self.disk is not None:
            await self.disk.hold()  # last: held until the caller's write, which follows with no await

    def touch(self) -> None:
        self.last_activity = asyncio.get_running_loop().time()

    @property
    def running(self) -> bool:
        return self.runs.running

    @property
    def run_task(self) -> asyncio.Task[None] | None:
        return self.runs.task

    def idle_for(self) -> float:
        if self.running or self.held or not self.queue.empty():
            return 0.0
        return asyncio.get_running_loop().time() - self.last_activity

    async def process_forever(self) -> None:
        await self.dispatcher.process_forever()

    async def ack(self, entry_id: str | None) -> None:
        await self.acker.ack(entry_id)

    def start_run(self, turn: PendingTurn | None) -> None:
        self.runs.start_run(turn)

    async def deliver_injection(self, m: Injection, entry_id: str | None) -> None:
        await self.dispatcher.deliver_injection(m, entry_id)

    # ------------------------------------------------------------ UI document

    async def persist_ui(self) -> None:
        if self._ui is None:
            return  # never loaded, so never changed: state.json is already what it should be
        await self.guard()
        atomic_write_json(self.paths.state, self._ui.snapshot())

    async def publish_ui(self, update: bytes) -> None:
        await self.writes.publish_ui(update)

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

    def release_disk(self) -> None:
        """After the last write (the worker's close or drop): the fence file's descriptor goes."""
        if self.disk is not None:
            self.disk.close()
