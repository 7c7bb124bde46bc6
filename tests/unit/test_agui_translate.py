"""The AG-UI translator (services/proxy/agui/agui_translate.py), on session events as the runtime writes them:
the ordering rules the official client's `verifyEvents` enforces (everything opened is closed before
RUN_FINISHED; a continuation has its start), the run's end keyed to its own prompt, and determinism."""

from __future__ import annotations

from typing import Any

from services.proxy.agui.agui_translate import Translator, still_open

PROMPT = "p_1"


def ev(kind: str, **data: Any) -> dict[str, Any]:
    return {"type": kind, "session_id": "s_1", "data": data}


def user_end(prompt_id: str | None = PROMPT) -> dict[str, Any]:
    return ev("message_end", message={"role": "user", "content": "hi"}, **({"promptId": prompt_id} if prompt_id else {}))


def types(translator: Translator, events: list[dict[str, Any]]) -> list[str]:
    return [e.type.value for event in events for e in translator.feed(event).events]


def verify(kinds: list[str]) -> None:
    """The open/close half of the client's verifyEvents: no continuation without a start, nothing open at the end."""
    open_: set[str] = set()
    pairs = {"TEXT_MESSAGE": "text", "REASONING_MESSAGE": "rmsg", "TOOL_CALL": "tool", "REASONING": "reasoning"}
    for kind in kinds:
        for prefix, key in pairs.items():
            if kind == f"{prefix}_START":
                assert key not in open_, kinds
                open_.add(key)
            elif kind in (f"{prefix}_CONTENT", f"{prefix}_ARGS"):
                assert key in open_, kinds
            elif kind == f"{prefix}_END":
                assert key in open_, kinds
                open_.discard(key)
        if kind in ("RUN_FINISHED", "RUN_ERROR"):
            assert not open_, kinds


def test_streamed_text_and_reasoning_close_before_the_run_finishes() -> None:
    t = Translator(thread_id="s_1", run_id="r", prompt_id=PROMPT)
    kinds = types(t, [
        ev("agent_start"), ev("message_start", message={"role": "user"}), user_end(),
        ev("message_start", message={"role": "assistant"}),
        ev("reasoning_update", delta="thinking"), ev("message_update", delta="Hel"), ev("message_update", delta="lo"),
        ev("agent_end", stopReason="stop"),  # no message_end: the run was cut; everything is closed anyway
    ])
    verify(kinds)
    assert kinds[-4:] == ["REASONING_MESSAGE_END", "REASONING_END", "TEXT_MESSAGE_END", "RUN_FINISHED"]


def test_a_restart_closes_the_streamed_text_and_the_retry_is_a_new_message() -> None:
    t = Translator(thread_id="s_1", run_id="r", prompt_id=PROMPT)
    first = t.feed(ev("message_update", delta="partial")).events[0]
    t.feed(ev("message_update", restart=True, retryInS=1))
    second = t.feed(ev("message_update", delta="again")).events[0]
    assert first.model_dump()["message_id"] != second.model_dump()["message_id"]


def test_only_the_run_that_took_the_prompt_ends_it() -> None:
    t = Translator(thread_id="s_1", run_id="r", prompt_id=PROMPT)
    earlier = t.feed(ev("agent_end", stopReason="yield"))
    assert not earlier.done  # a run that ended before the prompt was taken
    t.feed(user_end("p_other"))
    assert not t.feed(ev("agent_end", stopReason="stop")).done
    t.feed(user_end())
    t.feed(ev("message_user", message="Which colour?", block_on_user=True, tool_call_id="call_1"))
    out = t.feed(ev("agent_end", stopReason="yield"))
    assert out.done
    finished = out.events[-1]
    assert finished.outcome is not None and finished.outcome.type == "interrupt"  # type: ignore[attr-defined]
    assert finished.outcome.interrupts[0].id == "ask_call_1"  # type: ignore[attr-defined]


def test_a_refused_prompt_is_a_run_error_and_an_abort_a_cancelled_run() -> None:
    refused = Translator(thread_id="s_1", run_id="r", prompt_id=PROMPT).feed(ev("error", error="busy", promptId=PROMPT))
    assert refused.done and refused.events[-1].type.value == "RUN_ERROR"
    t = Translator(thread_id="s_1", run_id="r", prompt_id=PROMPT)
    t.feed(user_end())
    aborted = t.feed(ev("run_aborted", run_id="run_1", reason="user"))
    assert aborted.done and aborted.events[-1].outcome.type == "cancelled"  # type: ignore[attr-defined]


def test_the_models_plain_text_is_not_repeated_as_its_implicit_message() -> None:
    t = Translator(thread_id="s_1", run_id="r", prompt_id=PROMPT)
    t.feed(ev("message_start", message={"role": "assistant"}))
    t.feed(ev("message_update", delta="All done."))
    t.feed(ev("message_end", message={"role": "assistant"}))
    implicit = t.feed(ev("message_user", message="All done.", block_on_user=True, tool_call_id="c", implicit=True))
    assert implicit.events == []
    explicit = t.feed(ev("message_user", message="And one more thing.", block_on_user=False, tool_call_id="d"))
    assert [e.type.value for e in explicit.events] == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]


def test_state_changes_are_named_not_made() -> None:
    t = Translator(thread_id="s_1", run_id="r", prompt_id=PROMPT)
    out = t.feed(ev("todo", todo={"revision": 1, "items": []}))
    assert out.state == [("tasks", {"revision": 1, "items": []})] and out.events == []
    assert t.feed(ev("skill_ended", name="x", reason="completed")).state == [("skill", ("x", None))]


def test_the_translation_is_deterministic_and_a_resume_reopens_what_is_open() -> None:
    stream = [user_end(), ev("message_start", message={"role": "assistant"}), ev("reasoning_update", delta="a"),
              ev("message_update", delta="b"), ev("tool_execution_start", toolCallId="c1", toolName="bash", args={})]
    one, two = Translator("s_1", "r", PROMPT), Translator("s_1", "r", PROMPT)
    assert [e.model_dump() for s in stream for e in one.feed(s).events] == \
        [e.model_dump() for s in stream for e in two.feed(s).events]
    t = Translator("s_1", "r", PROMPT)
    for s in stream[:4]:
        t.feed(s)
    reopened = [e.type.value for e in t.reopen()]
    assert reopened == ["REASONING_START", "REASONING_MESSAGE_START", "TEXT_MESSAGE_START"]
    before = t.reopen()
    out = t.feed(stream[4])  # the tool call closes the text first
    assert out.events[0].type.value == "TEXT_MESSAGE_END"
    # A reconnect after that first event: only the reasoning span is still open.
    assert [e.type.value for e in still_open(before, out.events[:1])] == ["REASONING_START", "REASONING_MESSAGE_START"]


def test_a_tool_calls_arguments_come_from_its_assistant_message() -> None:
    """`tool_execution_start` names the call; its arguments are in the assistant's `message_end` before it
    (services/runtime/README.md "Events"). A runtime from before sent them on the start: still read."""
    t = Translator("s_1", "r", PROMPT)
    t.feed(user_end())
    t.feed(ev("message_start", message={"role": "assistant"}))
    t.feed(ev("message_end", message={"role": "assistant", "content": [
        {"type": "toolCall", "id": "c1", "name": "put", "arguments": {"v": [1, 2]}},
        {"type": "toolCall", "id": "c2", "name": "put", "arguments": {}}]}))
    first = t.feed(ev("tool_execution_start", toolCallId="c1", toolName="put")).events
    assert [e.type.value for e in first] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert first[1].delta == '{"v": [1, 2]}'  # type: ignore[attr-defined]
    assert t.feed(ev("tool_execution_start", toolCallId="c2", toolName="put")).events[1].delta == "{}"  # type: ignore[attr-defined]
    old = t.feed(ev("tool_execution_start", toolCallId="c3", toolName="put", args={"a": 1})).events
    assert old[1].delta == '{"a": 1}'  # type: ignore[attr-defined]
    # Its message before this run's stream began: the call is shown, without arguments.
    joined = Translator("s_1", "r2", PROMPT).feed(ev("tool_execution_start", toolCallId="c9", toolName="put")).events
    assert [e.type.value for e in joined] == ["TOOL_CALL_START", "TOOL_CALL_END"]
