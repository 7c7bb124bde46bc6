"""One model call's attempts (model/attempts.py) against a fake model API: the idle watch, the
deadline, the worker's rate gate and breaker, and the repair of a poisoned replayed history."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import httpx2
import openai
import pytest
from openai import AsyncOpenAI

from services.runtime.engine.types import AgentContext, AgentEvent
from services.runtime.model.attempts import Attempts, CallLimits, HistoryRepair
from services.runtime.model.model_api import ModelSettings
from services.runtime.model.provider_gate import ProviderGates
from services.runtime.model.responses_api import ResponsesApi
from services.runtime.model.sse import ACTIVITY
from shared.contracts.records.messages import (
    AssistantMessage,
    ImageRef,
    TextContent,
    ThinkingContent,
    UserMessage,
)
from shared.history.history_repair import REDACTED
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(20)
Step = BaseException | Literal["hang"] | str | tuple[str, dict[str, str]]


class FakeApi:
    """Answers each attempt with the next step: an exception to raise, "hang" (no bytes ever), or a text."""

    name: Literal["responses"] = "responses"

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.bodies: list[dict[str, Any]] = []

    def body(self, context: AgentContext, settings: ModelSettings) -> dict[str, Any]:
        return ResponsesApi().body(context, settings)

    def pieces(self, body: dict[str, Any]) -> list[str]:
        return []

    async def consume(self, client: Any, body: dict[str, Any], partial: AssistantMessage, *_: Any) -> AssistantMessage:
        self.bodies.append(body)
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        if step == "hang":
            await asyncio.sleep(3600)
        if isinstance(step, tuple):  # a text with the 200's headers (what model/sse.py open_stream records)
            step, headers = step
            activity = ACTIVITY.get()
            assert activity is not None
            activity.headers = httpx2.Headers(headers)
        partial.content = [TextContent(text=step)]
        return partial


def status(code: int, err: dict[str, Any], headers: dict[str, str] | None = None) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://x/v1/responses")
    return openai.APIStatusError(err.get("message", "e"), body={"error": err},
                                 response=httpx2.Response(code, headers=headers or {}, request=request))


SETTINGS = ModelSettings(model="gpt-5-mini", api="responses", max_retries=3, retry_base_s=0.01, retry_max_s=5.0)
CLIENT = AsyncOpenAI(api_key="k", base_url="http://provider.local/v1")


async def run(api: FakeApi, context: AgentContext | None = None, limits: CallLimits | None = None,
              gates: ProviderGates | None = None, on_repair: Callable[[HistoryRepair], Any] | None = None,
              ) -> tuple[AssistantMessage, int, list[AgentEvent]]:
    events: list[AgentEvent] = []

    async def emit(e: AgentEvent) -> None:
        events.append(e)

    context = context or AgentContext("sys", [UserMessage(content="hi")], [])
    attempts = Attempts(CLIENT, SETTINGS, limits or CallLimits(), provider=(gates or ProviderGates()).of("p"),
                        on_repair=on_repair)
    message, n = await attempts.run(api, context, api.body(context, SETTINGS), emit, asyncio.Event())
    return message, n, events


async def test_an_idle_stream_is_dropped_and_retried() -> None:
    message, n, events = await run(FakeApi("hang", "fine"), limits=CallLimits(idle_s=0.05))
    assert message.text() == "fine" and n == 2
    assert "no data from the model" in events[0].data["reason"]


async def test_the_deadline_ends_a_hanging_call_with_an_error() -> None:
    message, n, _ = await run(FakeApi("hang", "never"), limits=CallLimits(idle_s=0, deadline_s=0.05))
    assert message.stop_reason == "error" and "deadline" in (message.error_message or "") and n == 1


async def test_a_retry_past_the_deadline_is_not_made() -> None:
    api = FakeApi(status(429, {"code": "rate_limit_exceeded", "message": "Please try again in 2s."}), "late")
    message, n, _ = await run(api, limits=CallLimits(deadline_s=1.0))
    assert message.stop_reason == "error" and "deadline" in (message.error_message or "") and n == 1


async def test_a_server_wait_above_the_cap_is_not_waited_for() -> None:
    api = FakeApi(status(429, {"code": "rate_limit_exceeded", "message": "x"}, {"retry-after": "86400"}), "late")
    message, n, _ = await run(api)
    assert message.stop_reason == "error" and "86400" in (message.error_message or "") and n == 1


async def test_insufficient_quota_is_one_attempt() -> None:
    api = FakeApi(status(429, {"code": "insufficient_quota", "message": "You exceeded your current quota"}), "no")
    message, n, _ = await run(api)
    assert message.stop_reason == "error" and n == 1 and "insufficient_quota" in (message.error_message or "")


async def test_a_429_wait_holds_the_other_sessions_of_the_worker() -> None:
    gates = ProviderGates()
    loop = asyncio.get_running_loop()
    api = FakeApi(status(429, {"code": "rate_limit_exceeded", "message": "Please try again in 500ms."}), "first")
    first = asyncio.ensure_future(run(api, gates=gates))
    async def held() -> bool:
        return gates.of("p").gate.wait_s() > 0.45

    await eventually(held, timeout=5, interval=0.001, what="the first session's 429")
    started = loop.time()
    other = FakeApi("second")
    message, _, _ = await run(other, gates=gates)  # another session of the worker, right after
    assert message.text() == "second" and loop.time() - started >= 0.4  # it waited out the 429 too
    assert (await first)[0].text() == "first"


async def test_the_breaker_fails_calls_fast_once_open() -> None:
    gates = ProviderGates(breaker_threshold=2, breaker_cooldown_s=60)
    failing = FakeApi(*(status(503, {"code": "server_error", "message": "down"}) for _ in range(2)))
    message, n, _ = await run(failing, limits=CallLimits(), gates=gates)
    assert n == 2 and "circuit breaker" in (message.error_message or "")  # the second failure opened it
    assert (message.error_message or "").startswith("503 server_error: down")  # and what the provider said
    api = FakeApi("never sent")
    message, n, _ = await run(api, gates=gates)
    assert message.stop_reason == "error" and "circuit breaker" in (message.error_message or "")
    assert api.bodies == []  # failed fast, nothing sent


def reasoning_history() -> AgentContext:
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
    old = AssistantMessage(model="gpt-5-mini", api="responses",
                           content=[ThinkingContent(thinking="", item=item), TextContent(text="earlier")])
    return AgentContext("sys", [UserMessage(content="a"), old, UserMessage(content="b")], [])


async def test_invalid_encrypted_content_strips_reasoning_records_it_and_retries_once() -> None:
    context = reasoning_history()
    fixes: list[HistoryRepair] = []

    async def record(fix: HistoryRepair) -> None:
        fixes.append(fix)

    bad = status(400, {"code": "invalid_encrypted_content", "message": "could not be verified"})
    api = FakeApi(bad, "recovered")
    message, n, _ = await run(api, context, on_repair=record)
    assert message.text() == "recovered" and n == 2
    assert any(i.get("type") == "reasoning" for i in api.bodies[0]["input"])
    assert not any(i.get("type") == "reasoning" for i in api.bodies[1]["input"])  # rebuilt from the context
    assert [f.action for f in fixes] == ["strip_reasoning"]
    thinking = context.messages[1].content[0]  # type: ignore[union-attr]
    assert isinstance(thinking, ThinkingContent) and thinking.item is None
    again = FakeApi(bad, bad, "never")  # the same 400 after the repair: once only, then an error
    message, n, _ = await run(again, reasoning_history(), on_repair=record)
    assert message.stop_reason == "error" and n == 2


async def test_a_refused_image_is_replaced_by_a_stand_in() -> None:
    ref = ImageRef(sha256="a" * 64, mime_type="image/png", width=10, height=10, bytes=100)
    context = AgentContext("sys", [UserMessage(content="look", images=[ref]), UserMessage(content="and?")], [])
    api = FakeApi(status(400, {"code": "invalid_image", "message": "unsupported image",
                               "param": "input[0].content[1].image_url"}), "ok")
    message, n, _ = await run(api, context)
    assert message.text() == "ok" and n == 2
    first = context.messages[0]
    assert isinstance(first, UserMessage) and first.images is None and "[image removed" in first.content


async def test_a_filtered_replayed_item_is_replaced_by_a_note() -> None:
    context = AgentContext("sys", [UserMessage(content="fine"), AssistantMessage(content=[TextContent(text="ok")]),
                                   UserMessage(content="the flagged text"), UserMessage(content="now")], [])
    api = FakeApi(status(400, {"code": "content_filter", "message": "The response was filtered", "param": "input[2]"}),
                  "answered")
    message, n, _ = await run(api, context)
    assert message.text() == "answered" and n == 2
    assert [getattr(m, "content", None) for m in context.messages[::2]] == ["fine", REDACTED]
    assert "the flagged text" in str(api.bodies[0]) and "the flagged text" not in str(api.bodies[1])
    unnamed = FakeApi(status(400, {"code": "invalid_prompt", "message": "flagged"}), "never")
    message, n, _ = await run(unnamed, context)
    assert message.stop_reason == "error" and n == 1  # no item named: nothing safe to remove, not retried


async def test_an_exhausted_quota_on_a_200_holds_the_next_calls_until_its_reset() -> None:
    gates = ProviderGates()
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "400ms"}
    message, _, _ = await run(FakeApi(("fine", headers)), gates=gates)
    assert message.text() == "fine" and 0.3 < gates.of("p").gate.wait_s() <= 0.4
