"""One model call through `openai.AsyncOpenAI` chat completions, streamed, with tools.

Emits message_start / message_update (text deltas) and a `model_request` event per call (prefix
hash, prompt tokens, tokens shared with the previous request). Provider errors become an assistant
message with stop_reason "error", never an exception out of the loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from array import array
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import AsyncOpenAI, AsyncStream
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from shared.contracts.events import ModelRequestData
from shared.contracts.messages import AssistantMessage, TextContent, ToolCall, Usage

from ..tokens import TokenCounter, shared_prefix
from .convert import to_openai
from .types import AgentContext, AgentEvent, Emit, Tool


def prefix_hash(system_prompt: str, tools: list[Tool]) -> str:
    """sha256 of the static part of every request: system prompt + tool schemas, canonical JSON."""
    blob = system_prompt + "\n" + json.dumps([t.schema() for t in tools], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def request_pieces(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
    """The request as the provider sees it, in order: tools and system first, then one piece per
    message. Pieces are tokenized separately, so earlier messages are never tokenized twice."""
    head = json.dumps({"tools": tools, "system": messages[0]}, ensure_ascii=False, separators=(",", ":"))
    return [head, *(json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in messages[1:])]


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


@dataclass
class ModelSettings:
    model: str
    reasoning_effort: str | None = None


@dataclass
class OpenAIStream:
    """The StreamFn of one session: remembers the previous request's tokens for the cache metric."""

    client: AsyncOpenAI
    settings: ModelSettings
    counter: TokenCounter
    static_prefix: str = ""  # hashed with the tool schemas; defaults to the system prompt
    previous_tokens: array[int] = field(default_factory=lambda: array("I"))
    last_prompt_tokens: int = 0
    _pieces: PieceTokens | None = None
    _prefix_hash: tuple[str, str] | None = None

    async def __call__(self, context: AgentContext, emit: Emit, signal: asyncio.Event) -> AssistantMessage:
        messages = to_openai(context.system_prompt, context.messages)
        tools = [t.schema() for t in context.tools]
        if self._pieces is None:
            self._pieces = PieceTokens(self.counter)
        tokens = self._pieces.encode(request_pieces(messages, tools))
        shared = shared_prefix(self.previous_tokens, tokens)
        self.previous_tokens = tokens
        self.last_prompt_tokens = len(tokens)
        static = self.static_prefix or context.system_prompt
        if self._prefix_hash is None or self._prefix_hash[0] != static:
            # The prompt and tools never change in a session: hash them once.
            self._prefix_hash = (static, prefix_hash(static, context.tools))
        await emit(AgentEvent(type="model_request", data=ModelRequestData(
            prefix_sha256=self._prefix_hash[1],
            prompt_tokens=len(tokens),
            shared_prefix_tokens=shared,
            encoding=self.counter.encoding,
            message_count=len(messages),
        ).model_dump()))
        kwargs: dict[str, Any] = {
            "model": self.settings.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            kwargs["tools"] = tools
            kwargs["parallel_tool_calls"] = True
        if self.settings.reasoning_effort:
            kwargs["reasoning_effort"] = self.settings.reasoning_effort
        partial = AssistantMessage(model=self.settings.model)
        await emit(AgentEvent(type="message_start", data={"message": partial.model_dump(by_alias=True)}))
        try:
            return await self._consume(kwargs, partial, emit, signal)
        except openai.APIStatusError as exc:
            return _failed(partial, f"{exc.status_code} {_error_text(exc)}")
        except (openai.APIError, httpx_errors()) as exc:
            return _failed(partial, f"{type(exc).__name__}: {exc}")

    async def _consume(
        self, kwargs: dict[str, Any], partial: AssistantMessage, emit: Emit, signal: asyncio.Event
    ) -> AssistantMessage:
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish: str | None = None
        usage = Usage()
        # The body is already plain JSON in the wire format. `chat.completions.create` would first
        # walk all of it against the params' TypedDicts (`async_maybe_transform`): ~1 ms of event
        # loop per call at the start of a session, growing with the context. The same POST, sent as is.
        stream = await self.client.post("/chat/completions", body=kwargs, cast_to=ChatCompletion, stream=True,
                                        stream_cls=AsyncStream[ChatCompletionChunk])
        async for chunk in stream:
            if signal.is_set():
                await stream.close()
                partial.content = _content(text, calls)
                partial.stop_reason = "aborted"
                return partial
            if chunk.usage is not None:
                cached = getattr(chunk.usage, "prompt_tokens_details", None)
                usage = Usage(
                    input=chunk.usage.prompt_tokens,
                    output=chunk.usage.completion_tokens,
                    cache_read=int(getattr(cached, "cached_tokens", 0) or 0),
                    total_tokens=chunk.usage.total_tokens,
                )
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    await emit(AgentEvent(type="message_update", data={"delta": delta.content}))
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function and tc.function.name:
                        slot["name"] = tc.function.name
                    if tc.function and tc.function.arguments:
                        slot["arguments"] += tc.function.arguments
                if choice.finish_reason:
                    finish = choice.finish_reason
        partial.content = _content(text, calls)
        partial.usage = usage
        if partial.tool_calls() or finish == "tool_calls":
            partial.stop_reason = "toolUse"
        elif finish == "length":
            partial.stop_reason = "length"
        else:
            partial.stop_reason = "stop"
        return partial


def httpx_errors() -> type[Exception]:
    import httpx

    return httpx.HTTPError


def _content(text: list[str], calls: dict[int, dict[str, Any]]) -> list[Any]:
    content: list[Any] = []
    if text:
        content.append(TextContent(text="".join(text)))
    for index in sorted(calls):
        slot = calls[index]
        try:
            args = json.loads(slot["arguments"]) if slot["arguments"] else {}
        except json.JSONDecodeError:
            # Keep the raw text: the tool will answer with a validation error the model can fix.
            args = {"__invalid_json__": slot["arguments"]}
        if not isinstance(args, dict):
            args = {"__invalid_json__": slot["arguments"]}
        content.append(ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"], arguments=args))
    return content


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
    partial.stop_reason = "error"
    partial.error_message = error
    return partial
