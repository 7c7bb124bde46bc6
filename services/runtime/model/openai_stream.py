"""One model call through the official `openai` client, streamed, with tools, over either API
(model/model_api.py: Responses or Chat Completions).

Emits message_start / message_update (text deltas) and one `model_request` event per call: the
prefix hash, the prompt tokens we count (text, plus the images by OpenAI's formula), the tokens shared with the previous request, and what the
API reported (input, cached, output and reasoning tokens). Failures are retried, repaired or
reported by model/attempts.py; like every provider error, a call that fails for good becomes an
assistant message with stop_reason "error" (no half message: content only from a complete stream),
never an exception out of the loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from openai import AsyncOpenAI

from services.runtime.engine.spans import model_span, record_reply
from services.runtime.engine.types import AgentContext, AgentEvent, Emit, Tool
from services.runtime.model.attempts import QUIET, Attempts, CallLimits, CallObserver, OnRepair
from services.runtime.model.cache_watch import CacheWatch, Head, MissReport, head_of
from services.runtime.model.chat_api import ChatApi
from services.runtime.model.model_api import ModelApi, ModelSettings, stand_in
from services.runtime.model.provider_gate import Provider
from services.runtime.model.responses_api import ResponsesApi
from services.runtime.model.sse import ReadGate
from shared.catalogue import catalogue
from shared.contracts.records.messages import AssistantMessage, Usage
from shared.contracts.records.spend import Attempt, BudgetReachedData, Kind, UsageRow
from shared.contracts.streams.events import ModelRequestData
from shared.history.tokens import OFF_LOOP_CHARS, TokenCounter, message_images, refs_tokens, shared_prefix

__all__ = ["ModelSettings", "OpenAIStream", "PieceTokens", "prefix_hash", "request_pieces"]

APIS: dict[str, ModelApi] = {"chat": ChatApi(), "responses": ResponsesApi()}


def prefix_hash(system_prompt: str, tools: list[Tool]) -> str:
    """sha256 of the static part of every request: system prompt + tool schemas, canonical JSON."""
    blob = system_prompt + "\n" + json.dumps([t.schema() for t in tools], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def request_pieces(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
    """A Chat Completions request as the provider sees it, in order (see ChatApi.pieces)."""
    return ChatApi().pieces({"messages": messages, "tools": tools})


class SpendSink(Protocol):
    """Where a stream's usage rows go, and the budget check before each call (services/runtime/runs/spend.py)."""

    async def add(self, row: UsageRow) -> None: ...
    async def preflight(self, model: str, prompt_tokens: int, cached_tokens: int) -> BudgetReachedData | None: ...


class PieceTokens:
    """Token ids per request piece, reused across the requests of one session (a request repeats
    the previous one plus a few messages). Compact arrays: an idle session keeps little memory."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._cache: dict[str, array[int]] = {}

    async def prepare(self, pieces: list[str]) -> None:
        """Encode the long pieces not cached yet on threads, off the loop (shared/history/tokens.py
        `OFF_LOOP_CHARS`): a large new message is encoded once, without holding up the worker's other
        sessions; `encode` then finds it."""
        fresh = [p for p in dict.fromkeys(pieces[1:]) if len(p) >= OFF_LOOP_CHARS and p not in self._cache]
        if fresh:
            encoded = await asyncio.gather(*(asyncio.to_thread(self.counter.encode, p) for p in fresh))
            self._cache.update((p, array("I", t)) for p, t in zip(fresh, encoded, strict=True))

    def encode(self, pieces: list[str]) -> array[int]:
        out: array[int] = array("I")
        fresh: dict[str, array[int]] = {}
        for i, piece in enumerate(pieces):
            tokens = self._cache.get(piece)
            if tokens is None:
                # The head (tools + system prompt) is the same in every session of a variant.
                tokens = self.counter.encode_common(piece) if i == 0 else array("I", self.counter.encode(piece))
            fresh[piece] = tokens
            out.extend(tokens)
        self._cache = fresh  # forget pieces the conversation no longer has (after compaction)
        return out

    def tokens_of(self, piece: str) -> int:
        """The tokens of a piece of the last request encoded."""
        found = self._cache.get(piece)
        return len(found) if found is not None else 0


def sent_images(context: AgentContext, settings: ModelSettings) -> list[tuple[str, int]]:
    """Each image part of a request as (its stand-in, its tokens by OpenAI's formula for the model):
    the pieces count an image as a short stand-in (model/model_api.py `without_image_data`), so each
    image the request carries (its stored file still there) is added as the model bills it and the
    budget counts it."""
    source = settings.images
    if source is None:
        return []
    out: list[tuple[str, int]] = []
    for ref in (ref for m in context.messages for ref in message_images(m)):
        url = source.url(ref)
        if url is not None:
            out.append((stand_in(url), refs_tokens([ref], settings.model, settings.image_detail)))
    return out


def shared_image_tokens(before: list[str], now: list[str], images: list[tuple[str, int]]) -> int:
    """The image tokens inside the pieces two requests share from the start: those images are in the
    cacheable prefix as much as the text around them (the text prefix counts only their stand-ins)."""
    costs = dict(images)
    total = 0
    for a, b in zip(before, now, strict=False):
        if a != b:
            break
        total += sum(tokens * a.count(key) for key, tokens in costs.items())
    return total


@dataclass
class OpenAIStream:
    """The StreamFn of one session: remembers the previous request's tokens for the cache metric."""

    client: AsyncOpenAI
    settings: ModelSettings
    counter: TokenCounter
    static_prefix: str = ""  # hashed with the tool schemas; defaults to the system prompt
    gate: ReadGate | None = None  # the worker's read gate (sender.py), when its client's reads merge
    opened: Callable[[], None] | None = None  # told when a request's response is open (turn_starts.py)
    previous_tokens: array[int] = field(default_factory=lambda: array("I"))
    previous_pieces: list[str] = field(default_factory=list)
    last_prompt_tokens: int = 0
    limits: CallLimits = field(default_factory=CallLimits)  # retries, idle timeout, deadline (attempts.py)
    provider: Provider | None = None  # the worker's rate gate and breaker for this client's provider
    observer: CallObserver = QUIET  # the runtime's model call metrics
    on_repair: OnRepair | None = None  # records a history repair (a transcript entry)
    watch: CacheWatch | None = None  # the cache-break alarm (model/cache_watch.py)
    spend: SpendSink | None = None  # the session's ledger: usage rows and the budgets (services/runtime/runs/spend.py)
    kind: Kind = "agent"  # whose calls these are, in the usage rows (a subagent's stream says so)
    _pieces: PieceTokens | None = None
    _prefix_hash: tuple[str, str, Head] | None = None

    async def __call__(self, context: AgentContext, emit: Emit, signal: asyncio.Event) -> AssistantMessage:
        api = APIS[self.settings.api]
        body = api.body(context, self.settings)
        if self._pieces is None:
            self._pieces = PieceTokens(self.counter)
        pieces = api.pieces(body)
        await self._pieces.prepare(pieces)
        tokens = self._pieces.encode(pieces)
        sent = sent_images(context, self.settings)
        images = sum(cost for _, cost in sent)
        shared = shared_prefix(self.previous_tokens, tokens)
        if sent and shared:
            shared += shared_image_tokens(self.previous_pieces, pieces, sent)
        if self.spend is not None:  # the budgets, before anything is sent (services/runtime/runs/spend.py)
            stop = await self.spend.preflight(self.settings.model, len(tokens) + images, shared)
            if stop is not None:
                await emit(AgentEvent(type="budget_reached", data=stop.model_dump()))
                refused = AssistantMessage(model=self.settings.model, api=api.name, stop_reason="error",
                                           error_kind="budget", error_message=stop.message)
                await emit(AgentEvent(type="message_start", data={"message": refused.model_dump(by_alias=True)}))
                return refused  # never sent: no usage row, no model_request
        self.previous_tokens, self.previous_pieces = tokens, pieces
        self.last_prompt_tokens = len(tokens) + images
        static = self.static_prefix or context.system_prompt
        # The tools change only with GAMMA_DYNAMIC_TOOLS; a connector's schema can change under the same
        # name (a new registration builds new parameter objects), so their identities are in the key.
        names = static + "\0" + ",".join(f"{t.name}:{id(t.parameters)}" for t in context.tools)
        if self._prefix_hash is None or self._prefix_hash[0] != names:
            # The prompt and tools rarely change in a session: hash them once per tool set.
            tools_json = json.dumps([t.schema() for t in context.tools], sort_keys=True, separators=(",", ":"))
            self._prefix_hash = (names, prefix_hash(static, context.tools), head_of(context, tools_json, 0))
        start = AssistantMessage(model=self.settings.model, api=api.name)
        await emit(AgentEvent(type="message_start", data={"message": start.model_dump(by_alias=True)}))
        failed: list[AssistantMessage] = []  # the attempts recorded as failed (model/attempts.py)
        with model_span(self.settings.model, api.name) as span:
            message, attempts = await self._attempts(failed).run(api, context, body, emit, signal)
            self.observer.finish(message.stop_reason)
            if message.stop_reason == "aborted" and not (message.usage.input or message.usage.output):
                message.usage = estimated_usage(self.last_prompt_tokens, self.counter.count(message.text()))
            record_reply(span, message, attempts)
        attempt = attempt_of(message)
        if self.spend is not None and not any(m is message for m in failed):  # a failed last attempt is recorded
            await self.spend.add(usage_row(message, self.kind, attempt))
        u = message.usage
        self._watch(message, pieces, shared)
        await emit(AgentEvent(type="model_request", data=ModelRequestData(
            prefix_sha256=self._prefix_hash[1], prompt_tokens=self.last_prompt_tokens, image_tokens=images,
            shared_prefix_tokens=shared,
            encoding=self.counter.encoding, message_count=len(body.get("messages") or body.get("input") or []),
            api=api.name, input_tokens=u.input, cached_tokens=u.cache_read, output_tokens=u.output,
            reasoning_tokens=u.reasoning, cache_write_tokens=u.cache_write, attempts=attempts, attempt=attempt,
        ).model_dump()))
        return message

    def _watch(self, message: AssistantMessage, pieces: list[str], shared: int) -> None:
        """The cache-break alarm, for answered calls to OpenAI itself (`chat_cache_key`: ModelSettings),
        which reports its cache: a compatible server's usage may carry no cached tokens at all."""
        s, u = self.settings, message.usage
        if self.watch is None or self._prefix_hash is None or self._pieces is None or not s.cache_key \
                or not s.chat_cache_key or message.stop_reason == "error" or not u.input:
            return
        head = replace(self._prefix_hash[2], tokens=self._pieces.tokens_of(pieces[0]))
        miss = self.watch.check(f"{s.model}|{s.cache_key}", s.caps.cache_regime, head, self.last_prompt_tokens,
                                shared, u.cache_read)
        if miss is not None:
            self.watch.report(MissReport(miss, self.watch.session, self.watch.requests, self._prefix_hash[1],
                                         catalogue().resolve(s.model).family or "unknown", self.watch.variant))

    def _attempts(self, failed: list[AssistantMessage]) -> Attempts:
        async def on_failed(partial: AssistantMessage) -> None:
            """An attempt that failed once sent: billed for what it streamed (its input, counted here, and
            the text so far), nothing when it ended before any output (an HTTP error status)."""
            failed.append(partial)
            if self.spend is None:
                return
            if not (partial.usage.input or partial.usage.output) and partial.content:
                partial.usage = estimated_usage(self.last_prompt_tokens, self.counter.count(partial.text()))
            await self.spend.add(usage_row(partial, self.kind, "failed"))

        return Attempts(self.client, self.settings, self.limits, self.gate, self.opened, self.provider,
                        self.observer, self.on_repair, on_failed)


def attempt_of(message: AssistantMessage) -> Attempt:
    if message.stop_reason == "aborted":
        return "aborted"
    return "failed" if message.stop_reason == "error" and message.error_kind is None else "ok"


def usage_row(message: AssistantMessage, kind: Kind, attempt: Attempt) -> UsageRow:
    u = message.usage
    return UsageRow(model=message.model, kind=kind, attempt=attempt, input_tokens=u.input, cached_tokens=u.cache_read,
                    cache_write_tokens=u.cache_write, output_tokens=u.output, reasoning_tokens=u.reasoning,
                    estimated=u.estimated)


def estimated_usage(prompt_tokens: int, streamed_tokens: int) -> Usage:
    """The usage of a request the abort cancelled before the API reported it: the prompt as counted
    before it was sent, and the text streamed so far (marked estimated)."""
    return Usage(input=prompt_tokens, output=streamed_tokens, total_tokens=prompt_tokens + streamed_tokens,
                 estimated=True)
