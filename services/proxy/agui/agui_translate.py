"""The session's events as AG-UI events (docs/integration.md "AG-UI", the mapping table).

A pure translator: one `SessionEvent` (as the runtime wrote it to `gamma:{sid}:events`) in, the AG-UI
events it means out, in order. It is deterministic, so the same stream entries always give the same
AG-UI events with the same ids: a reconnect replays the run's entries through a fresh translator and
sends only what follows the client's cursor. Every entity it opens (a text message, a reasoning span,
a tool call) it closes before `RUN_FINISHED` (the client's `verifyEvents` refuses a run that finishes
with one open). State changes are not made here: `Translation.state` names them for `agui_state`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import RunFinishedCancelledOutcome, RunFinishedInterruptOutcome

INTERRUPT_PREFIX = "ask_"  # an interrupt's id: this + the message_user call's id


@dataclass
class Translation:
    events: list[BaseEvent] = field(default_factory=list)
    state: list[tuple[str, Any]] = field(default_factory=list)  # ("tasks", todo) / ("skill", (name, on)) / ("ui", b64)
    done: bool = False  # the run ended (RUN_FINISHED or RUN_ERROR is the last event)


@dataclass
class Translator:
    thread_id: str
    run_id: str
    prompt_id: str | None  # the prompt this run sent; None: a resume that sent none
    seen_prompt: bool = False
    messages: int = 0  # assistant messages so far: their ids are `{run_id}-a{n}`
    text_id: str | None = None  # the open streamed text message
    streamed: bool = False  # the current assistant message streamed text
    texts: int = 0  # text messages opened: ids stay unique when a message's text is cut by a restart
    reasoning_id: str | None = None  # the open reasoning span (one per assistant message)
    tool_calls: set[str] = field(default_factory=set)  # started here: only their results are sent
    # The last assistant message's calls, id -> arguments: a `tool_execution_start` names its call only
    # (services/runtime/README.md "Events"); each popped when its call starts.
    call_args: dict[str, Any] = field(default_factory=dict)
    question: dict[str, Any] | None = None  # the last blocking message_user
    error: str | None = None

    @property
    def message_id(self) -> str:
        return f"{self.run_id}-a{self.messages}"

    def feed(self, event: dict[str, Any]) -> Translation:
        out = Translation()
        kind, data = event.get("type"), event.get("data") or {}
        handler = _HANDLERS.get(str(kind))
        if handler is not None:
            handler(self, data, out)
        return out

    # -- text and reasoning ------------------------------------------------------------------------
    def close_text(self, out: Translation) -> None:
        if self.text_id is not None:
            out.events.append(TextMessageEndEvent(message_id=self.text_id))
            self.text_id = None

    def close_reasoning(self, out: Translation) -> None:
        if self.reasoning_id is not None:
            out.events.append(ReasoningMessageEndEvent(message_id=self.reasoning_id))
            out.events.append(ReasoningEndEvent(message_id=self.reasoning_id))
            self.reasoning_id = None

    def reopen(self) -> list[BaseEvent]:
        """The starts of what is open, for a stream that resumes after a cursor (a new stream to the
        client's verifier: a continuation needs its start)."""
        events: list[BaseEvent] = []
        if self.reasoning_id is not None:
            events += [ReasoningStartEvent(message_id=self.reasoning_id),
                       ReasoningMessageStartEvent(message_id=self.reasoning_id, role="reasoning")]
        if self.text_id is not None:
            events.append(TextMessageStartEvent(message_id=self.text_id, role="assistant"))
        return events

    def close_all(self, out: Translation) -> None:
        self.close_reasoning(out)
        self.close_text(out)

    def finish(self, out: Translation, outcome: Any = None) -> None:
        self.close_all(out)
        out.events.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome))
        out.done = True

    def fail(self, out: Translation, message: str, code: str) -> None:
        self.close_all(out)
        out.events.append(RunErrorEvent(message=message, code=code))
        out.done = True


def _message_start(t: Translator, data: dict[str, Any], out: Translation) -> None:
    if (data.get("message") or {}).get("role") == "assistant":
        t.close_all(out)
        t.messages += 1
        t.streamed = False


def _message_update(t: Translator, data: dict[str, Any], out: Translation) -> None:
    if data.get("restart"):  # a retried reply: what streamed stays shown, the retry is a new message
        t.close_all(out)
        t.messages += 1
        return
    delta = data.get("delta")
    if not isinstance(delta, str) or not delta:
        return
    if t.text_id is None:
        t.texts += 1
        t.text_id = f"{t.message_id}-t{t.texts}"
        out.events.append(TextMessageStartEvent(message_id=t.text_id, role="assistant"))
    t.streamed = True
    out.events.append(TextMessageContentEvent(message_id=t.text_id, delta=delta))


def _reasoning(t: Translator, data: dict[str, Any], out: Translation) -> None:
    delta = data.get("delta")
    if not isinstance(delta, str) or not delta:
        return
    if t.reasoning_id is None:
        t.reasoning_id = t.message_id + "-r"
        out.events.append(ReasoningStartEvent(message_id=t.reasoning_id))
        out.events.append(ReasoningMessageStartEvent(message_id=t.reasoning_id, role="reasoning"))
    out.events.append(ReasoningMessageContentEvent(message_id=t.reasoning_id, delta=delta))


def _message_end(t: Translator, data: dict[str, Any], out: Translation) -> None:
    message = data.get("message") or {}
    role = message.get("role")
    if role == "assistant":
        t.close_all(out)
        t.call_args = _call_args(message.get("content"))
    elif role == "user" and t.prompt_id is not None and data.get("promptId") == t.prompt_id:
        t.seen_prompt = True


# -- tools ------------------------------------------------------------------------------------------
def _call_args(content: Any) -> dict[str, Any]:
    """An assistant message's tool calls (its `content` as the event carries it), id -> arguments."""
    if not isinstance(content, list):
        return {}
    return {c["id"]: c.get("arguments") for c in content
            if isinstance(c, dict) and c.get("type") == "toolCall" and isinstance(c.get("id"), str)}


def _tool_start(t: Translator, data: dict[str, Any], out: Translation) -> None:
    call_id, name = data.get("toolCallId"), data.get("toolName")
    if not isinstance(call_id, str) or not isinstance(name, str) or call_id in t.tool_calls:
        return
    # From its assistant message's `message_end`; `args` on the event itself: a runtime from before they
    # travelled once. Neither: that message came before this run's stream began (a run that joined a
    # running one), and the call is shown without its arguments.
    args = t.call_args.pop(call_id, data.get("args"))
    t.close_text(out)
    t.tool_calls.add(call_id)
    out.events.append(ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name,
                                         parent_message_id=t.message_id if t.messages else None))
    if args is not None:
        out.events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(args)))
    out.events.append(ToolCallEndEvent(tool_call_id=call_id))


def _tool_end(t: Translator, data: dict[str, Any], out: Translation) -> None:
    call_id = data.get("toolCallId")
    if call_id not in t.tool_calls:
        return  # started before this run's stream began
    result = data.get("result")
    content = result if isinstance(result, str) else json.dumps(result)
    out.events.append(ToolCallResultEvent(message_id=f"{call_id}-result", tool_call_id=str(call_id), content=content,
                                          role="tool"))


def _message_user(t: Translator, data: dict[str, Any], out: Translation) -> None:
    text, call_id = data.get("message"), str(data.get("tool_call_id") or "")
    if data.get("block_on_user"):
        t.question = {"id": INTERRUPT_PREFIX + call_id, "message": text if isinstance(text, str) else ""}
    if data.get("implicit") and t.streamed:
        return  # the model's own text, already streamed
    if isinstance(text, str) and text:
        t.close_text(out)
        mid = f"{t.run_id}-say-{call_id}"
        out.events.append(TextMessageStartEvent(message_id=mid, role="assistant"))
        out.events.append(TextMessageContentEvent(message_id=mid, delta=text))
        out.events.append(TextMessageEndEvent(message_id=mid))


# -- state and the run's end --------------------------------------------------------------------------
def _todo(t: Translator, data: dict[str, Any], out: Translation) -> None:
    if isinstance(data.get("todo"), dict):
        out.state.append(("tasks", data["todo"]))


def _skill_on(t: Translator, data: dict[str, Any], out: Translation) -> None:
    name = data.get("name")
    if isinstance(name, str):
        out.state.append(("skill", (name, {"name": name, "type": data.get("type"), "requiredBy": data.get("requiredBy")})))


def _skill_off(t: Translator, data: dict[str, Any], out: Translation) -> None:
    if isinstance(data.get("name"), str):
        out.state.append(("skill", (data["name"], None)))


def _ui(t: Translator, data: dict[str, Any], out: Translation) -> None:
    if isinstance(data.get("update"), str):
        out.state.append(("ui", data["update"]))


def _error(t: Translator, data: dict[str, Any], out: Translation) -> None:
    if t.prompt_id is not None and data.get("promptId") == t.prompt_id:  # refused (busy): the run never starts
        t.fail(out, str(data.get("error") or "refused"), "refused")
    elif data.get("source") in ("run", "model") or data.get("error") == "run failed":
        t.error = str(data.get("error") or "the run failed")


def _agent_end(t: Translator, data: dict[str, Any], out: Translation) -> None:
    if not t.seen_prompt and t.prompt_id is not None:
        t.close_all(out)  # a run the prompt was not part of ended: this one goes on
        t.question, t.error = None, None
        return
    if t.error is not None and data.get("stopReason") == "error":
        t.fail(out, t.error, "run_failed")
    elif data.get("stopReason") == "yield" and t.question is not None:
        interrupt = Interrupt(id=t.question["id"], reason="input_required", message=t.question["message"] or None,
                              response_schema={"type": "string", "description": "the user's answer"})
        t.finish(out, RunFinishedInterruptOutcome(interrupts=[interrupt]))
    else:
        t.finish(out)


def _aborted(t: Translator, data: dict[str, Any], out: Translation) -> None:
    if t.seen_prompt or t.prompt_id is None:
        t.finish(out, RunFinishedCancelledOutcome())


def _opening(event: BaseEvent) -> tuple[str, str] | None:
    if isinstance(event, TextMessageStartEvent | TextMessageEndEvent):
        return "text", event.message_id
    if isinstance(event, ReasoningStartEvent | ReasoningEndEvent):
        return "reasoning", event.message_id
    if isinstance(event, ReasoningMessageStartEvent | ReasoningMessageEndEvent):
        return "reasoning_message", event.message_id
    if isinstance(event, ToolCallStartEvent | ToolCallEndEvent):
        return "tool", event.tool_call_id
    return None


def still_open(starts: list[BaseEvent], delivered: list[BaseEvent]) -> list[BaseEvent]:
    """The starts of what is open after `delivered` followed `starts`: for a stream that resumes in the
    middle of one entry's events."""
    open_: dict[tuple[str, str], BaseEvent] = {}
    for event in [*starts, *delivered]:
        key = _opening(event)
        if key is None:
            continue
        if isinstance(event, TextMessageStartEvent | ReasoningStartEvent | ReasoningMessageStartEvent | ToolCallStartEvent):
            open_[key] = event
        else:
            open_.pop(key, None)
    return list(open_.values())


_HANDLERS = {
    "message_start": _message_start, "message_update": _message_update, "reasoning_update": _reasoning,
    "message_end": _message_end, "tool_execution_start": _tool_start, "tool_execution_end": _tool_end,
    "message_user": _message_user, "todo": _todo, "skill_activated": _skill_on, "skill_ended": _skill_off,
    "ui_update": _ui, "error": _error, "agent_end": _agent_end, "run_aborted": _aborted,
}
