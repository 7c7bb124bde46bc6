"""Engine data: tools as values, tool outcomes as values, events out, the loop's configuration."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from shared.contracts.records.messages import AgentMessage, AssistantMessage, ImageRef, ToolCall
from shared.contracts.streams.events import EventType
from shared.mcp.tool_schema import parameters_of


class ToolOutcome(BaseModel):
    """What a tool returns. Errors are values: a failing tool still yields an outcome."""

    content: str
    images: list[ImageRef] | None = None  # stored images the model sees with the text (shared/media/images.py)
    details: dict[str, Any] | None = None
    is_error: bool = False
    terminate: bool = False  # ends the run only when every result of the batch sets it (Pi)


@dataclass
class AgentEvent:
    """An engine event. `message` carries the typed message for message_* events (persistence)."""

    type: EventType
    data: dict[str, Any] = field(default_factory=dict)
    message: AgentMessage | None = None


Emit = Callable[[AgentEvent], Awaitable[None]]


@dataclass
class ToolContext:
    """What a tool sees besides its arguments: its call, the whole batch, the abort signal."""

    call: ToolCall
    batch: list[ToolCall]
    signal: asyncio.Event
    emit: Emit


ToolExecute = Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class Tool:
    """A tool as the model sees it. Ours declare their arguments as a model (`Tool.typed`,
    shared/mcp/tool_schema.py): the schema sent and the check of each call both come from it. A connector's
    tool carries the JSON schema its connector registered (`arguments` None)."""

    name: str
    description: str
    parameters: dict[str, Any]
    execute: ToolExecute
    arguments: type[BaseModel] | None = None

    @classmethod
    def typed(cls, name: str, description: str, arguments: type[BaseModel], execute: ToolExecute) -> Tool:
        return cls(name, description, parameters_of(arguments), execute, arguments)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class AgentContext:
    system_prompt: str
    messages: list[AgentMessage]
    tools: list[Tool]
    # The part of `system_prompt` every variant shares (services/runtime/skillset/prompt.py `static_prefix`):
    # where the breakpoint regime marks its first explicit cache breakpoint (docs/cache.md). Empty:
    # the whole prompt is one block.
    static_prefix: str = ""


# One model call: context in, a complete assistant message out (errors as stop_reason="error").
StreamFn = Callable[[AgentContext, Emit, asyncio.Event], Awaitable[AssistantMessage]]
MessagesFn = Callable[[], Awaitable[list[AgentMessage]]]
# Preflight for a tool batch: outcomes decided before any tool runs (e.g. a skill conflict).
PrepareBatch = Callable[[list[ToolCall]], Awaitable[dict[str, ToolOutcome]]]
BeforeModelCall = Callable[[AgentContext], Awaitable[None]]


async def _none() -> list[AgentMessage]:
    return []


async def _no_preflight(_: list[ToolCall]) -> dict[str, ToolOutcome]:
    return {}


async def _noop(_: AgentContext) -> None:
    return None


ABORT_NOTE = "Aborted before this tool call finished; its effects may be partial."


async def _nothing() -> None:
    return None


class AbortSignal(asyncio.Event):
    """A run's abort signal (Pi: the AbortSignal a run is given). `note` is the result of a tool call
    the abort stopped (or that had not finished when it came), so the model reads why the call ended
    (the user's Stop, an interrupt, a shutdown)."""

    def __init__(self) -> None:
        super().__init__()
        self.note = ABORT_NOTE

    def abort(self, note: str | None = None) -> None:
        self.note = note or ABORT_NOTE
        self.set()


@dataclass(frozen=True)
class RunBudget:
    """What one run may spend before it ends with a clear message (engine/loop.py; the runtime's
    settings GAMMA_RUN_MAX_MODEL_CALLS and GAMMA_RUN_MAX_TOKENS). 0: no bound."""

    model_calls: int = 0
    tokens: int = 0  # input + output tokens as the API reported them, summed over the run's calls


@dataclass(frozen=True)
class RunHooks:
    """What the session gives its Agent once: the Agent builds each run's LoopConfig from it (Pi's
    agent.ts builds the loop config per run)."""

    stream: StreamFn
    prepare_batch: PrepareBatch = _no_preflight
    before_model_call: BeforeModelCall = _noop
    before_steering: Callable[[], Awaitable[None]] = _nothing  # a wait before the steering is read
    budget: RunBudget = field(default_factory=RunBudget)


@dataclass(frozen=True)
class LoopConfig:
    """One run's configuration, built when the run starts and never changed (engine/agent.py)."""

    stream: StreamFn
    get_steering: MessagesFn = _none
    get_follow_up: MessagesFn = _none
    prepare_batch: PrepareBatch = _no_preflight
    before_model_call: BeforeModelCall = _noop
    signal: AbortSignal = field(default_factory=AbortSignal)
    budget: RunBudget = field(default_factory=RunBudget)


def chain(*hooks: BeforeModelCall) -> BeforeModelCall:
    """Several before-model-call hooks as one, run in order (the dynamic tool subset, then the compactor)."""
    async def before_model_call(context: AgentContext) -> None:
        for hook in hooks:
            await hook(context)

    return before_model_call
