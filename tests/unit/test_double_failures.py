"""The double's failure scripts (scripted/README.md "Scenarios"): each `script:` step field answers as a
real provider misbehaves, on both APIs, in the shapes the SDK reads (reference §3, §4, §5)."""

from __future__ import annotations

import json
import time
import typing
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel

from scripted.strict import replies
from tests.support.double import chat_body, gamma_transport, responses_body, send

EVENT_CLASSES: dict[str, type[BaseModel]] = {
    typing.get_args(c.model_fields["type"].annotation)[0]: c
    for c in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}
CALL = {"name": "message_user", "arguments": {"message": "x" * 80, "blockOnUser": True}}


def parse_all(events: list[dict[str, Any]]) -> None:
    for e in events:
        if e["type"] != "error":  # the live nested shape is not the SDK's (flat) model, reference §3.1
            EVENT_CLASSES[e["type"]].model_validate(e)


async def test_no_terminal_ends_the_body_without_a_terminal_event() -> None:
    r = await send(gamma_transport(), "responses", responses_body([{"content": "half", "no_terminal": True}]))
    assert r.status == 200 and r.types()[0] == "response.created"
    assert not {"response.completed", "response.incomplete", "response.failed"} & set(r.types())
    c = await send(gamma_transport(), "chat", chat_body([{"content": "half", "no_terminal": True}]))
    assert not c.done and all(ch["choices"][0]["finish_reason"] is None for ch in c.events if ch["choices"])


async def test_content_filter_is_its_own_incomplete_reason() -> None:
    r = await send(gamma_transport(), "responses", responses_body([{"content": "bad", "finish_reason": "content_filter"}]))
    parse_all(r.events)
    final = r.last("response.incomplete")["response"]
    assert final["incomplete_details"] == {"reason": "content_filter"}
    c = await send(gamma_transport(), "chat", chat_body([{"content": "bad", "finish_reason": "content_filter"}]))
    assert [ch["choices"][0]["finish_reason"] for ch in c.events if ch["choices"]][-1] == "content_filter" and c.done


async def test_length_with_tool_calls_truncates_the_last_call() -> None:
    step = {"tool_calls": [CALL], "finish_reason": "length"}
    r = await send(gamma_transport(), "responses", responses_body([step]))
    parse_all(r.events)
    item = [e["item"] for e in r.events if e["type"] == "response.output_item.done"][-1]
    assert item["type"] == "function_call" and item["status"] == "incomplete"
    with pytest.raises(ValueError):
        json.loads(item["arguments"])
    assert r.last("response.incomplete")["response"]["incomplete_details"]["reason"] == "max_output_tokens"
    c = await send(gamma_transport(), "chat", chat_body([step]))
    args = "".join(tc["function"].get("arguments", "") for ch in c.events if ch["choices"]
                   for tc in ch["choices"][0]["delta"].get("tool_calls") or [])
    with pytest.raises(ValueError):
        json.loads(args)
    assert [ch["choices"][0]["finish_reason"] for ch in c.events if ch["choices"]][-1] == "length"


async def test_empty_is_a_reasoning_only_reply_on_a_reasoning_model() -> None:
    r = await send(gamma_transport(), "responses", responses_body([{"empty": True, "content": "ignored"}]))
    done = [e["item"]["type"] for e in r.events if e["type"] == "response.output_item.done"]
    assert done == ["reasoning"] and r.types()[-1] == "response.completed"
    r = await send(gamma_transport(), "responses", responses_body([{"empty": True}], model="gpt-4o"))
    assert [e for e in r.events if e["type"] == "response.output_item.done"] == []


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_error_steps_carry_headers_type_and_429_kinds(api: str) -> None:
    body = responses_body if api == "responses" else chat_body
    step = {"error": {"status": 429, "code": "rate_limit_exceeded",
                      "headers": {"retry-after-ms": "1500", "x-ratelimit-remaining-requests": "0",
                                  "x-should-retry": "true"}}}
    r = await send(gamma_transport(), api, body([step]))
    assert r.status == 429 and r.headers["retry-after-ms"] == "1500" and r.headers["x-should-retry"] == "true"
    assert r.headers["x-request-id"].startswith("req_")
    assert r.error["type"] == "rate_limit_error" and "Please try again in 1.5s" in r.error["message"]
    assert set(r.error) == {"message", "type", "param", "code"}
    q = await send(gamma_transport(), api, body([{"error": {"status": 429, "code": "insufficient_quota",
                                                              "type": "insufficient_quota"}}]))
    assert q.error["code"] == "insufficient_quota" and q.error["type"] == "insufficient_quota"
    assert "exceeded your current quota" in q.error["message"]


@pytest.mark.parametrize("shape", ["nested", "flat", None])
async def test_stream_errors_nested_by_default_or_flat(shape: str | None) -> None:
    error: dict[str, Any] = {"code": "too_many_requests", "message": "slow down"}
    if shape:
        error["shape"] = shape
    r = await send(gamma_transport(), "responses", responses_body([{"stream_error": error}]))
    event = r.last("error")
    if shape == "flat":
        EVENT_CLASSES["error"].model_validate(event)
        assert event["code"] == "too_many_requests"
    else:
        assert event["error"]["code"] == "too_many_requests" and "code" not in event
    assert [e["sequence_number"] for e in r.events] == list(range(len(r.events)))


async def test_stall_before_the_headers_and_after_chunks() -> None:
    t = time.monotonic()
    r = await send(gamma_transport(), "responses", responses_body([{"content": "late", "stall_s": 0.3}]))
    assert time.monotonic() - t >= 0.3 and r.types()[-1] == "response.completed"
    t = time.monotonic()
    r = await send(gamma_transport(), "chat", chat_body([{"content": "late", "stall_s": 0.3, "stall_after": 2}]))
    assert time.monotonic() - t >= 0.3 and r.done


@pytest.mark.parametrize("variant", ["full", "no_cache_write", "no_details", "null", "absent"])
async def test_usage_variants(variant: str) -> None:
    r = await send(gamma_transport(), "responses", responses_body([{"content": "hi", "usage": variant}]))
    final = r.last("response.completed")["response"]
    if variant == "absent":
        assert "usage" not in final
    elif variant == "null":
        assert final["usage"] is None
    else:
        assert ("cache_write_tokens" in final["usage"].get("input_tokens_details", {})) == (variant == "full")
        assert ("input_tokens_details" in final["usage"]) == (variant != "no_details")
    c = await send(gamma_transport(), "chat", chat_body([{"content": "hi", "usage": variant}]))
    usage = [ch.get("usage") for ch in c.events if ch.get("usage")]
    assert bool(usage) == (variant not in ("null", "absent"))
    for ch in c.events:
        ChatCompletionChunk.model_validate(ch)


async def test_reject_replayed_reasoning_once_then_serves() -> None:
    transport = gamma_transport()
    steps = [{"tool_calls": [CALL]}, {"content": "second", "reject_replayed": "reasoning", "times": 1}]
    first = await send(transport, "responses", responses_body(steps))
    items = [e["item"] for e in first.events if e["type"] == "response.output_item.done"]
    body = responses_body(steps)
    body["input"] += [*items, {"type": "function_call_output", "call_id": items[-1]["call_id"], "output": "ok"}]
    refused = await send(transport, "responses", body)
    assert refused.status == 400 and refused.error["code"] == "invalid_encrypted_content"
    again = await send(transport, "responses", body)
    assert again.status == 200 and again.types()[-1] == "response.completed"


async def test_reject_replayed_image_names_its_param() -> None:
    body = responses_body([{"content": "seen", "reject_replayed": "image"}])
    text = body["input"][0]["content"]
    body["input"][0]["content"] = [{"type": "input_text", "text": text},
                                   {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "auto"}]
    r = await send(gamma_transport(), "responses", body)
    assert r.status == 400 and r.error["param"] == "input[0].content[1]" and r.error["code"] == "invalid_image"
    plain = await send(gamma_transport(), "responses", responses_body([{"content": "seen", "reject_replayed": "image"}]))
    assert plain.status == 200


async def test_summary_streams_only_when_the_request_asks() -> None:
    asked = responses_body([{"content": "ok", "summary": "Thinking about it."}],
                           reasoning={"effort": "low", "summary": "auto"})
    r = await send(gamma_transport(), "responses", asked)
    parse_all(r.events)
    kinds = [t for t in r.types() if t.startswith("response.reasoning_summary")]
    assert kinds == ["response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                     "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"]
    unasked = await send(gamma_transport(), "responses", responses_body([{"content": "ok", "summary": "hidden"}]))
    assert not [t for t in unasked.types() if "summary" in t]
    item = [e["item"] for e in unasked.events if e["type"] == "response.output_item.done"][0]
    assert item["type"] == "reasoning" and item["summary"] == [] and replies.issuer(item["encrypted_content"])
