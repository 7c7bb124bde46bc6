"""The Responses API, stateless (`store: false`): the harness owns the conversation and sends it whole.

- the static prefix (system prompt) is `instructions`, not a first developer item: it stays a field
  of its own ahead of `input`, so nothing the conversation does (a compaction rewriting the items, a
  summary message) can land before it; for the provider's prefix cache the two are the same bytes
  in the same place (tools, then instructions, then input). For the models of the `breakpoints`
  cache regime (GPT-5.6+) it is the first input item instead, as content blocks carrying explicit
  cache breakpoints (model/breakpoints.py; docs/cache.md);
- tools in the flat function-tool shape, in the toolset's fixed order;
- reasoning items are taken from `response.output_item.done` (the `.added` one is incomplete), kept
  verbatim with the assistant message and replayed to the same model (convert.to_responses_input);
- `prompt_cache_key` routes a session's requests to the same cache; never `previous_response_id`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from openai import AsyncOpenAI

from services.runtime.engine.types import AgentContext, Emit, Tool
from services.runtime.model.breakpoints import CACHE_OPTIONS, responses_system_item, uses_breakpoints
from services.runtime.model.convert import Images, to_responses_input
from services.runtime.model.model_api import ModelSettings, finish, piece_json, without_image_data
from services.runtime.model.responses_reader import RETRYABLE_CODES, Reading
from services.runtime.model.sse import ReadGate, json_reads, open_stream
from shared.contracts.records.messages import AssistantMessage

__all__ = ["RETRYABLE_CODES", "ResponsesApi", "function_tool"]


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
        if uses_breakpoints(settings):  # GPT-5.6+: the prompt as marked blocks (model/breakpoints.py)
            del body["instructions"]
            body["input"].insert(0, responses_system_item(context, settings))
            body["prompt_cache_options"] = dict(CACHE_OPTIONS)
        return body

    def pieces(self, body: dict[str, Any]) -> list[str]:
        """Tools and the system prompt first (`instructions`, or the first input item when the prompt
        goes as marked blocks: model/breakpoints.py), then one piece per item."""
        items = body["input"]
        system = body["instructions"] if "instructions" in body else items[0]
        rest = items if "instructions" in body else items[1:]
        return [piece_json({"tools": body.get("tools", []), "instructions": system}),
                *(piece_json(without_image_data(i)) for i in rest)]

    async def consume(self, client: AsyncOpenAI, body: dict[str, Any], partial: AssistantMessage, emit: Emit,
                      signal: asyncio.Event, gate: ReadGate | None = None,
                      opened: Callable[[], None] | None = None) -> AssistantMessage:
        # Sent as is (the SDK's request transform walks every input item: ~1 ms a call, growing with
        # the conversation) and read without the SDK's per-event models (model/sse.py); what the
        # events mean is model/responses_reader.py's.
        response = await open_stream(client, "/responses", body)
        if opened is not None:
            opened()  # the turn's start is over (services/runtime/runs/turn_starts.py)
        state = Reading()
        try:
            async for events in json_reads(response):
                if signal.is_set():
                    partial.content = state.so_far()
                    partial.stop_reason = "aborted"
                    return partial
                if await state.read(events, partial, emit) and gate is not None:
                    await gate.wait()  # the next tokens: one read just before the next tick (sender.py)
        except asyncio.CancelledError:
            partial.content = state.so_far()  # aborted: the items completed so far, and the text the user saw
            raise
        finally:
            await response.aclose()  # a failed or cut stream gives its connection back
        return finish(partial, state.finished(partial))
