"""The stateful Agent (Pi's agent.ts): the context, the steer and follow-up queues, one run at a time.

next-turn messages are not the engine's business: the session protocol keeps them until the next
user prompt (as Pi's AgentSession does).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Literal

from services.runtime.engine.loop import run_loop, run_loop_continue
from services.runtime.engine.types import (
    AbortSignal,
    AgentContext,
    AgentEvent,
    Emit,
    LoopConfig,
    RunHooks,
    Tool,
)
from shared.contracts.records.messages import AgentMessage, AssistantMessage

QueueMode = Literal["all", "one-at-a-time"]


class AgentBusy(RuntimeError):
    pass


class Agent:
    def __init__(
        self,
        context: AgentContext,
        hooks: RunHooks,
        emit: Emit,
        steering_mode: QueueMode = "all",
        follow_up_mode: QueueMode = "all",
    ) -> None:
        self.context = context
        self.hooks = hooks
        self._emit = emit
        self.steering_mode = steering_mode
        self.follow_up_mode = follow_up_mode
        self._steer: deque[AgentMessage] = deque()
        self._follow: deque[AgentMessage] = deque()
        self._running = False
        # The last run ended on a terminating batch (a yield): what is queued is not run at once
        # (docs/architecture.md "Delivery, yield and the idle rules").
        self.yielded = False
        self.signal = AbortSignal()  # the current run's; a new one for each run (`_guarded`)

    # ------------------------------------------------------------ state

    @property
    def messages(self) -> list[AgentMessage]:
        return self.context.messages

    def replace_messages(self, messages: list[AgentMessage]) -> None:
        self.context.messages = list(messages)

    def add_idle(self, message: AgentMessage) -> None:
        """A message recorded while no run is active, where the next run's prompt messages would have
        put it (the end of the context): the next model call sees the same messages in the same
        order as if the next turn had carried it, so the cached prompt prefix is unchanged."""
        if self._running:
            raise AgentBusy("a message is added between runs only; during a run use steer() or follow_up()")
        self.context.messages.append(message)

    @property
    def tools(self) -> list[Tool]:
        return self.context.tools

    @property
    def is_running(self) -> bool:
        return self._running

    # ------------------------------------------------------------ queues

    def steer(self, message: AgentMessage) -> None:
        """Delivered after the current tool batch, before the next model call."""
        self._steer.append(message)

    def follow_up(self, message: AgentMessage) -> None:
        """Delivered only when the agent would otherwise stop."""
        self._follow.append(message)

    def has_queued(self) -> bool:
        return bool(self._steer or self._follow)

    def queued(self) -> list[AgentMessage]:
        return [*self._steer, *self._follow]

    def steering(self) -> tuple[AgentMessage, ...]:
        return tuple(self._steer)

    def follow_ups(self) -> tuple[AgentMessage, ...]:
        return tuple(self._follow)

    def take_queued(self) -> list[AgentMessage]:
        """Empty both queues (an aborted run leaves them for the next prompt): steering, then follow-ups."""
        return _take(self._steer, "all") + _take(self._follow, "all")

    def remove_queued(self, message: AgentMessage) -> bool:
        for q in (self._steer, self._follow):
            for i, m in enumerate(q):
                if m is message:
                    del q[i]
                    return True
        return False

    def replace_queued(self, old: AgentMessage, new: AgentMessage) -> bool:
        for q in (self._steer, self._follow):
            for i, m in enumerate(q):
                if m is old:
                    q[i] = new
                    return True
        return False

    async def _dequeue_steering(self) -> list[AgentMessage]:
        await self.hooks.before_steering()  # e.g. the causal wait, which may steer messages in first
        return _take(self._steer, self.steering_mode)

    async def _dequeue_follow_up(self) -> list[AgentMessage]:
        return _take(self._follow, self.follow_up_mode)

    # ------------------------------------------------------------ runs

    async def prompt(self, messages: list[AgentMessage]) -> list[AgentMessage]:
        if self._running:
            raise AgentBusy("the agent is already running; use steer() or follow_up()")
        return await self._guarded(lambda config: run_loop(messages, self.context, config, self._track))

    async def continue_(self) -> list[AgentMessage]:
        """Resume from the current context: queued steering first, then follow-ups (Pi's continue)."""
        if self._running:
            raise AgentBusy("the agent is already running")
        if self.messages and isinstance(self.messages[-1], AssistantMessage):
            queued = _take(self._steer, "all") or _take(self._follow, "all")
            if not queued:
                raise ValueError("nothing to continue: the last message is from the assistant")
            return await self.prompt(queued)
        return await self._guarded(lambda config: run_loop_continue(self.context, config, self._track))

    async def run_queued(self) -> list[AgentMessage]:
        """Pi's rule after a run ends: queued steering starts the next run, else the queued follow-ups
        do (more follow-ups stay queued; the loop takes them when it would stop). The queued messages
        are prompted, never a bare continue. After a yield the session's supervisor does not call
        this: the idle rules decide (services/runtime/runs/supervisor.py `left_to_run`)."""
        if self._running:
            raise AgentBusy("the agent is already running")
        queued = _take(self._steer, self.steering_mode) or _take(self._follow, self.follow_up_mode)
        if not queued:
            return []
        return await self.prompt(queued)

    def abort(self, note: str | None = None) -> None:
        """End the current run: the model stream is cut, running tools are stopped (bash kills its
        process group), tool calls that did not finish get `note` as their result."""
        self.signal.abort(note)

    async def _track(self, event: AgentEvent) -> None:
        if event.type == "agent_end":
            self.yielded = event.data.get("stopReason") == "yield"
        await self._emit(event)

    def _config(self) -> LoopConfig:
        """This run's configuration: built once, when the run starts, with a fresh abort signal (an
        abort that came before the run does not stop it)."""
        self.signal = AbortSignal()
        h = self.hooks
        return LoopConfig(stream=h.stream, get_steering=self._dequeue_steering, get_follow_up=self._dequeue_follow_up,
                          prepare_batch=h.prepare_batch, before_model_call=h.before_model_call, signal=self.signal,
                          budget=h.budget)

    async def _guarded(self, run: Callable[[LoopConfig], Awaitable[list[AgentMessage]]]) -> list[AgentMessage]:
        self._running = True
        self.yielded = False
        try:
            return await run(self._config())
        finally:
            self._running = False


def _take(queue: deque[AgentMessage], mode: QueueMode) -> list[AgentMessage]:
    if not queue:
        return []
    if mode == "one-at-a-time":
        return [queue.popleft()]
    out = list(queue)
    queue.clear()
    return out
