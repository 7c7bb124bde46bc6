"""Chat Completions (any OpenAI-compatible server): the request body and the streamed reply."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from openai import AsyncOpenAI

from services.runtime.engine.types import AgentContext, AgentEvent, Emit
from services.runtime.model.breakpoints import CACHE_OPTIONS, chat_blocks, uses_breakpoints
from services.runtime.model.convert import Images, to_openai
from services.runtime.model.model_api import (
    ArgumentProgress,
    FinishReason,
    ModelSettings,
    assemble,
    finish,
    no_terminal,
    obj,
    piece_json,
    without_image_data,
)
from services.runtime.model.sse import ReadGate, json_reads, open_stream
from shared.contracts.records.messages import AssistantMessage
from shared.costs.usage import chat_usage


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
        if uses_breakpoints(settings):  # GPT-5.6+: the prompt as marked blocks (model/breakpoints.py)
            body["messages"][0]["content"] = chat_blocks(context)
            body["prompt_cache_options"] = dict(CACHE_OPTIONS)
        return body

    def pieces(self, body: dict[str, Any]) -> list[str]:
        """Tools and system first, then one piece per message (tokenized separately, once each)."""
        messages, tools = body["messages"], body.get("tools", [])
        return [piece_json({"tools": tools, "system": messages[0]}),
                *(piece_json(without_image_data(m)) for m in messages[1:])]

    async def consume(self, client: AsyncOpenAI, body: dict[str, Any], partial: AssistantMessage, emit: Emit,
                      signal: asyncio.Event, gate: ReadGate | None = None,
                      opened: Callable[[], None] | None = None) -> AssistantMessage:
        # The body is plain JSON in the wire format already. `chat.completions.create` would first walk
        # all of it against the params' TypedDicts (~1 ms of event loop per call, growing with the
        # context): the same POST, sent as is, read without the SDK's per-chunk models (model/sse.py).
        reply = Reply()
        response = await open_stream(client, "/chat/completions", body)
        if opened is not None:
            opened()  # the turn's start is over (services/runtime/runs/turn_starts.py)
        try:
            async for chunks in json_reads(response, reply.done):
                if signal.is_set():
                    partial.content = assemble(reply.text, reply.calls)
                    partial.stop_reason = "aborted"
                    return partial
                # One event for the text of one read (the Outbox would merge the deltas anyway).
                deltas = [delta for chunk in chunks for delta in reply.take(chunk)]
                await reply.progress.tell(emit)
                if deltas:
                    await emit(AgentEvent(type="message_update", data={"delta": "".join(deltas)}))
                    if gate is not None and text_last(chunks[-1]):
                        await gate.wait()  # the next tokens: one read just before the next tick (sender.py)
        except asyncio.CancelledError:
            partial.content = assemble(reply.text, {})  # aborted: the text the user saw stays
            raise
        finally:
            await response.aclose()  # a failed or cut stream gives its connection back
        return finish(partial, reply.finished(partial))


class Reply:
    """The chunks of one streamed completion, merged (first choice; one is all the harness asks for).
    Read as leniently as the SDK reads them (it does not validate): fields of the wrong type are
    skipped, never a failed reply (reference §5, §7.2)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.ended = False  # `data: [DONE]` arrived
        self.progress = ArgumentProgress()

    def done(self) -> None:
        self.ended = True

    def take(self, chunk: dict[str, Any]) -> list[str]:
        """Merge one chunk; returns its text deltas."""
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        deltas: list[str] = []
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or (choice.get("index") or 0) != 0:
                continue
            delta = obj(choice.get("delta"))
            if isinstance(content := delta.get("content"), str) and content:
                self.text.append(content)
                deltas.append(content)
            if isinstance(refusal := delta.get("refusal"), str) and refusal:
                self.refusal.append(refusal)
            calls = delta.get("tool_calls")
            for tc in calls if isinstance(calls, list) else []:
                if isinstance(tc, dict):
                    self._call(tc)
            if isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
                self.finish_reason = choice["finish_reason"]
        return deltas

    def _call(self, tc: dict[str, Any]) -> None:
        """One tool call delta, matched by `index`: id and name come on its first delta only (§3.2)."""
        raw = tc.get("index")
        index = raw if isinstance(raw, int) else 0
        slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        fn = obj(tc.get("function"))
        if isinstance(tc.get("id"), str) and tc["id"]:
            slot["id"] = tc["id"]
        if isinstance(fn.get("name"), str) and fn["name"]:
            slot["name"] = fn["name"]
        self.progress.start(str(index), slot["id"] or f"call_{index}", slot["name"])
        if isinstance(fn.get("arguments"), str) and fn["arguments"]:
            slot["arguments"] += fn["arguments"]
            self.progress.grow(str(index), fn["arguments"])

    def finished(self, partial: AssistantMessage) -> FinishReason:
        """The reply's finish once the body has ended: complete only with a `finish_reason` and `[DONE]`
        (reference §3.3); `length` and `content_filter` are their own outcomes."""
        if self.finish_reason is None or not self.ended:
            raise no_terminal("finish_reason and [DONE]" if self.finish_reason is None else "[DONE]")
        partial.usage = chat_usage(self.usage)
        partial.content = assemble(self.text, self.calls)
        partial.refusal = "".join(self.refusal) or None
        if self.finish_reason in ("length", "content_filter"):
            return "content_filter" if self.finish_reason == "content_filter" else "length"
        return "stop"


def text_last(chunk: dict[str, Any]) -> bool:
    """The read ended in streamed text (not the finish, the usage or a tool call's arguments)."""
    choices = chunk.get("choices") or []
    return bool(choices) and bool((choices[0].get("delta") or {}).get("content")) and not choices[0].get("finish_reason")
