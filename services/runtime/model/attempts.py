"""The attempts of one model call (docs/architecture.md "Model calls: retries and recovery").

Each failure is classified (model/retry_policy.py) into Retry, Fatal or Repair:
- Retry: after the server's wait or a jittered backoff, within `max_retries` and the call's deadline;
  a 429's wait holds every call of the worker to that provider (model/provider_gate.py);
- Repair: a 400 caused by an item the harness replayed: the context is repaired (the item stripped or
  replaced), the repair is recorded (`on_repair`: a transcript entry), and the call is retried once;
- Fatal: the call becomes an assistant message with stop_reason "error", never an exception.
Before each attempt the provider's breaker and rate gate are asked; an open breaker fails the call at
once with a message that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2
import openai
from openai import AsyncOpenAI

from services.runtime.engine.types import AgentContext, AgentEvent, Emit
from services.runtime.model.call_guard import guarded
from services.runtime.model.convert import to_openai, to_responses_input
from services.runtime.model.model_api import ModelApi, ModelSettings, StreamError
from services.runtime.model.provider_gate import Provider
from services.runtime.model.retry_policy import (
    DeadlineExceeded,
    Failure,
    Fatal,
    IdleStream,
    Outcome,
    Repair,
    Retry,
    RetryPolicy,
    classify,
    failure_of,
    retry_wait,
)
from services.runtime.model.sse import Activity, ReadGate
from shared.contracts.records.messages import AgentMessage, AssistantMessage, ToolCall
from shared.history.history_repair import RepairAction, has_target, repaired

CALL_ERRORS = (openai.APIError, httpx2.HTTPError, StreamError, IdleStream, DeadlineExceeded)


class CallObserver(Protocol):
    """What the attempts report (the runtime's Prometheus counters, services/runtime/model_metrics.py)."""

    def error(self, failure: Failure) -> None: ...
    def retry(self, reason: str) -> None: ...
    def waited(self, cause: str, seconds: float) -> None: ...
    def repair(self, action: str) -> None: ...
    def finish(self, reason: str) -> None: ...


class _Quiet:
    def error(self, failure: Failure) -> None: ...
    def retry(self, reason: str) -> None: ...
    def waited(self, cause: str, seconds: float) -> None: ...
    def repair(self, action: str) -> None: ...
    def finish(self, reason: str) -> None: ...


QUIET = _Quiet()


@dataclass(frozen=True)
class HistoryRepair:
    """A repair of the context: `action` on `messages` (every message before now when `everything`)."""

    action: RepairAction
    messages: list[AgentMessage]
    everything: bool
    error: str


OnRepair = Callable[[HistoryRepair], Awaitable[object]]
# Told of every attempt that failed after it was sent, with what it had streamed: the provider may
# bill it (docs/costs.md "Every token counted"); it is recorded as a failed attempt.
OnFailed = Callable[[AssistantMessage], Awaitable[object]]


@dataclass(frozen=True)
class CallLimits:
    """Of every call of a worker (the retry count and backoff are the session's ModelSettings)."""

    jitter: float = 0.25  # the fraction of a wait added at random (retry_policy.retry_wait)
    idle_s: float = 300.0  # no bytes for this long: the stream is idle (0: no idle watch)
    deadline_s: float = 0.0  # all attempts and waits of one call (0: none)


@dataclass
class Attempts:
    client: AsyncOpenAI
    settings: ModelSettings
    limits: CallLimits
    gate: ReadGate | None = None
    opened: Callable[[], None] | None = None
    provider: Provider | None = None
    observer: CallObserver = QUIET
    on_repair: OnRepair | None = None
    on_failed: OnFailed | None = None

    async def run(self, api: ModelApi, context: AgentContext, body: dict[str, Any], emit: Emit,
                  signal: asyncio.Event) -> tuple[AssistantMessage, int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.deadline_s if self.limits.deadline_s > 0 else None
        attempt, repaired_once = 0, False
        last: str | None = None  # the previous attempt's error, told with a refusal that follows it
        while True:
            partial = AssistantMessage(model=self.settings.model, api=api.name)
            refused = await self._admit(signal, deadline)
            if refused is not None and last is not None:
                refused = f"{last}; then {refused}"
            if refused is not None:  # `attempts` counts the requests sent (at least one, for the event)
                return (_aborted(partial) if signal.is_set() else _failed(partial, refused)), max(attempt, 1)
            attempt += 1
            try:
                message = await self._one(api, body, partial, emit, signal, deadline)
            except CALL_ERRORS as exc:
                if self.opened is not None:
                    self.opened()  # a failed attempt's start is over too: no slot held through a backoff
                failure = failure_of(exc)
                if self.on_failed is not None:
                    await self.on_failed(partial)  # before a repair or a fatal end drops what it streamed
                outcome = Fatal(f"the model call's deadline ({self.limits.deadline_s:g} s) passed") \
                    if isinstance(exc, DeadlineExceeded) else classify(failure)
                self._account(failure, outcome)
                if isinstance(outcome, Repair) and not repaired_once and await self._repair(context, outcome, emit):
                    repaired_once = True
                    body = api.body(context, self.settings)  # the request rebuilt from the repaired context
                    continue
                last = _reason(outcome)
                verdict = self._wait_for(outcome, attempt, signal, deadline)
                if isinstance(verdict, str):
                    return _failed(partial, _tried(verdict, attempt)), attempt
                await emit(AgentEvent(type="message_update", data={
                    "restart": True, "retryInS": round(verdict, 3), "reason": _tried(_reason(outcome), attempt)}))
                self.observer.retry(failure.label)
                if not await self._sleep(verdict, signal, "backoff"):
                    partial.stop_reason = "aborted"
                    return partial, attempt
                continue
            if message is None or message.stop_reason == "aborted":
                if self.provider is not None:
                    self.provider.breaker.released()  # no verdict on the provider
                return _aborted(partial), attempt
            if self.provider is not None:
                self.provider.breaker.success()
            return message, attempt

    async def _one(self, api: ModelApi, body: dict[str, Any], partial: AssistantMessage, emit: Emit,
                   signal: asyncio.Event, deadline: float | None) -> AssistantMessage | None:
        slots = self.provider.slots if self.provider is not None else None
        if slots is not None:
            started = asyncio.get_running_loop().time()
            await slots.acquire()
            self.observer.waited("limiter", asyncio.get_running_loop().time() - started)
        activity = Activity(asyncio.get_running_loop().time())
        try:
            return await guarded(lambda: api.consume(self.client, body, partial, emit, signal, self.gate, self.opened),
                                 signal, self.limits.idle_s, deadline, activity)
        finally:
            if slots is not None:
                slots.release()
            if self.provider is not None and activity.headers is not None:
                self.provider.gate.observe(activity.headers)  # `x-ratelimit-*` of a 200 too (reference §4.2)

    async def _admit(self, signal: asyncio.Event, deadline: float | None) -> str | None:
        """None when the call may go (after the provider's rate gate, if it holds calls back); else why not."""
        if self.provider is None:
            return None
        closed_for = self.provider.breaker.admit()
        if closed_for is not None:
            return (f"the model provider is failing ({self.provider.breaker.failures} errors in a row): calls to it "
                    f"are paused for {closed_for:.0f} s more (circuit breaker)")
        wait = self.provider.gate.wait_s()
        if wait <= 0:
            return None
        # Jittered like a retry: the calls the gate held do not all go at the instant it opens.
        wait *= 1 + self.limits.jitter * random.random()
        if deadline is not None and asyncio.get_running_loop().time() + wait > deadline:
            self.provider.breaker.released()
            return f"the model provider asks to wait {wait:.1f} s, past the call's deadline"
        if not await self._sleep(wait, signal, "limiter"):
            self.provider.breaker.released()
            return "aborted"
        return None

    def _account(self, failure: Failure, outcome: Outcome) -> None:
        self.observer.error(failure)
        provider = self.provider
        if provider is None:
            return
        provider.gate.observe(failure.headers)
        rate_limited = failure.status == 429 or failure.code in ("rate_limit_exceeded", "too_many_requests", "slow_down")
        if isinstance(outcome, Retry) and outcome.server_wait_s is not None and rate_limited:
            provider.gate.hold(outcome.server_wait_s)  # the worker's other calls wait too (no stampede)
        if isinstance(outcome, Retry) and outcome.provider_fault:
            provider.breaker.failure()
        else:
            provider.breaker.released()

    @property
    def policy(self) -> RetryPolicy:
        s = self.settings
        return RetryPolicy(s.max_retries, s.retry_base_s, s.retry_max_s, self.limits.jitter)

    def _wait_for(self, outcome: Outcome, attempt: int, signal: asyncio.Event, deadline: float | None) -> float | str:
        """The wait before the next attempt, or why there is none (the call's error message)."""
        policy = self.policy
        if not isinstance(outcome, Retry) or attempt > policy.max_retries or signal.is_set():
            return _reason(outcome)
        if outcome.server_wait_s is not None and outcome.server_wait_s > policy.max_s:
            return f"{outcome.reason} (the server asks to wait {outcome.server_wait_s:.0f} s)"
        wait = retry_wait(outcome, attempt, policy)
        if deadline is not None and asyncio.get_running_loop().time() + wait > deadline:
            return f"{outcome.reason} (a retry in {wait:.1f} s would pass the call's deadline)"
        return wait

    async def _sleep(self, seconds: float, signal: asyncio.Event, cause: str) -> bool:
        """Waits, unless the abort comes first (False then)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(signal.wait(), seconds)
        self.observer.waited(cause, seconds)
        return not signal.is_set()

    async def _repair(self, context: AgentContext, outcome: Repair, emit: Emit) -> bool:
        """Repairs the context in place and records it; False when there is nothing to repair."""
        fix = plan_repair(context.messages, outcome, self.settings)
        if fix is None:
            return False
        targets = {id(m) for m in fix.messages}
        context.messages[:] = [repaired(m, fix.action) if id(m) in targets else m for m in context.messages]
        if self.on_repair is not None:
            await self.on_repair(fix)
        self.observer.repair(fix.action)
        await emit(AgentEvent(type="message_update", data={
            "restart": True, "retryInS": 0, "reason": f"history repaired ({fix.action}): {outcome.reason}"}))
        return True


def plan_repair(messages: list[AgentMessage], outcome: Repair, settings: ModelSettings) -> HistoryRepair | None:
    """Which messages a repair changes: the one the API's `param` names (an item of the request),
    else, for reasoning and images, every message that has some."""
    action: RepairAction = {"reasoning": "strip_reasoning", "image": "remove_images", "item": "redact"}[outcome.kind]  # type: ignore[assignment]
    index = outcome.item_index
    owner = item_owner(messages, index, settings) if index is not None else None
    if owner is not None and has_target(messages[owner], action) and action != "strip_reasoning":
        return HistoryRepair(action, [messages[owner]], False, outcome.reason)
    if action == "redact":
        return None  # a filter that names no item of ours: nothing safe to remove
    hit = [m for m in messages if has_target(m, action)]
    return HistoryRepair(action, hit, True, outcome.reason) if hit else None


def item_owner(messages: list[AgentMessage], index: int, settings: ModelSettings) -> int | None:
    """The message whose conversion holds item `index` of the request (Responses `input`, or Chat
    `messages` after the system message). Rare (a refused request): converting prefixes is fine."""
    role = settings.trusted_role
    count = 1 if settings.api == "chat" else 0
    if index < count:
        return None
    for i, m in enumerate(messages):
        if settings.api == "chat":
            count = len(to_openai("", messages[: i + 1], trusted_role=role))
        else:
            count += len(to_responses_input([m], settings.model, trusted_role=role))
        if count > index:
            return i
    return None


def _reason(outcome: Outcome) -> str:
    return outcome.reason


def _tried(text: str, attempt: int) -> str:
    return text if attempt == 1 else f"{text} (after {attempt} attempts)"


def _aborted(partial: AssistantMessage) -> AssistantMessage:
    """What an aborted stream leaves: the text streamed so far, no tool calls (none of them started,
    and a half-streamed call has no valid arguments)."""
    partial.content = [c for c in partial.content if not isinstance(c, ToolCall)]
    partial.stop_reason = "aborted"
    return partial


def _failed(partial: AssistantMessage, error: str) -> AssistantMessage:
    partial.content = []  # never half a message: what an interrupted stream said is not kept
    partial.stop_reason = "error"
    partial.error_message = error
    return partial
