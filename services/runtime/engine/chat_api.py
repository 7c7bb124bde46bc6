"""Chat Completions (any OpenAI-compatible server): the request body and the streamed reply."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Literal

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion
from pydantic import ValidationError

from shared.contracts.messages import AssistantMessage, Usage

from .convert import Images, to_openai
from .model_api import ModelSettings, StreamError, assemble, finish, without_image_data
from .sse import ReadGate, json_reads, open_stream
from .types import AgentContext, AgentEvent, Emit


def chat_effort(settings: ModelSettings, tools: bool) -> str | None:
    """`reasoning_effort` on Chat: the one asked for where the model accepts it. From gpt-5.4 on, Chat
    refuses function tools unless the effective effort is `none`, even when none is sent (gpt-5.6
    reasons at `medium` by default: reference §2.1), so a session on Chat sends `none` there
    (docs/models.md "Which API")."""
    if tools and settings.caps.chat_tools_need_effort_none and "none" in settings.caps.efforts:
        return "none"
    return settings.effort


class ChatApi:
    name: Literal["chat"] = "chat"

    def body(self, context: AgentContext, settings: ModelSettings) -> dict[str, Any]:
        """Built from the model's catalogue entry (settings.caps): only the parameters it accepts, and
        no explicit nulls (reference §2.1, §2.2)."""
        caps = settings.caps
        body: dict[str, Any] = {
            "model": settings.model,
            "messages": to_openai(context.system_prompt, context.messages, trusted_role=settings.trusted_role,
                                  images=Images(settings.images, settings.image_detail, caps.vision),
                                  system_role="system" if caps.developer_role else "user"),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if context.tools:
            body["tools"] = [t.schema() for t in context.tools]
            if caps.parallel_tool_calls.chat:  # o-series refuse it on Chat, even `false` (§2.2)
                body["parallel_tool_calls"] = True
        if effort := chat_effort(settings, bool(context.tools)):
            body["reasoning_effort"] = effort
        if settings.cache_key and settings.chat_cache_key:
            body["prompt_cache_key"] = settings.cache_key
        if caps.max_output is not None and (cap := settings.output_cap) is not None:
            # Counts reasoning tokens; `max_tokens` is refused by reasoning models (§2.2). Sent to
            # catalogued models only: an unknown server may not know the field (§7.2).
            body["max_completion_tokens"] = cap
        return body

    def pieces(self, body: dict[str, Any]) -> list[str]:
        """Tools and system first, then one piece per message (tokenized separately, once each)."""
        messages, tools = body["messages"], body.get("tools", [])
        head = json.dumps({"tools": tools, "system": messages[0]}, ensure_ascii=False, separators=(",", ":"))
        return [head, *(json.dumps(without_image_data(m), ensure_ascii=False, separators=(",", ":"))
                        for m in messages[1:])]

    async def consume(self, client: AsyncOpenAI, body: dict[str, Any], partial: AssistantMessage, emit: Emit,
                      signal: asyncio.Event, gate: ReadGate | None = None,
                      opened: Callable[[], None] | None = None) -> AssistantMessage:
        # The body is plain JSON in the wire format already. `chat.completions.create` would first walk
        # all of it against the params' TypedDicts (~1 ms of event loop per call, growing with the
        # context): the same POST, sent as is, read without the SDK's per-chunk models (engine/sse.py).
        reply = _Reply()
        response = await open_stream(client, "/chat/completions", body)
        if opened is not None:
            opened()  # the turn's start is over (services/runtime/turn_starts.py)
        try:
            async for chunks in json_reads(response):
                if signal.is_set():
                    partial.content = assemble(reply.text, reply.calls)
                    partial.stop_reason = "aborted"
                    return partial
                # One event for the text of one read (the Outbox would merge the deltas anyway).
                deltas = [delta for chunk in chunks for delta in reply.take(chunk)]
                if deltas:
                    await emit(AgentEvent(type="message_update", data={"delta": "".join(deltas)}))
                    if gate is not None and text_last(chunks[-1]):
                        await gate.wait()  # the next tokens: one read just before the next tick (sender.py)
        except asyncio.CancelledError:
            partial.content = assemble(reply.text, {})  # aborted: the text the user saw stays
            raise
        finally:
            await response.aclose()  # a failed or cut stream gives its connection back
        completion = reply.validated()
        if completion.usage is not None:
            u = completion.usage
            cached, details = u.prompt_tokens_details, u.completion_tokens_details
            partial.usage = Usage(input=u.prompt_tokens, output=u.completion_tokens,
                                  cache_read=int((cached.cached_tokens if cached else 0) or 0),
                                  cache_write=int((getattr(cached, "cache_write_tokens", 0) if cached else 0) or 0),
                                  reasoning=int((details.reasoning_tokens if details else 0) or 0),
                                  total_tokens=u.total_tokens)
        partial.content = assemble(reply.text, reply.calls)
        partial.refusal = "".join(reply.refusal) or None
        finish_reason = reply.finish_reason
        return finish(partial, length=finish_reason == "length", tool_use=finish_reason == "tool_calls")


class _Reply:
    """The chunks of one streamed completion, merged (first choice; one is all the harness asks for)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.head: dict[str, Any] = {}

    def take(self, chunk: dict[str, Any]) -> list[str]:
        """Merge one chunk; returns its text deltas."""
        if not self.head:
            self.head = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        deltas: list[str] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if content := delta.get("content"):
                self.text.append(content)
                deltas.append(content)
            if refusal := delta.get("refusal"):
                self.refusal.append(refusal)
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(int(tc.get("index") or 0), {"id": "", "name": "", "arguments": ""})
                fn = tc.get("function") or {}
                if tc.get("id"):
                    slot["id"] = tc["id"]
                if fn.get("name"):
                    slot["name"] = fn["name"]
                if fn.get("arguments"):
                    slot["arguments"] += fn["arguments"]
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return deltas

    def validated(self) -> ChatCompletion:
        """The assembled completion, checked against the openai package's type (once per call)."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None,
                                   "refusal": "".join(self.refusal) or None}
        if self.calls:
            message["tool_calls"] = [{"id": c["id"] or f"call_{i}", "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for i, c in sorted(self.calls.items())]
        raw = {"id": self.head.get("id") or "chatcmpl", "object": "chat.completion",
               "created": self.head.get("created") or 0, "model": self.head.get("model") or "",
               "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason or "stop"}],
               "usage": self.usage}
        try:
            return ChatCompletion.model_validate(raw)
        except ValidationError as exc:
            raise StreamError(f"invalid completion from the API: {exc}", retryable=False) from exc


def text_last(chunk: dict[str, Any]) -> bool:
    """The read ended in streamed text (not the finish, the usage or a tool call's arguments)."""
    choices = chunk.get("choices") or []
    return bool(choices) and bool((choices[0].get("delta") or {}).get("content")) and not choices[0].get("finish_reason")
