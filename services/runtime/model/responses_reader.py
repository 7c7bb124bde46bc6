"""What one streamed Responses reply brings, read the way the API means it (reference §3.1, §3.3;
docs/architecture.md "How a model reply ends").

- complete only after `response.completed`; `response.incomplete` is its own outcome (the output
  limit, or the content filter: kept apart), `response.failed` and `error` are errors; a body that
  ends without any of them is no answer (`model_api.no_terminal`, retried like a cut stream);
- the items kept are those of `response.output_item.done` (the `.added` ones are incomplete); a
  `function_call` item with `status: "incomplete"` was cut at the output limit: the reply's stop
  reason is "length", and the loop does not run its calls;
- unknown event types are ignored (the SDK builds them as anything; Codex ignores them);
- reasoning summary deltas go to the client as `reasoning_update` events, argument deltas of tool
  calls as throttled `tool_call_progress` events; text deltas as `message_update`.
"""

from __future__ import annotations

from typing import Any

from services.runtime.engine.types import AgentEvent, Emit
from services.runtime.model.model_api import (
    ArgumentProgress,
    FinishReason,
    StreamError,
    no_terminal,
    obj,
    parse_arguments,
)
from shared.contracts.records.messages import AssistantMessage, TextContent, ThinkingContent, ToolCall
from shared.contracts.streams.events import ReasoningUpdateData
from shared.costs.usage import responses_usage

RETRYABLE_CODES = frozenset({"server_error", "rate_limit_exceeded", "server_is_overloaded", "slow_down"})
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class Reading:
    """What one streamed response has brought so far."""

    def __init__(self) -> None:
        self.content: list[Any] = []
        self.refusal: list[str] = []
        self.terminal: str | None = None  # the event that ended the response
        self.reason: FinishReason = "stop"
        self.cut_call = False  # a function_call item came back `incomplete`
        self.streaming: list[str] = []  # text deltas of the message item in progress (kept if aborted)
        self.progress = ArgumentProgress()

    def so_far(self) -> list[Any]:
        return [*self.content, TextContent(text="".join(self.streaming))] if self.streaming else self.content

    async def read(self, events: list[dict[str, Any]], partial: AssistantMessage, emit: Emit) -> bool:
        """Take one read's events; True when it ended in streamed text (more comes at the model's pace).
        Consecutive deltas of one kind go out as one event (the Outbox would merge them anyway)."""
        text: list[str] = []
        thought: list[str] = []
        where: tuple[str, int] = ("", 0)
        for event in events:
            kind = event.get("type")
            if kind == "response.output_text.delta":
                if thought:
                    await _think(thought, where, emit)
                    thought = []
                text.append(str(event.get("delta") or ""))
                continue
            if text:
                await self.say(text, emit)
                text = []
            if kind == "response.reasoning_summary_text.delta":
                at = (str(event.get("item_id") or "")[:200], _index(event.get("summary_index")))
                if thought and at != where:
                    await _think(thought, where, emit)
                    thought = []
                where = at
                thought.append(str(event.get("delta") or ""))
                continue
            if thought:
                await _think(thought, where, emit)
                thought = []
            self.take(event, partial)
        if thought:
            await _think(thought, where, emit)
        await self.progress.tell(emit)
        if text:
            await self.say(text, emit)
            return True
        return False

    async def say(self, text: list[str], emit: Emit) -> None:
        self.streaming.extend(text)
        await emit(AgentEvent(type="message_update", data={"delta": "".join(text)}))

    def take(self, event: dict[str, Any], partial: AssistantMessage) -> None:
        kind = str(event.get("type"))
        if kind == "response.function_call_arguments.delta":
            self.progress.grow(str(event.get("item_id") or event.get("output_index")), str(event.get("delta") or ""))
        elif kind == "response.output_item.added":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                self.progress.start(str(item.get("id") or event.get("output_index")),
                                    str(item.get("call_id") or ""), str(item.get("name") or ""))
        elif kind == "response.output_item.done":
            self.streaming.clear()
            item = _valid_item(event.get("item"))
            if item.get("type") == "function_call" and item.get("status") == "incomplete":
                self.cut_call = True
            _take_item(item, self.content, self.refusal)
        elif kind in TERMINAL:
            self.end(kind, event, partial)
        elif kind == "error":  # the flat shape (the SDK's ResponseErrorEvent); the nested one raises in sse.py
            code, message = event.get("code"), str(event.get("message") or "error")
            raise StreamError(f"{code}: {message}" if code else message, retryable=code in RETRYABLE_CODES)

    def end(self, kind: str, event: dict[str, Any], partial: AssistantMessage) -> None:
        response = obj(event.get("response"))
        if kind == "response.failed":
            err = obj(response.get("error"))
            raise StreamError(f"{err.get('code')}: {err.get('message')}" if err else "response failed",
                              retryable=err.get("code") in RETRYABLE_CODES)
        self.terminal = kind
        partial.usage = responses_usage(response.get("usage"))
        if isinstance(response.get("model"), str) and response["model"]:
            partial.snapshot = response["model"][:200]  # the snapshot its reasoning is bound to
        if kind == "response.incomplete":
            why = obj(response.get("incomplete_details")).get("reason")
            # `max_output_tokens` or `content_filter` (reference §3.1); an unknown reason reads as the limit
            self.reason = "content_filter" if why == "content_filter" else "length"

    def finished(self, partial: AssistantMessage) -> FinishReason:
        """The reply's finish, once the body has ended: without a terminal event it is no answer."""
        if self.terminal is None:
            raise no_terminal("response.completed")
        partial.content = self.content
        partial.refusal = "".join(self.refusal) or None
        if self.cut_call and self.reason == "stop":
            return "length"  # a call cut at the output limit, whatever the response's own status says
        return self.reason


async def _think(deltas: list[str], where: tuple[str, int], emit: Emit) -> None:
    await emit(AgentEvent(type="reasoning_update", data=ReasoningUpdateData(
        delta="".join(deltas), item_id=where[0], summary_index=where[1]).model_dump()))


def _index(raw: Any) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else 0


def _valid_item(item: Any) -> dict[str, Any]:
    """The item as sent (a reasoning item is replayed verbatim), checked only for what the harness
    reads from it: the SDK does not validate replies (reference §5, §7.2: compatible servers leave out
    `status`, `id` or a part's `annotations`), and a field nobody reads must not fail a reply."""
    if not isinstance(item, dict):
        raise StreamError(f"output item is not an object: {item!r:.200}", retryable=False, kind="invalid")
    kind = item.get("type")
    problem = None
    if kind == "function_call":
        if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
            problem = "a function_call item without its call_id or name"
        elif not isinstance(item.get("arguments") or "", str):
            problem = "a function_call item whose arguments are not a string"
    elif kind == "message" and not _parts(item.get("content")):
        problem = "a message item whose content is not a list of parts"
    elif kind == "reasoning" and not _parts(item.get("summary")):
        problem = "a reasoning item whose summary is not a list of parts"
    if problem is not None:
        raise StreamError(f"invalid output item from the API: {problem}: {item!r:.200}", retryable=False,
                          kind="invalid")
    return item


def _parts(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(p, dict) for p in value))


def _take_item(item: dict[str, Any], content: list[Any], refusal: list[str]) -> None:
    kind = item.get("type")
    if kind == "reasoning":
        summary = "\n".join(str(s.get("text", "")) for s in item.get("summary") or [])
        content.append(ThinkingContent(thinking=summary, item=item))
    elif kind == "message":
        phase = item.get("phase") if item.get("phase") in ("commentary", "final_answer") else None
        for part in item.get("content") or []:
            if part.get("type") == "output_text" and part.get("text"):
                content.append(TextContent(text=str(part["text"]), phase=phase))
            elif part.get("type") == "refusal":
                refusal.append(str(part.get("refusal", "")))
    elif kind == "function_call":
        content.append(ToolCall(id=item["call_id"], name=item["name"],
                                arguments=parse_arguments(item.get("arguments") or "")))
