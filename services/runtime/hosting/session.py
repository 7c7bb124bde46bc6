"""One live session: the composition root (docs/architecture.md "The runtime's parts"). It builds the
parts once, each with its own collaborators, and owns its lifecycle (lifecycle.py): `open`,
`go_live`, `deliver`, `close(reason)`, `drop`; the worker keeps the lease, the reads, the scheduling.

- `SessionState` (state.py): the run's, the inbox's and the lifecycle's state, one writer each;
- `InboxDispatcher` (dispatcher.py): inbox entries one at a time, retried, dead-lettered, acked;
- `RunSupervisor` (supervisor.py): the run task, its typed outcomes, recovery after Redis failures;
- `Agent` (engine/agent.py): the model loop, from `RunHooks` given once (compaction, skill rules,
  dynamic tools, the causal wait); each run builds its own frozen LoopConfig;
- `Recorder` (recorder.py): engine events -> transcript line, then ack, then InjectionRecorded;
- `SessionToolHost` (tool_host.py): what the tools act on.
Every disk write checks the lease first (`WriteGuard`); an entry is acked once its effect is durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import structlog

from services.runtime.connector.connector_catalog import ConnectorCatalog, PromptHooks
from services.runtime.connector.connectors import ConnectorHub
from services.runtime.connector.mcp_calls import McpLimits
from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, BeforeModelCall, RunBudget, RunHooks, chain
from services.runtime.hosting.dormant import answer_stops, release_dormant
from services.runtime.hosting.lifecycle import Lifecycle, Phase
from services.runtime.hosting.links import Links
from services.runtime.hosting.model_calls import ModelCalls, record_repair
from services.runtime.hosting.session_deps import (
    SessionDeps,
    StepClock,
    WorkerParts,
    claim_disk,
    model_settings,
    row_model,
)
from services.runtime.hosting.session_files import SessionFiles, read_session_files
from services.runtime.inbox.abort import RunAborter, stopped_by_user
from services.runtime.inbox.causal import CausalGate, causal_wait
from services.runtime.inbox.delivery import InjectionDelivery
from services.runtime.inbox.dispatcher import InboxDispatcher
from services.runtime.inbox.dispatcher_ports import EntryHandlers, Handler, PromptRoutes, Replies
from services.runtime.inbox.idle import IdleRecorder, MergeWindow, in_flight_check
from services.runtime.inbox.manifest import queue_manifest
from services.runtime.inbox.model_switch import ModelSwitch
from services.runtime.inbox.writes import WriteHandlers
from services.runtime.live.diskfence import DiskFence
from services.runtime.live.events import Outbox
from services.runtime.live.lease import Lease, LeaseLost, renewing
from services.runtime.live.state import InboxState, RunState, SessionState
from services.runtime.model.cache_watch import CacheWatch
from services.runtime.model.openai_stream import ModelSettings, OpenAIStream
from services.runtime.runs.ack import Acker
from services.runtime.runs.compactor import Compactor
from services.runtime.runs.recorder import Recorder
from services.runtime.runs.spend import SpendLedger
from services.runtime.runs.supervisor import RunSupervisor, repair_interrupted_run
from services.runtime.runs.tool_host import SessionToolHost
from services.runtime.sandbox import select_sandbox
from services.runtime.skillset.audit import Auditor
from services.runtime.skillset.paths import sandbox_skills_dir
from services.runtime.skillset.progress import ChecklistProgress
from services.runtime.skillset.skill_lifecycle import SkillContracts
from services.runtime.store.rewind import Rewinder
from services.runtime.store.snapshots import SessionSnapshots
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from services.runtime.tools import Toolset
from services.runtime.tools.tool_policy import ToolPolicy
from services.runtime.turns.knowledge import KnowledgeReader, PromptKnowledge
from services.runtime.turns.pending_queue import PendingQueue
from services.runtime.turns.skill_rules import SkillRuleGuard, load_rules
from services.runtime.turns.turn_order import TurnBuilder
from services.runtime.ui.costs import CostProjection
from services.runtime.ui.forms import deliver_answered_form
from services.runtime.ui.liveui import LiveUi
from shared.contracts.http import ModelConfig
from shared.contracts.streams.inbox import (
    Compact,
    CompactionReady,
    ConnectorResult,
    DocumentDelete,
    DocumentEdit,
    FileDelete,
    FileWrite,
    ModelChange,
    Rewind,
    UiUpdate,
)
from shared.contracts.streams.lifecycle import SessionLive
from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.storage.disk import SessionPaths, session_paths
from shared.storage.snapshots import SnapshotLimits
from shared.streams.inbox import InboxEntry
from shared.telemetry.tracing import detached
from shared.ui.uirules import UiLimits

log = structlog.get_logger()
T = TypeVar("T")
STOP_WAIT_S = 5.0  # a close or a drop never hangs on one task


class Session:
    def __init__(self, deps: SessionDeps, paths: SessionPaths, files: SessionFiles, lease: Lease, outbox: Outbox,
                 model: ModelSettings, wake_id: str, context_window: int | None = None,
                 disk: DiskFence | None = None) -> None:
        self.deps = deps
        self.sid = lease.sid
        self.paths = paths
        self.lease = lease
        self.disk = disk  # the lease's fence, checked by the disk at each write (diskfence.py)
        self.outbox = outbox
        # Each part of the state has one writer (state.py); the parts read the view.
        self.run, self.inbox, self.life = RunState(), InboxState(), Lifecycle()
        self.state = SessionState(self.sid, wake_id, self.run, self.inbox, self.life)
        self.links = Links()  # what the parts built first reach of the parts built after them (links.py)
        self.guard = WriteGuard(self._writable, disk)
        self.transcript = Transcript.of(paths.transcript, self.guard, files.transcript)
        self.todo = TodoController.of(paths.todo, self.guard, files.todo)
        self.snapshots = SessionSnapshots(self.sid, paths, SnapshotLimits.of(deps.settings), self.guard,
                                          lambda: self.transcript.leaf_id)
        self.ui = LiveUi(paths, UiLimits.of(deps.settings), self.guard, outbox)  # loaded when first needed
        self.acker = Acker(self.sid, deps.ack, self.state.background)
        self._build_tools(model)
        self._build_agent(model, context_window or deps.settings.compaction.context_window)
        self._build_inbox()
        self.links.bind(queue=self.queue, turns=self.turns, runs=self.runs, injections=self.injections,
                        recorder=self.recorder)

    def _build_tools(self, model: ModelSettings) -> None:
        """What the tools act on, and the checklists (docs/architecture.md "Scoped knowledge, skill
        rules, dynamic tools"): completion audits and checklist progress read the transcript and todo."""
        deps, settings = self.deps, self.deps.settings
        self.contracts = SkillContracts(self.transcript, deps.skills, self.outbox)
        auditor = Auditor(self.transcript, self.todo, deps.skills, self.outbox, deps.registry, self.contracts)
        calls = deps.model_calls or ModelCalls()
        provider = calls.provider(deps.model_client)
        self.spend = SpendLedger(self.sid, deps.client, settings, deps.registry)
        self.stream = OpenAIStream(deps.model_client, model, deps.counter, static_prefix=deps.static_prefix,
                                   gate=deps.read_gate, opened=self.links.model_opened, limits=calls.limits,
                                   provider=provider, observer=calls.observer,
                                   on_repair=lambda fix: record_repair(self.transcript, fix), spend=self.spend,
                                   watch=CacheWatch(calls.ledger, calls.cache_miss, self.sid, deps.variant))
        self.tools = SessionToolHost(
            sid=self.sid, paths=self.paths, settings=settings, sandbox=select_sandbox(settings, sandbox_skills_dir()),
            todo=self.todo, skills=deps.skills, transcript=self.transcript, outbox=self.outbox, guard=self.guard,
            ui=self.ui, subagent_stream=lambda: OpenAIStream(deps.model_client, self.stream.settings, deps.counter,
                                                             limits=calls.limits, provider=provider,
                                                             observer=calls.observer, spend=self.spend,
                                                             kind="subagent"),
            client=deps.client, background=self.state.background, contracts=self.contracts, auditor=auditor)
        self.knowledge = KnowledgeReader(deps.client, self.sid)
        self.toolset = Toolset(self.tools, self.knowledge, settings.runtime.knowledge_inline_chars)
        self.progress = ChecklistProgress(self.transcript, self.todo, deps.skills, self.outbox)
        self.costs = CostProjection(lambda: self.transcript.entries, self.ui, settings.models.prices,
                                    lambda: self.transcript.w.base_usage)
        self.connectors = ConnectorHub(self.sid, deps.client, self.transcript, self.acker.ack, deps.registry,
                                       McpLimits.of(deps.settings))
        self.causal = CausalGate(self.sid, deps.client, self.outbox.publish, settings.runtime.causal_wait_ms)

    def _build_agent(self, model: ModelSettings, context_window: int) -> None:
        """The Agent and what its runs are made of. The Agent, its protocol and what its runs call
        reach each other: the Agent's emit (the recorder), the skill rules' guidance (the pending queue), the
        compactor's reload (the protocol) and the causal wait's delivery (the injections) go through
        `links` (links.py), bound once every part is built, before the first run."""
        deps, settings = self.deps, self.deps.settings
        tools = self.toolset.tools
        self.context = context = AgentContext(deps.system_prompt, [], tools, static_prefix=deps.static_prefix)
        self.compactor = Compactor(self.state, context, self.transcript, self.outbox, self.progress, self.acker.ack,
                                   anchors=self.links.anchors, reload=self.links.restore_context,
                                   settings=settings, model=model.model, context_window=context_window)
        before: BeforeModelCall = self.compactor.before_model_call
        # Connectors are namespaces: offered, and told to the agent, only with dynamic tool loading.
        self.catalog = ConnectorCatalog(self.connectors, self.transcript.context, lambda: self.transcript.entries) \
            if settings.runtime.dynamic_tools else None
        if settings.runtime.dynamic_tools:
            policy = ToolPolicy(tools, lambda: self.transcript.loads, self.connectors, self.catalog)
            before, context.tools = chain(policy.before_model_call, self.compactor.before_model_call), policy.active_tools()
        self.rules = SkillRuleGuard(self.toolset.prepare_batch, load_rules(), deps.skills, lambda: context.messages,
                                    self.contracts.scope, self.links.inject, deps.registry)
        hooks = RunHooks(stream=self.compactor.wrap_stream(self.stream), prepare_batch=self.rules.prepare_batch,
                         before_model_call=before,
                         before_steering=causal_wait(self.causal, self.links.deliver),
                         budget=RunBudget(settings.runtime.run_max_model_calls, settings.runtime.run_max_tokens))
        self.agent = Agent(context, hooks, self.links.emit)
        # An active task lets an idle steer start a run, unless the user stopped the agent (abort.py).
        self.queue = PendingQueue(self.agent, self.transcript,
                                  lambda: self.todo.has_active_task and not stopped_by_user(self.transcript))
        self.turns = TurnBuilder(self.queue, self.agent, self.transcript, self.todo, deps.skills,
                                 extra_anchors=(self.progress.anchor, *((self.catalog.anchor,) if self.catalog else ())))
        self.recorder = Recorder(self.sid, self.transcript, self.queue, self.outbox, self.acker.ack, self.contracts,
                                 self.ui, deps.registry, lambda: self.stream.settings.model, lambda: context.messages,
                                 snapshot=self.snapshots.take, after_tool_result=(self.progress.publish,),
                                 after_run_end=(self.costs.refresh_quietly,),
                                 after_model_message=(self.costs.refresh_live,))

    def _build_inbox(self) -> None:
        """The run task and the inbox's handlers, around the parts built above."""
        deps, settings, state = self.deps, self.deps.settings, self.state
        ack = self.acker.ack
        # Updates for an idle agent: recorded after a per-ref merge window, the digest's debounce (idle.py).
        debounce_s = settings.bus.digest_debounce_ms / 1000
        window = MergeWindow(debounce_s, max(2.0, 10 * debounce_s), asyncio.get_running_loop().time)
        self.idle = IdleRecorder(state, self.queue, self.turns, self.agent, self.transcript, self.recorder.record, window,
                                 in_flight_check(deps.client, self.sid))
        self.runs = RunSupervisor(state, self.run, self.lease, self.outbox, self.agent, self.queue, self.transcript,
                                  reload=self.turns.restore_context, client=deps.client,
                                  lease_ms=settings.runtime.lease_ms, after_run=self.compactor,
                                  calls=self.connectors, after_task=self.idle.arm, starts=deps.starts)
        self.injections = InjectionDelivery(state, self.queue, self.transcript, self.runs, self.recorder.recorded, ack,
                                            held=self.idle.arm)
        self.aborts = RunAborter(state, self.runs, self.agent, self.queue, self.transcript, self.outbox,
                                 self.tools.subagents, ack, reload=self.turns.restore_context)
        self.rewinder = Rewinder(self.sid, self.transcript, self.todo, self.turns, self.snapshots, self.aborts,
                                 self.tools, outbox=self.outbox, guard=self.guard, ack=ack)

        async def deliver_form() -> None:  # answers given while dormant, restored from state.json
            await deliver_answered_form(self.sid, self.ui, self.transcript, self.injections.deliver)

        async def at_barrier() -> None:
            # pending_artifacts.json: dormant artifact changes, before the prompt
            queue_manifest(self.sid, self.paths, self.transcript, self.queue)
            await deliver_form()
            self.idle.arm()  # with no prompt to carry them, the dormant updates are recorded (idle.py)

        async def recorded(write: Callable[[], T], changed: Callable[[T], bool]) -> T:  # snapshots.py `client_write`
            return await self.snapshots.client_write(write, changed, lambda: state.running)

        self.writes = WriteHandlers(state, self.paths, self.ui, self.tools, self.outbox, self.guard, ack, deps.client,
                                    settings, after_ui_sync=deliver_form, recorded=recorded)
        handlers: dict[type, Handler] = {
            UiUpdate: self.writes.ui_update, FileWrite: self.writes.file_write, DocumentEdit: self.writes.document_edit,
            FileDelete: self.writes.file_delete, DocumentDelete: self.writes.document_delete,
            CompactionReady: self.compaction_ready, Compact: self.compactor.on_command,
            ConnectorResult: self.connectors.on_result, Rewind: self.rewinder.on_rewind,
            ModelChange: ModelSwitch(self.transcript, self.switch_model, self.outbox, ack).on_change}
        handlers = self.idle.watch_writes(handlers)  # a client's write keeps its ref's update held (idle.py)
        # Prompt-time knowledge (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools").
        knowledge = PromptKnowledge(self.knowledge, self.transcript, settings.runtime.knowledge_top_k,
                                    settings.runtime.knowledge_min_score, deps.registry)
        routes = PromptRoutes(self.agent, self.queue, self.turns, self.transcript, self.runs, self.injections,
                              causal=self.causal, calls=self.connectors, aborts=self.aborts,
                              prompt_hook=PromptHooks(self.catalog, knowledge) if self.catalog else knowledge)
        self.dispatcher = InboxDispatcher(state, self.inbox, self.lease, routes,
                                          Replies(self.outbox, ack, deps.client, deps.request_close),
                                          EntryHandlers(handlers, at_barrier), trace=settings.server.trace_inbox)

    async def compaction_ready(self, entry: Any, ready: CompactionReady) -> None:
        """The summary calls are counted with the session's other model calls (docs/costs.md)."""
        await self.spend.add_once("compaction:" + ready.request_id, ready.usage)
        await self.compactor.on_ready(entry, ready)

    def switch_model(self, model: ModelConfig) -> None:
        """PATCH /sessions/{id} (model_switch.py): the next model call, subagents' and compaction's
        token counts use the new model; a call in flight finishes on its own."""
        self.stream.settings = model_settings(self.deps.settings, model, self.sid, self.paths,
                                              self.deps.variant)
        self.compactor.model = self.stream.settings.model
        self.compactor.context_window = model.context_window or self.deps.settings.compaction.context_window

    # ------------------------------------------------------------ lifecycle (lifecycle.py)

    @classmethod
    async def open(cls, parts: WorkerParts, wake: Wake, lease: Lease, row: Mapping[str, str],
                   clock: StepClock) -> Session:
        """A wake's session, not live yet (`go_live`): the disk fence claimed for the lease, the files
        read (the lease renewed meanwhile), the parts built, restored. A failed step closes the fence."""
        sid, settings = wake.session_id, parts.settings
        paths = session_paths(settings.storage.data_dir, sid)
        disk = await claim_disk(settings, paths, lease)
        clock.mark("claim")
        try:
            model, variant = row_model(row)
            outbox = Outbox(parts.sender, sid, parts.bus, fence=lease.check)
            files = await renewing(lease, read_session_files(paths, settings.storage.workspace_max_depth))
            clock.mark("read")
            window = model.context_window or settings.compaction.context_window
            session = cls(parts.deps(variant), paths, files, lease, outbox, model_settings(settings, model, sid, paths, variant),
                          wake.wake_id, context_window=window, disk=disk)
            clock.mark("build")
            await session.restore(files)  # with the files read above (a long history's first read)
        except BaseException:
            disk.close()
            raise
        clock.mark("restore")
        return session

    async def restore(self, files: SessionFiles | None = None) -> None:
        if not self.transcript.entries:  # a preloaded workflow skill is as active as a loaded one
            await self.transcript.ensure_header([(skill.name, skill.type) for skill in self.deps.preloaded])
        if files is not None:  # the wake's read (session_files.py); without it each part reads its own
            self.ui.preload(files.ui)
        await self.rewinder.finish_pending(read=files is None, intent=files.intent if files else None)
        limits = await self.spend.load()  # the session's own caps (POST /sessions `budget`, docs/costs.md)
        budget = RunBudget(self.deps.settings.runtime.run_max_model_calls, limits.run_tokens or 0)
        self.agent.hooks = replace(self.agent.hooks, budget=budget)
        # A connector call a dead holder sent: its answer, not "interrupted"; one still unanswered is
        # awaited by the run task (supervisor.py), never here.
        await self.connectors.resume()
        await repair_interrupted_run(self.transcript, pending=self.connectors.pending)
        await self.tools.refresh_viewable(walked=None if files is None else files.viewable)
        self.turns.restore_context()
        await self.progress.publish(force=True)  # a client sees where the workflow stands after a wake
        # The cost records are rebuilt from the transcript, off the wake path (the UI document loads lazily).
        task = asyncio.ensure_future(self.costs.refresh_quietly())
        self.state.background.add(task)
        task.add_done_callback(self.state.background.discard)

    async def go_live(self, worker_id: str, loop: Callable[[], Coroutine[Any, Any, None]], clock: StepClock) -> None:
        """SessionLive (the notifications service sends pending injections on it), then the inbox loop
        in its own task: the wake ends here; the live status and the reader are the loop's (wake_timing.py)."""
        await self.outbox.bus(keys.LIFECYCLE, SessionLive(session_id=self.sid, wake_id=self.state.wake_id,
                                                          fence=self.lease.fence, worker_id=worker_id))
        clock.mark("live")
        log.info("session_live", session_id=self.sid, fence=self.lease.fence, **clock.fields())
        if self.life.phase is not Phase.OPENING:
            return  # dropped during the announcement: no loop
        with detached():  # each entry is handled in its own producer's trace, not the wake's
            self.life.live(asyncio.ensure_future(loop()))

    def deliver(self, entry: InboxEntry) -> bool:
        """An entry read for it, onto its queue; False once closed (it stays pending for the next holder)."""
        if self.life.closed:
            return False
        self.state.queue.put_nowait(entry)
        return True

    async def serve(self) -> None:
        """The inbox loop (dispatcher.py): until the session is closed or its lease is lost."""
        await self.dispatcher.process_forever()

    async def close(self, reason: str) -> bool:
        """Go dormant: stop the run and the loops, write the UI state, release the lease, then say so
        (the dormant status, SessionDormant) and answer the Stops. False when already closing or ended."""
        if not self.life.stop():
            return False
        try:
            await self._stop_tasks()
            self._seal(Phase.SEALING)  # the loops see it closed; the last writes below still go through
            await self._stop_loop()
            await self.ui.persist_at_close(self.sid)
            self._seal(Phase.CLOSED)
            if self.deps.images is not None:
                await self.deps.images.at_close(self.sid, self.paths)  # still leased: no transcript writer runs
            await release_dormant(self.deps.client, self.lease, self.outbox, reason, self.state.stop_replies,
                                  self.deps.settings.runtime.dormant_retention_s)
        except LeaseLost:
            log.warning("lease_lost_at_close", session_id=self.sid)
            await answer_stops(self.outbox, self.state.stop_replies, 409,
                               {"error": "the session moved to another worker; suspend it again"})
        finally:
            self.release_disk()
        return True

    async def drop(self) -> None:
        """The lease was taken: stop at once, write nothing, publish nothing for this session."""
        if not self.life.drop():
            return
        await self._stop_tasks()
        await self._stop_loop()
        self.release_disk()

    def _seal(self, to: Phase) -> None:
        if self.life.ended:  # dropped while closing: the lease is gone
            raise LeaseLost(self.sid)
        self.life.move(to)

    async def _stop_tasks(self) -> None:
        """The run and the background tasks, cancelled; bounded: a close never hangs on one task."""
        self.agent.abort()
        tasks = [t for t in (self.run.run_task, *self.state.background) if t is not None and not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_S)

    async def _stop_loop(self) -> None:
        """The inbox loop (it also ends by itself once `closed`, if its cancel is lost in a timeout race)."""
        task = self.life.loop_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_WAIT_S)

    async def _writable(self) -> None:
        """Before every write (write_guard.py): the lifecycle still writes and the lease is still held."""
        if not self.life.writable:
            raise LeaseLost(self.sid)
        await self.lease.check()

    def release_disk(self) -> None:
        """After the last write (a close or a drop): the fence file's descriptor goes."""
        if self.disk is not None:
            self.disk.close()
