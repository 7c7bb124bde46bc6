"""The Responses API, stateless (`store: false`): the harness owns the conversation and sends it whole.

- the static prefix (system prompt) is `instructions`, not a first developer item: it stays a field
  of its own ahead of `input`, so nothing the conversation does (a compaction rewriting the items, a
  summary message) can land before it; for the provider's prefix cache the two are the same bytes
  in the same place (tools, then instructions, then input);
- tools in the flat function-tool shape, in the toolset's fixed order;
- reasoning items are taken from `response.output_item.done` (the `.added` one is incomplete), kept
  verbatim with the assistant message and replayed to the same model (convert.to_responses_input);
- `prompt_cache_key` routes a session's requests to the same cache; never `previous_response_id`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Literal

from openai import AsyncOpenAI
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseReasoningItem,
    ResponseUsage,
)
from pydantic import TypeAdapter, ValidationError

from shared.contracts.messages import AssistantMessage, TextContent, ThinkingContent, ToolCall, Usage

from .convert import Images, to_responses_input
from .model_api import ModelSettings, StreamError, finish, parse_arguments, without_image_data
from .sse import ReadGate, json_reads, open_stream
from .types import AgentContext, AgentEvent, Emit, Tool

RETRYABLE_CODES = frozenset({"server_error", "rate_limit_exceeded", "server_is_overloaded", "slow_down"})


def function_tool(tool: Tool) -> dict[str, Any]:
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": tool.parameters, "strict": False}


def reasoning_fields(settings: ModelSettings) -> dict[str, Any]:
    """`reasoning` and `include` of a request. A model that reasons (at the effort sent or at its
    default, reference §1.2) gets `include: ["reasoning.encrypted_content"]` whatever effort was
    asked: under `store:false` its reasoning items can only be replayed with their encrypted content
    (§1.1, §1.3). Summaries are asked for where the model gives them (§1.12)."""
    reasoning: dict[str, Any] = {}
    if settings.effort is not None:
        reasoning["effort"] = settings.effort
    out: dict[str, Any] = {}
    if settings.reasons:
        out["include"] = ["reasoning.encrypted_content"]
        if settings.caps.reasoning_summary:
            reasoning["summary"] = "auto"
    if reasoning:
        out["reasoning"] = reasoning
    return out


class ResponsesApi:
    name: Literal["responses"] = "responses"

    def body(self, context: AgentContext, settings: ModelSettings) -> dict[str, Any]:
        """Built from the model's catalogue entry (settings.caps): only the parameters it accepts, and
        no explicit nulls (reference §2.1)."""
        caps = settings.caps
        body: dict[str, Any] = {
            "model": settings.model,
            "instructions": context.system_prompt,
            "input": to_responses_input(context.messages, settings.model, trusted_role=settings.trusted_role,
                                        images=Images(settings.images, settings.image_detail, caps.vision),
                                        phase=caps.phase),
            "stream": True,
            "store": False,
        }
        if context.tools:
            body["tools"] = [function_tool(t) for t in context.tools]
            if caps.parallel_tool_calls.responses:
                body["parallel_tool_calls"] = True
        body.update(reasoning_fields(settings))
        if settings.cache_key:
            body["prompt_cache_key"] = settings.cache_key
        if (cap := settings.output_cap) is not None:
            body["max_output_tokens"] = cap
        return body

    def pieces(self, body: dict[str, Any]) -> list[str]:
        head = json.dumps({"tools": body.get("tools", []), "instructions": body["instructions"]},
                          ensure_ascii=False, separators=(",", ":"))
        return [head, *(json.dumps(without_image_data(i), ensure_ascii=False, separators=(",", ":"))
                        for i in body["input"])]

    async def consume(self, client: AsyncOpenAI, body: dict[str, Any], partial: AssistantMessage, emit: Emit,
                      signal: asyncio.Event, gate: ReadGate | None = None,
                      opened: Callable[[], None] | None = None) -> AssistantMessage:
        # Sent as is (the SDK's request transform walks every input item: ~1 ms a call, growing with
        # the conversation) and read without the SDK's per-event models (engine/sse.py).
        response = await open_stream(client, "/responses", body)
        if opened is not None:
            opened()  # the turn's start is over (services/runtime/turn_starts.py)
        state = _Reading()
        try:
            async for events in json_reads(response):
                if signal.is_set():
                    partial.content = state.so_far()
                    partial.stop_reason = "aborted"
                    return partial
                text: list[str] = []  # this read's text deltas: one event (the Outbox would merge them anyway)
                for event in events:
                    if event.get("type") == "response.output_text.delta":
                        text.append(event["delta"])
                        continue
                    if text:
                        await state.say(text, emit)
                        text = []
                    state.take(event, partial)
                if text:
                    await state.say(text, emit)
                    if gate is not None:
                        await gate.wait()  # the next tokens: one read just before the next tick (sender.py)
        except asyncio.CancelledError:
            partial.content = state.so_far()  # aborted: the items completed so far, and the text the user saw
            raise
        finally:
            await response.aclose()  # a failed or cut stream gives its connection back
        partial.content = state.content
        partial.refusal = "".join(state.refusal) or None
        return finish(partial, length=state.incomplete)


class _Reading:
    """What one streamed response has brought so far."""

    def __init__(self) -> None:
        self.content: list[Any] = []
        self.refusal: list[str] = []
        self.incomplete = False
        self.streaming: list[str] = []  # text deltas of the message item in progress (kept if aborted)

    def so_far(self) -> list[Any]:
        return [*self.content, TextContent(text="".join(self.streaming))] if self.streaming else self.content

    async def say(self, text: list[str], emit: Emit) -> None:
        self.streaming.extend(text)
        await emit(AgentEvent(type="message_update", data={"delta": "".join(text)}))

    def take(self, event: dict[str, Any], partial: AssistantMessage) -> None:
        kind = event.get("type")
        if kind == "response.output_item.done":
            self.streaming.clear()
            _take_item(_valid_item(event.get("item")), self.content, self.refusal)
        elif kind in ("response.completed", "response.incomplete"):
            self.incomplete = kind == "response.incomplete"
            response = event.get("response") or {}
            partial.usage = _usage(response.get("usage"))
            if isinstance(response.get("model"), str) and response["model"]:
                partial.snapshot = response["model"][:200]  # the snapshot its reasoning is bound to
        elif kind == "response.failed":
            err = (event.get("response") or {}).get("error") or {}
            raise StreamError(f"{err.get('code')}: {err.get('message')}" if err else "response failed",
                              retryable=err.get("code") in RETRYABLE_CODES)
        elif kind == "error":
            code, message = event.get("code"), str(event.get("message") or "error")
            raise StreamError(f"{code}: {message}" if code else message, retryable=code in RETRYABLE_CODES)


# The output items the harness keeps, checked against the openai package's types once per item;
# other item types (new ones included) are skipped.
ITEM_TYPES: dict[str, TypeAdapter[Any]] = {
    "message": TypeAdapter(ResponseOutputMessage),
    "function_call": TypeAdapter(ResponseFunctionToolCall),
    "reasoning": TypeAdapter(ResponseReasoningItem),
}
USAGE = TypeAdapter(ResponseUsage)


def _valid_item(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise StreamError(f"output item is not an object: {item!r:.200}", retryable=False)
    adapter = ITEM_TYPES.get(str(item.get("type")))
    if adapter is not None:
        try:
            adapter.validate_python(item)
        except ValidationError as exc:
            raise StreamError(f"invalid {item.get('type')} item from the API: {exc}", retryable=False) from exc
    return item  # kept as sent: a reasoning item is replayed verbatim


def _take_item(item: dict[str, Any], content: list[Any], refusal: list[str]) -> None:
    kind = item.get("type")
    if kind == "reasoning":
        summary = "\n".join(str(s.get("text", "")) for s in item.get("summary") or [])
        content.append(ThinkingContent(thinking=summary, item=item))
    elif kind == "message":
        for part in item.get("content") or []:
            if part.get("type") == "output_text" and part.get("text"):
                phase = item.get("phase")
                content.append(TextContent(text=part["text"],
                                           phase=phase if phase in ("commentary", "final_answer") else None))
            elif part.get("type") == "refusal":
                refusal.append(str(part.get("refusal", "")))
    elif kind == "function_call":
        content.append(ToolCall(id=item["call_id"], name=item["name"],
                                arguments=parse_arguments(item.get("arguments", ""))))


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    try:
        u = USAGE.validate_python(raw)
    except ValidationError as exc:
        raise StreamError(f"invalid usage from the API: {exc}", retryable=False) from exc
    return Usage(input=u.input_tokens, output=u.output_tokens,
                 cache_read=int(u.input_tokens_details.cached_tokens or 0),
                 cache_write=int(getattr(u.input_tokens_details, "cache_write_tokens", 0) or 0),
                 reasoning=int(u.output_tokens_details.reasoning_tokens or 0), total_tokens=u.total_tokens)
