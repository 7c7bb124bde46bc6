"""One model call through the official `openai` client, streamed, with tools, over either API
(engine/model_api.py: Responses or Chat Completions).

Emits message_start / message_update (text deltas) and one `model_request` event per call: the
prefix hash, the prompt tokens we count (text, plus the images by OpenAI's formula), the tokens shared with the previous request, and what the
API reported (input, cached, output and reasoning tokens). 429, 5xx and dropped connections are
retried with backoff (Retry-After honoured), bounded; then, like every provider error, the call
becomes an assistant message with stop_reason "error" (no half message: content only from a
complete stream), never an exception out of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
from array import array
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI

from shared.contracts.events import ModelRequestData
from shared.contracts.messages import AssistantMessage, ToolCall, Usage
from shared.tokens import TokenCounter, message_images, refs_tokens, shared_prefix

from .chat_api import ChatApi
from .model_api import ModelApi, ModelSettings, StreamError, stand_in
from .responses_api import RETRYABLE_CODES, ResponsesApi
from .spans import model_span, record_reply
from .sse import ReadGate
from .types import AgentContext, AgentEvent, Emit, Tool

__all__ = ["ModelSettings", "OpenAIStream", "PieceTokens", "prefix_hash", "request_pieces"]

APIS: dict[str, ModelApi] = {"chat": ChatApi(), "responses": ResponsesApi()}
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def prefix_hash(system_prompt: str, tools: list[Tool]) -> str:
    """sha256 of the static part of every request: system prompt + tool schemas, canonical JSON."""
    blob = system_prompt + "\n" + json.dumps([t.schema() for t in tools], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def request_pieces(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
    """A Chat Completions request as the provider sees it, in order (see ChatApi.pieces)."""
    return ChatApi().pieces({"messages": messages, "tools": tools})


class PieceTokens:
    """Token ids per request piece, reused across the requests of one session (a request repeats
    the previous one plus a few messages). Compact arrays: an idle session keeps little memory."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._cache: dict[str, array[int]] = {}

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


def sent_images(context: AgentContext, settings: ModelSettings) -> list[tuple[str, int]]:
    """Each image part of a request as (its stand-in, its tokens by OpenAI's formula for the model):
    the pieces count an image as a short stand-in (engine/model_api.py `without_image_data`), so each
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


def retry_delay(exc: BaseException, attempt: int, settings: ModelSettings) -> float:
    """Retry-After (ms or seconds or an HTTP date) when the server sent one, else exponential backoff
    with jitter; never above retry_max_s."""
    response = getattr(exc, "response", None)
    headers = response.headers if isinstance(response, httpx2.Response) else {}
    wait: float | None = None
    with contextlib.suppress(ValueError, TypeError):
        if "retry-after-ms" in headers:
            wait = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            raw = headers["retry-after"]
            try:
                wait = float(raw)
            except ValueError:
                wait = parsedate_to_datetime(raw).timestamp() - __import__("time").time()
    if wait is None:
        wait = settings.retry_base_s * 2 ** (attempt - 1) * (0.75 + random.random() / 2)
    return max(0.0, min(wait, settings.retry_max_s))


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUS
    if isinstance(exc, StreamError):
        return exc.retryable
    if isinstance(exc, openai.APIError) and exc.code in RETRYABLE_CODES:
        return True  # an error inside a Chat Completions stream (`data: {"error": ...}`)
    return isinstance(exc, (openai.APIConnectionError, httpx2.HTTPError))


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
    _pieces: PieceTokens | None = None
    _prefix_hash: tuple[str, str] | None = None

    async def __call__(self, context: AgentContext, emit: Emit, signal: asyncio.Event) -> AssistantMessage:
        api = APIS[self.settings.api]
        body = api.body(context, self.settings)
        if self._pieces is None:
            self._pieces = PieceTokens(self.counter)
        pieces = api.pieces(body)
        tokens = self._pieces.encode(pieces)
        sent = sent_images(context, self.settings)
        images = sum(cost for _, cost in sent)
        shared = shared_prefix(self.previous_tokens, tokens)
        if sent and shared:
            shared += shared_image_tokens(self.previous_pieces, pieces, sent)
        self.previous_tokens, self.previous_pieces = tokens, pieces
        self.last_prompt_tokens = len(tokens) + images
        static = self.static_prefix or context.system_prompt
        # The tools change only with GAMMA_DYNAMIC_TOOLS; a connector's schema can change under the same
        # name (a new registration builds new parameter objects), so their identities are in the key.
        names = static + "\0" + ",".join(f"{t.name}:{id(t.parameters)}" for t in context.tools)
        if self._prefix_hash is None or self._prefix_hash[0] != names:
            # The prompt and tools rarely change in a session: hash them once per tool set.
            self._prefix_hash = (names, prefix_hash(static, context.tools))
        start = AssistantMessage(model=self.settings.model, api=api.name)
        await emit(AgentEvent(type="message_start", data={"message": start.model_dump(by_alias=True)}))
        with model_span(self.settings.model, api.name) as span:
            message, attempts = await self._attempts(api, body, emit, signal)
            if message.stop_reason == "aborted" and not (message.usage.input or message.usage.output):
                message.usage = estimated_usage(self.last_prompt_tokens, self.counter.count(message.text()))
            record_reply(span, message, attempts)
        u = message.usage
        await emit(AgentEvent(type="model_request", data=ModelRequestData(
            prefix_sha256=self._prefix_hash[1], prompt_tokens=self.last_prompt_tokens, image_tokens=images,
            shared_prefix_tokens=shared,
            encoding=self.counter.encoding, message_count=len(body.get("messages") or body.get("input") or []),
            api=api.name, input_tokens=u.input, cached_tokens=u.cache_read, output_tokens=u.output,
            reasoning_tokens=u.reasoning, cache_write_tokens=u.cache_write, attempts=attempts,
        ).model_dump()))
        return message

    async def _attempts(self, api: ModelApi, body: dict[str, Any], emit: Emit,
                        signal: asyncio.Event) -> tuple[AssistantMessage, int]:
        attempt = 0
        while True:
            attempt += 1
            partial = AssistantMessage(model=self.settings.model, api=api.name)
            try:
                message = await _abortable(api.consume(self.client, body, partial, emit, signal, self.gate, self.opened), signal)
                if message is None or message.stop_reason == "aborted":
                    return _aborted(partial), attempt
                return message, attempt
            except (openai.APIError, httpx2.HTTPError, StreamError) as exc:
                if self.opened is not None:
                    self.opened()  # a failed attempt's start is over too: no slot held through a backoff
                if not retryable(exc) or attempt > self.settings.max_retries or signal.is_set():
                    return _failed(partial, _describe(exc, attempt)), attempt
                delay = retry_delay(exc, attempt, self.settings)
                # Deltas of a dropped attempt were shown: the client starts the message over.
                await emit(AgentEvent(type="message_update", data={"restart": True, "retryInS": round(delay, 3),
                                                                    "reason": _describe(exc, attempt)}))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(signal.wait(), delay)
                if signal.is_set():
                    partial.stop_reason = "aborted"
                    return partial, attempt


async def _abortable(call: Coroutine[Any, Any, AssistantMessage], signal: asyncio.Event) -> AssistantMessage | None:
    """The call's message, or None when the abort signal came first: the call is cancelled then (the
    stream closes and gives its connection back), even while it waits for a first chunk."""
    task = asyncio.ensure_future(call)
    stopper = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return None


def estimated_usage(prompt_tokens: int, streamed_tokens: int) -> Usage:
    """The usage of a request the abort cancelled before the API reported it: the prompt as counted
    before it was sent, and the text streamed so far (marked estimated)."""
    return Usage(input=prompt_tokens, output=streamed_tokens, total_tokens=prompt_tokens + streamed_tokens,
                 estimated=True)


def _aborted(partial: AssistantMessage) -> AssistantMessage:
    """What an aborted stream leaves: the text streamed so far, no tool calls (none of them started,
    and a half-streamed call has no valid arguments)."""
    partial.content = [c for c in partial.content if not isinstance(c, ToolCall)]
    partial.stop_reason = "aborted"
    return partial


def _describe(exc: BaseException, attempt: int) -> str:
    if isinstance(exc, openai.APIStatusError):
        text = f"{exc.status_code} {_error_text(exc)}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text if attempt == 1 else f"{text} (after {attempt} attempts)"


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            code = err.get("code")
            msg = err.get("message", "")
            return f"{code}: {msg}" if code else str(msg)
    return str(exc.message)


def _failed(partial: AssistantMessage, error: str) -> AssistantMessage:
    partial.content = []  # never half a message: what an interrupted stream said is not kept
    partial.stop_reason = "error"
    partial.error_message = error
    return partial
