"""One live session: the composition root (docs/architecture.md "The runtime's parts"). It builds the
parts once, each with its own collaborators, and starts them; it holds no behaviour of its own.

- `SessionState` (state.py): what the session is, as data (ids, the barrier, held prompts, Stop, the run);
- `InboxDispatcher` (dispatcher.py): inbox entries one at a time, retried, dead-lettered, acked;
- `RunSupervisor` (supervisor.py): the run task, its typed outcomes, recovery after Redis failures;
- `Agent` (engine/agent.py): the model loop, from `RunHooks` given once (compaction, skill rules,
  dynamic tools, the causal wait); each run builds its own frozen LoopConfig;
- `Recorder` (recorder.py): engine events -> transcript line, then ack, then InjectionRecorded;
- `SessionToolHost` (tool_host.py): what the tools act on.

Every disk write checks the lease first (`WriteGuard`); an inbox entry is acked only once its effect
is durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from openai import AsyncOpenAI
from prometheus_client import CollectorRegistry

from services.runtime.connector.connector_catalog import ConnectorCatalog, PromptHooks
from services.runtime.connector.connectors import ConnectorHub
from services.runtime.connector.mcp_calls import McpLimits
from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, BeforeModelCall, RunBudget, RunHooks
from services.runtime.hosting.model_calls import ModelCalls, record_repair
from services.runtime.hosting.session_files import SessionFiles
from services.runtime.inbox.abort import RunAborter, stopped_by_user
from services.runtime.inbox.causal import CausalGate, causal_wait
from services.runtime.inbox.delivery import InjectionDelivery
from services.runtime.inbox.dispatcher import Handler, InboxDispatcher
from services.runtime.inbox.idle import IdleRecorder, MergeWindow, in_flight_check
from services.runtime.inbox.manifest import queue_manifest
from services.runtime.inbox.model_switch import ModelSwitch
from services.runtime.inbox.writes import WriteHandlers
from services.runtime.live.diskfence import DiskFence
from services.runtime.live.events import Outbox
from services.runtime.live.lease import Lease, LeaseLost
from services.runtime.live.state import SessionState
from services.runtime.model.cache_watch import CacheWatch
from services.runtime.model.openai_stream import ModelSettings, OpenAIStream
from services.runtime.model.sse import ReadGate
from services.runtime.runs.ack import Acker
from services.runtime.runs.compactor import Compactor
from services.runtime.runs.recorder import Recorder
from services.runtime.runs.spend import SpendLedger
from services.runtime.runs.supervisor import RunSupervisor, repair_interrupted_run
from services.runtime.runs.tool_host import SessionToolHost
from services.runtime.runs.turn_starts import StartGate
from services.runtime.sandbox import select_sandbox
from services.runtime.skillset.audit import Auditor
from services.runtime.skillset.paths import sandbox_skills_dir
from services.runtime.skillset.progress import ChecklistProgress
from services.runtime.skillset.skill_lifecycle import SkillContracts
from services.runtime.skillset.skills import Skill
from services.runtime.store.rewind import Rewinder
from services.runtime.store.snapshots import SessionSnapshots
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from services.runtime.tools import Toolset
from services.runtime.tools.tool_policy import ToolPolicy
from services.runtime.turns.cache_key import prompt_cache_key
from services.runtime.turns.knowledge import KnowledgeReader, PromptKnowledge
from services.runtime.turns.skill_rules import SkillRuleGuard, load_rules
from services.runtime.turns.turn_order import TurnOrder
from services.runtime.ui.costs import CostProjection
from services.runtime.ui.forms import deliver_answered_form
from services.runtime.ui.liveui import LiveUi
from shared.contracts.http import ModelConfig
from shared.contracts.inbox import (
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
from shared.history.tokens import TokenCounter
from shared.media.images import ImageSource
from shared.settings import Settings
from shared.storage.disk import SessionPaths
from shared.storage.snapshots import SnapshotLimits
from shared.ui.uirules import UiLimits


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
    starts: StartGate | None = None  # the worker's pacing of turn starts (turn_starts.py)
    preloaded: tuple[Skill, ...] = ()  # the variant's preloaded skills, recorded at session start
    variant: str = "base"  # services/runtime/skillset/prompt.py VARIANTS
    registry: CollectorRegistry | None = None  # the service's Prometheus registry
    model_calls: ModelCalls | None = None  # the worker's call limits, provider gates and counters
    # (sid, reason) -> None: the worker closes the session now (persist, release the lease, then
    # answer the Stop); without it a Stop is answered at once and closed by the next housekeeping.
    request_close: Any = None


def model_settings(settings: Settings, model: ModelConfig, sid: str, paths: SessionPaths,
                   variant: str = "base") -> ModelSettings:
    """The session's model calls: its row's choice (`model`) over the deployment's defaults, built from
    the model's catalogue entry (shared/catalogue; docs/models.md). A session created before its
    model's entry said so is moved to an API the model serves (a Responses-only model never goes to Chat)."""
    models = settings.models
    name = model.name or models.model
    caps = models.catalogue.resolve(name).caps
    api = model.api or models.default_model_api
    if api not in caps.apis:
        api = caps.apis[0]
    return ModelSettings(model=name, reasoning_effort=model.reasoning_effort, api=api, caps=caps,
                         trusted_role=models.trusted_role_for(name, api), max_output_tokens=models.max_output_tokens,
                         cache_key=prompt_cache_key(models.prompt_cache_key, models.prompt_cache_key_shards, sid,
                                                    variant), chat_cache_key=models.openai_endpoint, images=ImageSource(paths.root),
                         image_detail=settings.images.image_detail, max_retries=models.model_max_retries,
                         retry_base_s=models.model_retry_base_s, retry_max_s=models.model_retry_max_s)


def chain(*hooks: BeforeModelCall) -> BeforeModelCall:
    async def before_model_call(context: AgentContext) -> None:
        for hook in hooks:
            await hook(context)

    return before_model_call


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
        self.state = SessionState(self.sid, wake_id)
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
                                   gate=deps.read_gate, opened=lambda: self.runs.model_opened(), limits=calls.limits,
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
        reach each other: the Agent's emit (the recorder), the skill rules' steer (the Agent), the
        compactor's reload (the protocol) and the causal wait's delivery (the injections) are
        closures, over parts built below before the first run emits, steers, compacts or waits."""
        deps, settings = self.deps, self.deps.settings
        tools = self.toolset.tools
        self.context = context = AgentContext(deps.system_prompt, [], tools, static_prefix=deps.static_prefix)
        self.compactor = Compactor(self.state, context, self.transcript, self.outbox, self.progress, self.acker.ack,
                                   anchors=lambda: self.turns.anchors(), reload=lambda: self.turns.restore_context(),
                                   settings=settings, model=model.model, context_window=context_window)
        before: BeforeModelCall = self.compactor.before_model_call
        # Connectors are namespaces: offered, and told to the agent, only with dynamic tool loading.
        self.catalog = ConnectorCatalog(self.connectors, self.transcript.context, lambda: self.transcript.entries) \
            if settings.runtime.dynamic_tools else None
        if settings.runtime.dynamic_tools:
            policy = ToolPolicy(tools, lambda: self.transcript.loads, self.connectors, self.catalog)
            before, context.tools = chain(policy.before_model_call, self.compactor.before_model_call), policy.active_tools()
        self.rules = SkillRuleGuard(self.toolset.prepare_batch, load_rules(), deps.skills, lambda: context.messages,
                                    self.contracts.scope, lambda m: self.agent.steer(m), deps.registry)
        hooks = RunHooks(stream=self.compactor.wrap_stream(self.stream), prepare_batch=self.rules.prepare_batch,
                         before_model_call=before,
                         before_steering=causal_wait(self.causal, lambda m, e: self.injections.deliver(m, e)),
                         budget=RunBudget(settings.runtime.run_max_model_calls, settings.runtime.run_max_tokens))
        self.agent = Agent(context, hooks, lambda event: self.recorder.emit(event))
        # An active task lets an idle steer start a run, unless the user stopped the agent (abort.py).
        self.turns = TurnOrder(
            self.agent, self.transcript, self.todo, deps.skills,
            lambda: self.todo.has_active_task and not stopped_by_user(self.transcript),
            extra_anchors=(self.progress.anchor, *((self.catalog.anchor,) if self.catalog else ())))
        self.recorder = Recorder(self.sid, self.transcript, self.turns, self.outbox, self.acker.ack, self.contracts,
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
        self.idle = IdleRecorder(state, self.turns, self.agent, self.transcript, self.recorder.record, window,
                                 in_flight_check(deps.client, self.sid))
        self.runs = RunSupervisor(state, self.lease, self.outbox, self.agent, self.turns, self.transcript,
                                  client=deps.client, lease_ms=settings.runtime.lease_ms, after_run=self.compactor,
                                  calls=self.connectors, after_task=self.idle.arm, starts=deps.starts)
        self.injections = InjectionDelivery(state, self.turns, self.transcript, self.runs, self.recorder.recorded, ack,
                                            held=self.idle.arm)
        self.aborts = RunAborter(state, self.agent, self.turns, self.transcript, self.outbox,
                                 self.tools.subagents, ack)
        self.rewinder = Rewinder(self.sid, self.transcript, self.todo, self.turns, self.snapshots, self.aborts,
                                 self.tools, outbox=self.outbox, guard=self.guard, ack=ack)

        async def deliver_form() -> None:  # answers given while dormant, restored from state.json
            await deliver_answered_form(self.sid, self.ui, self.transcript, self.injections.deliver)

        async def at_barrier() -> None:
            # pending_artifacts.json: dormant artifact changes, before the prompt
            queue_manifest(self.sid, self.paths, self.transcript, self.turns)
            await deliver_form()
            self.idle.arm()  # with no prompt to carry them, the dormant updates are recorded (idle.py)

        async def after_write() -> None:
            """A client's write between runs is a point to return to; during a run the next batch records it."""
            if not state.running:
                await self.snapshots.take("upload")

        self.writes = WriteHandlers(state, self.paths, self.ui, self.tools, self.outbox, self.guard, ack, deps.client,
                                    settings, after_ui_sync=deliver_form, after_write=after_write)
        handlers: dict[type, Handler] = {
            UiUpdate: self.writes.ui_update, FileWrite: self.writes.file_write, DocumentEdit: self.writes.document_edit,
            FileDelete: self.writes.file_delete, DocumentDelete: self.writes.document_delete,
            CompactionReady: self.compaction_ready, Compact: self.compactor.on_command,
            ConnectorResult: self.connectors.on_result, Rewind: self.rewinder.on_rewind,
            ModelChange: ModelSwitch(self.transcript, self.switch_model, self.outbox, ack).on_change}
        handlers = self.idle.watch_writes(handlers)  # a client's write keeps its ref's update held (idle.py)
        # Prompt-time knowledge (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools").
        knowledge = PromptKnowledge(self.knowledge, self.transcript, self.turns.pending, settings.runtime.knowledge_top_k,
                                    settings.runtime.knowledge_min_score, deps.registry)
        self.dispatcher = InboxDispatcher(
            state, self.lease, self.outbox, self.agent, self.turns, self.transcript, self.runs, ack,
            self.injections, handlers=handlers, at_barrier=at_barrier, client=deps.client,
            request_close=deps.request_close, causal=self.causal, calls=self.connectors,
            prompt_hook=PromptHooks(self.catalog, knowledge) if self.catalog else knowledge,
            aborts=self.aborts, trace=settings.server.trace_inbox)

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

    # ------------------------------------------------------------ lifecycle

    async def restore(self) -> None:
        if not self.transcript.entries:
            # A preloaded workflow skill is as active as a loaded one.
            await self.transcript.ensure_header([(skill.name, skill.type) for skill in self.deps.preloaded])
        await self.rewinder.finish_pending()  # a rewind a crash cut short (shared/history/rewind.py)
        limits = await self.spend.load()  # the session's own caps (POST /sessions `budget`, docs/costs.md)
        budget = RunBudget(self.deps.settings.runtime.run_max_model_calls, limits.run_tokens or 0)
        self.agent.hooks = replace(self.agent.hooks, budget=budget)
        # A connector call a dead holder sent: its answer, not "interrupted"; one still unanswered is
        # awaited by the run task (supervisor.py), never here.
        await self.connectors.resume()
        await repair_interrupted_run(self.transcript, pending=self.connectors.pending)
        await self.tools.refresh_viewable()
        self.turns.restore_context()
        await self.progress.publish(force=True)  # a client sees where the workflow stands after a wake
        # The cost records are rebuilt from the transcript, off the wake path (the UI document loads lazily).
        task = asyncio.ensure_future(self.costs.refresh_quietly())
        self.state.background.add(task)
        task.add_done_callback(self.state.background.discard)

    # ------------------------------------------------------------ shutdown

    async def shutdown(self) -> None:
        """Stop the run and the inbox loop; the worker persists and releases the lease."""
        state = self.state
        self.agent.abort()
        tasks = [t for t in (state.run_task, *state.background) if t is not None and not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)  # bounded: shutdown must never hang on one task
        state.closed = True  # also ends process_forever's loop if its cancel is lost in a timeout race
        if state.loop_task is not None and state.loop_task is not asyncio.current_task():
            state.loop_task.cancel()
            await asyncio.wait({state.loop_task}, timeout=5.0)

    async def _writable(self) -> None:
        """Before every write (write_guard.py): the session is open and the lease still held."""
        if self.state.closed:
            raise LeaseLost(self.sid)
        await self.lease.check()

    def release_disk(self) -> None:
        """After the last write (the worker's close or drop): the fence file's descriptor goes."""
        if self.disk is not None:
            self.disk.close()
