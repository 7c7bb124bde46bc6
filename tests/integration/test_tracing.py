"""One trace per prompt, through the five real service processes exporting over OTLP/HTTP to an
in-process receiver (tests/support/otlp.py): the proxy's request span, the runtime's handling of the
inbox entry, its run, each model request (GenAI attributes) and tool call, the notifications' and
digest's handling of the wake's lifecycle entry, and the proxy's SSE delivery, with valid parents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}
TODO = {"items": [{"id": "t1", "content": "Outline the deck", "status": "complete"}]}
CLIENT = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
PROMPT = "script:" + json.dumps([{"content": "Planning.", "tool_calls": [{"name": "todo", "arguments": TODO}]}])


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack_env(receiver: OtlpReceiver) -> dict[str, str]:
    # Sampling by the standard variables; a short batch delay so spans arrive within the test.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "1.0", "OTEL_BSP_SCHEDULE_DELAY": "100"}


def read_events_until_answered(stack: Stack, sid: str) -> list[dict[str, Any]]:
    """The session's SSE stream from its start until the run's answer (message_user) arrives."""
    events: list[dict[str, Any]] = []
    with httpx.stream("GET", f"{stack.url()}/sessions/{sid}/events", headers=ALICE,
                      params={"last_event_id": "0"}, timeout=httpx.Timeout(60, read=60)) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
                if events[-1]["type"] == "message_user":
                    return events
    raise AssertionError(f"the stream ended before the answer: {[e['type'] for e in events]}")


def one(spans: list[ReceivedSpan], **match: Any) -> ReceivedSpan:
    found = [s for s in spans if all(getattr(s, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(s.service, s.name) for s in spans])
    return found[0]


def trace_of(receiver: OtlpReceiver, sid: str) -> list[ReceivedSpan]:
    """Every span of the trace that holds the proxy's POST /messages span for `sid`, once the whole
    chain (through the SSE delivery, and the events request it links to) has arrived."""
    spans = receiver.spans()
    posts = [s for s in spans if s.name == "POST /sessions/{sid}/messages" and s.service == "gamma-proxy"
             and s.attributes.get("http.route") == "/sessions/{sid}/messages"]
    runs = [s for s in spans if s.name == "invoke_agent gamma" and s.attributes.get("gamma.session_id") == sid]
    if len(posts) != 1 or not runs:
        return []
    if not any(s.name == "GET /sessions/{sid}/events" for s in spans):
        return []  # the client's events request, which the delivery spans link to
    mine = [s for s in spans if s.trace_id == posts[0].trace_id]
    names = {s.name for s in mine}
    wanted = {"invoke_agent gamma", "execute_tool todo", "execute_tool message_user", "gamma:{sid}:events deliver"}
    return mine if wanted <= names else []


def test_a_prompt_with_a_tool_call_is_one_connected_trace(module_stack: Stack, receiver: OtlpReceiver) -> None:
    sid = httpx.post(module_stack.url() + "/sessions", headers=ALICE, timeout=30).json()["id"]
    # A client's own (sampled) trace context is not continued: the request starts a trace of ours.
    resp = httpx.post(f"{module_stack.url()}/sessions/{sid}/messages", headers={**ALICE, "traceparent": CLIENT},
                      json={"message": PROMPT}, timeout=30)
    assert resp.status_code == 202, resp.text
    events = read_events_until_answered(module_stack, sid)
    assert "tool_execution_end" in [e["type"] for e in events]
    assert all("traceparent" not in e for e in events)  # the trace context stays beside the event JSON

    spans: list[ReceivedSpan] = []

    def arrived() -> bool:
        spans[:] = trace_of(receiver, sid)
        return bool(spans)

    wait_sync(arrived, timeout=60, what="the prompt's whole trace at the OTLP receiver")
    assert {s.service for s in spans} >= {"gamma-proxy", "gamma-runtime", "gamma-notifications", "gamma-digest"}
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_span_id]
    request = one(spans, name="POST /sessions/{sid}/messages")
    assert roots == [request] and request.kind == 2  # SERVER, the one root of the trace
    assert request.trace_id != "ab" * 16
    assert all(s.parent_span_id in ids for s in spans if s is not request)  # every parent is in the trace

    # proxy request -> the runtime's handling of the prompt's inbox entry -> the run
    # (twice: read, and held until the wake's barrier, then released into a run)
    handled = [s for s in spans if s.name == "gamma:{sid}:inbox process"
               and s.attributes["gamma.inbox.type"] == "user_prompt"]
    assert handled and all(s.parent_span_id == request.span_id and s.service == "gamma-runtime" for s in handled)
    run = one(spans, name="invoke_agent gamma")
    assert run.parent_span_id in {s.span_id for s in handled} and run.service == "gamma-runtime"
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent" and run.attributes["gen_ai.conversation.id"] == sid

    # the run -> its model requests (the todo call, then the answer), with GenAI attributes
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 2 and all(s.parent_span_id == run.span_id and s.kind == 3 for s in chats)  # CLIENT
    for chat in chats:
        a = chat.attributes
        assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.system"] == "openai"
        assert a["gen_ai.request.model"] and chat.name == f"chat {a['gen_ai.request.model']}"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert 0 <= a["gen_ai.usage.cache_read.input_tokens"] <= a["gen_ai.usage.input_tokens"]
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [["toolUse"], ["toolUse"]]

    # the run -> each tool call
    todo = one(spans, name="execute_tool todo")
    assert todo.parent_span_id == run.span_id and todo.attributes["gen_ai.tool.name"] == "todo"
    assert todo.attributes["gen_ai.tool.call.id"] == next(
        e["data"]["toolCallId"] for e in events if e["type"] == "tool_execution_end")
    assert one(spans, name="execute_tool message_user").parent_span_id == run.span_id

    # the run -> the proxy writing its events to the SSE client
    # (linked to the client's own GET /events request, a trace of its own)
    delivered = [s for s in spans if s.name == "gamma:{sid}:events deliver"]
    assert delivered and all(s.parent_span_id == run.span_id and s.service == "gamma-proxy" for s in delivered)
    stream = one(receiver.spans(), name="GET /sessions/{sid}/events", service="gamma-proxy")
    assert all(s.links == ((stream.trace_id, stream.span_id),) for s in delivered)

    # the wake's lifecycle entry, handled by notifications and the digest in the same trace
    handling = {s.service for s in spans if s.name == "gamma:lifecycle process"}
    assert {"gamma-notifications", "gamma-digest"} <= handling


def test_log_lines_carry_the_trace_id(module_stack: Stack, receiver: OtlpReceiver) -> None:
    """structlog lines written while a span is current name its trace and span."""
    spans = receiver.spans()
    traced = {s.trace_id for s in spans if s.service == "gamma-proxy"}

    def lines() -> list[dict[str, Any]]:
        out = []
        for raw in module_stack.log("proxy").splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        return out

    wake_lines = [line for line in lines() if line.get("event") == "wake_sent"]
    assert wake_lines and all(len(line["trace_id"]) == 32 and len(line["span_id"]) == 16 for line in wake_lines)
    assert {line["trace_id"] for line in wake_lines} <= traced
