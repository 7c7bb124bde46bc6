"""Chat Completions (any OpenAI-compatible server): the request body and the streamed reply."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from openai import AsyncOpenAI, AsyncStream
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from shared.contracts.messages import AssistantMessage, Usage

from .convert import to_openai
from .model_api import ModelSettings, assemble, finish
from .types import AgentContext, AgentEvent, Emit


class ChatApi:
    name: Literal["chat"] = "chat"

    def body(self, context: AgentContext, settings: ModelSettings) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": settings.model,
            "messages": to_openai(context.system_prompt, context.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if context.tools:
            body["tools"] = [t.schema() for t in context.tools]
            body["parallel_tool_calls"] = True
        if settings.reasoning_effort:
            body["reasoning_effort"] = settings.reasoning_effort
        if settings.cache_key and settings.chat_cache_key:
            body["prompt_cache_key"] = settings.cache_key
        return body

    def pieces(self, body: dict[str, Any]) -> list[str]:
        """Tools and system first, then one piece per message (tokenized separately, once each)."""
        messages, tools = body["messages"], body.get("tools", [])
        head = json.dumps({"tools": tools, "system": messages[0]}, ensure_ascii=False, separators=(",", ":"))
        return [head, *(json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in messages[1:])]

    async def consume(self, client: AsyncOpenAI, body: dict[str, Any], partial: AssistantMessage, emit: Emit,
                      signal: asyncio.Event) -> AssistantMessage:
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish_reason: str | None = None
        # The body is plain JSON in the wire format already. `chat.completions.create` would first walk
        # all of it against the params' TypedDicts (~1 ms of event loop per call, growing with the
        # context): the same POST, sent as is.
        stream = await client.post("/chat/completions", body=body, cast_to=ChatCompletion, stream=True,
                                   stream_cls=AsyncStream[ChatCompletionChunk])
        try:
            async for chunk in stream:
                if signal.is_set():
                    partial.content = assemble(text, {})
                    partial.stop_reason = "aborted"
                    return partial
                if chunk.usage is not None:
                    cached = chunk.usage.prompt_tokens_details
                    details = chunk.usage.completion_tokens_details
                    partial.usage = Usage(input=chunk.usage.prompt_tokens, output=chunk.usage.completion_tokens,
                                          cache_read=int((cached.cached_tokens if cached else 0) or 0),
                                          reasoning=int((details.reasoning_tokens if details else 0) or 0),
                                          total_tokens=chunk.usage.total_tokens)
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        await emit(AgentEvent(type="message_update", data={"delta": delta.content}))
                    if delta.refusal:
                        refusal.append(delta.refusal)
                    for tc in delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        if tc.id:
                            slot["id"] = tc.id
                        if tc.function and tc.function.name:
                            slot["name"] = tc.function.name
                        if tc.function and tc.function.arguments:
                            slot["arguments"] += tc.function.arguments
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
        except asyncio.CancelledError:
            partial.content = assemble(text, {})  # aborted: the text the user saw stays
            raise
        finally:
            await stream.close()  # a failed or cut stream gives its connection back
        partial.content = assemble(text, calls)
        partial.refusal = "".join(refusal) or None
        return finish(partial, length=finish_reason == "length", tool_use=finish_reason == "tool_calls")
