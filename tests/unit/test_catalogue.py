"""The model catalogue (shared/catalogue, docs/models.md): names resolved exactly or as dated snapshots,
Azure deployments mapped, the unknown-model default, GAMMA_MODEL_CATALOGUE_EXTRA; and the request bodies
built from it for every catalogued model on every API it serves (reference openai-api-rules.md §2)."""

from __future__ import annotations

from typing import Any

import pytest

from scripted.strict import Strictness
from scripted.strict.replies import encrypt
from scripted.strict.requests import check
from services.runtime.engine.types import AgentContext, Tool
from services.runtime.model.chat_api import ChatApi
from services.runtime.model.model_api import ModelSettings
from services.runtime.model.responses_api import ResponsesApi
from shared.catalogue import Catalogue, catalogue, check_config, settle_api
from shared.contracts.records.messages import (
    AssistantMessage,
    ImageRef,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.contract.test_model_api import CHAT, RESPONSES, assert_exact

CAT = catalogue()
NAMES = sorted(n for n, e in CAT.entries.items() if n == e.name)


async def _run(_: Any, __: Any) -> Any:
    return None


TOOLS = [Tool("read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}, _run)]
IMAGE = ImageRef(sha256="a" * 64, mime_type="image/png", width=8, height=8, bytes=100, path="shot.png")


class Urls:
    def url(self, ref: ImageRef) -> str | None:
        return "data:image/png;base64,AAAA"


def context(model: str) -> AgentContext:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": encrypt(model, "rs_1")}
    return AgentContext("You are Gamma.", [
        UserMessage(content="look", images=[IMAGE]),
        AssistantMessage(model=model, content=[ThinkingContent(thinking="", item=reasoning),
                                               ToolCall(id="c1", name="read", arguments={"path": "a"})]),
        ToolResultMessage(tool_call_id="c1", tool_name="read", content=[TextContent(text="A")]),
        AssistantMessage(model=model, content=[TextContent(text="done", phase="final_answer")]),
    ], TOOLS)


def body_for(model: str, api: str, effort: str | None = None) -> dict[str, Any]:
    s = ModelSettings(model=model, api=api, reasoning_effort=effort, max_output_tokens=32_000,  # type: ignore[arg-type]
                      images=Urls())
    return (ResponsesApi() if api == "responses" else ChatApi()).body(context(model), s)


def nulls(value: Any, path: str = "") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in nulls(v, f"{path}[{i}]")]
    return []


def has_image(body: dict[str, Any]) -> bool:
    return "image_url" in str(body.get("input") or body.get("messages"))


@pytest.mark.parametrize("name", NAMES)
def test_every_model_gets_a_body_its_api_accepts(name: str) -> None:
    """Per served API, at the default effort and at each accepted one: valid against the SDK's params,
    no explicit null, effort only where accepted, encrypted content asked for whenever the model
    reasons, parallel_tool_calls only where taken, output capped at the model's maximum, images only
    to vision models, `max_tokens` never."""
    entry = CAT.resolve(name)
    caps = entry.caps
    for api in caps.apis:
        for effort in (None, *caps.efforts):
            body = body_for(name, api, effort)
            assert_exact(RESPONSES if api == "responses" else CHAT, body)
            refused = check(api, body, Strictness())  # the strict double's own rule table (scripted/strict)
            assert refused is None, (name, api, effort, refused and refused.message)
            assert nulls(body) == [], (name, api, effort)
            assert "max_tokens" not in body
            assert has_image(body) == caps.vision
            reasons = caps.effective_effort(effort) not in (None, "none")
            if api == "responses":
                sent = body.get("reasoning", {}).get("effort")
                assert sent == effort and (sent is None or sent in caps.efforts)
                assert ("include" in body) == reasons, (name, effort)
                assert ("parallel_tool_calls" in body) == caps.parallel_tool_calls.responses
                assert body["max_output_tokens"] <= (caps.max_output or 32_000)
                replayed = [i for i in body["input"] if i.get("type") == "reasoning"]
                assert len(replayed) == 1  # the same model made it
                final = [i for i in body["input"] if i.get("type") == "message" and i["role"] == "assistant"]
                assert ("phase" in final[-1]) == caps.phase
            else:
                sent = body.get("reasoning_effort")
                assert sent is None or sent in caps.efforts
                assert ("parallel_tool_calls" in body) == caps.parallel_tool_calls.chat
                assert body["max_completion_tokens"] <= (caps.max_output or 32_000)
                assert body["messages"][0]["role"] == ("system" if caps.developer_role else "user")


@pytest.mark.parametrize(("model", "api", "effort", "expect"), [
    # reference §1.1-1.3: gpt-5-mini reasons at medium when no effort is sent -> encrypted content asked for
    ("gpt-5-mini", "responses", None, {"include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"}}),
    ("gpt-5-mini-2025-08-07", "responses", "minimal",
     {"include": ["reasoning.encrypted_content"], "reasoning": {"effort": "minimal", "summary": "auto"}}),
    ("gpt-5.1", "responses", None, {"include": None, "reasoning": None}),  # default none: no reasoning
    ("gpt-4o", "responses", None, {"include": None, "reasoning": None, "max_output_tokens": 16_384}),
    ("gpt-4o", "chat", None, {"reasoning_effort": None, "max_completion_tokens": 16_384, "parallel_tool_calls": True}),
    ("o3", "chat", "high", {"reasoning_effort": "high", "parallel_tool_calls": None}),  # §2.2: refused even false
    ("o4-mini", "responses", None, {"parallel_tool_calls": None, "include": ["reasoning.encrypted_content"]}),
    ("gpt-5.4", "chat", None, {"reasoning_effort": "none"}),  # §2.1: function tools on Chat need none
    ("gpt-5.6-sol", "chat", None, {"reasoning_effort": "none"}),  # even with no effort sent (default medium)
    ("gpt-5.6-sol", "responses", "max", {"reasoning": {"effort": "max", "summary": "auto"}}),
    # a row written before the catalogue checked it: an effort the model refuses is left out, not sent
    ("gpt-4o", "responses", "low", {"reasoning": None, "include": None}),
    ("gpt-4.1", "chat", "high", {"reasoning_effort": None}),
])
def test_bodies_follow_the_reference(model: str, api: str, effort: str | None, expect: dict[str, Any]) -> None:
    body = body_for(model, api, effort)
    for key, value in expect.items():
        assert body.get(key) == value, key


def test_o1_mini_takes_neither_system_nor_developer_and_no_images() -> None:
    body = body_for("o1-mini", "chat")
    assert {m["role"] for m in body["messages"]} <= {"user", "assistant", "tool"}
    assert "takes no images" in str(body["messages"]) and not has_image(body)


def test_names_resolve_exactly_or_as_dated_snapshots_never_by_prefix() -> None:
    assert CAT.resolve("gpt-5-mini-2025-08-07").name == "gpt-5-mini"
    assert CAT.resolve("gpt-4.1-nano").name == "gpt-4.1-nano" and CAT.resolve("gpt-5-pro").name == "gpt-5-pro"
    assert CAT.resolve("gpt-4.1-nano-2025-04-14").name == "gpt-4.1-nano"
    for unknown in ("gpt-5-minis", "gpt-5-mini-latest-x", "llama3.1:8b", "gpt-5-mini-2025-08"):
        assert not CAT.resolve(unknown).known, unknown


def test_the_unknown_default_is_safe_and_extra_models_override_it() -> None:
    caps = CAT.resolve("my-local").caps
    assert set(caps.apis) == {"chat", "responses"} and caps.efforts == () and not caps.reasons
    assert not caps.parallel_tool_calls.chat and not caps.vision and caps.max_output is None
    body = body_for("my-local", "chat")
    assert not ({"reasoning_effort", "parallel_tool_calls", "max_completion_tokens"} & body.keys())
    extra = Catalogue.load('{"my-local": {"like": "gpt-5-mini", "caps": {"vision": false}}, '
                           '"qwen": {"caps": {"efforts": ["low", "high"], "default_effort": "low"}}}')
    assert extra.resolve("my-local").caps.efforts == ("minimal", "low", "medium", "high")
    assert not extra.resolve("my-local").caps.vision and extra.resolve("qwen").caps.reasons
    for bad in ('{"x": {"like": "nope"}}', '{"x": {"caps": {"efforts": ["huge"]}}}', '{"x": {"colour": 1}}', "[1]"):
        with pytest.raises(ValueError):
            Catalogue.load(bad)


def test_azure_deployments_map_to_their_models() -> None:
    cat = Catalogue.load("", '{"prod-chat": "gpt-4o", "reasoner": "o4-mini-2025-04-16"}')
    assert cat.resolve("prod-chat").name == "gpt-4o" and cat.resolve("reasoner").name == "o4-mini"
    assert not cat.resolve("unmapped-deployment").known


@pytest.mark.parametrize(("model", "effort", "api", "field", "allowed"), [
    ("gpt-4o", "low", "responses", "model.reasoning_effort", ()),
    ("gpt-5.1", "minimal", "responses", "model.reasoning_effort", ("none", "low", "medium", "high")),
    ("gpt-5-mini", "xhigh", "chat", "model.reasoning_effort", ("minimal", "low", "medium", "high")),
    ("gpt-5-codex", None, "chat", "model.api", ("responses",)),
    ("o1-mini", None, "responses", "model.api", ("chat",)),
    ("gpt-5.4", "high", "chat", "model.reasoning_effort", ("none",)),
])
def test_refused_combinations_name_the_field_and_the_allowed_values(
        model: str, effort: Any, api: Any, field: str, allowed: tuple[str, ...]) -> None:
    problem = check_config(model, CAT.resolve(model), effort, api)
    assert problem is not None and problem.field == field and problem.allowed == allowed


def test_the_api_of_a_new_session() -> None:
    assert settle_api(CAT.resolve("gpt-5-codex"), None, "chat", None) == "responses"  # Responses only
    assert settle_api(CAT.resolve("gpt-5.6-sol"), None, "chat", None) == "responses"  # tools need Responses
    assert settle_api(CAT.resolve("gpt-5.4"), None, "chat", None) == "chat"  # reasons at none by default
    assert settle_api(CAT.resolve("gpt-5.4"), None, "chat", "high") == "responses"
    assert settle_api(CAT.resolve("gpt-5.6-sol"), "chat", "responses", None) == "chat"  # asked for: kept (effort none)


async def test_the_summarizer_follows_the_catalogue_too() -> None:
    """The compaction summary call: a Responses-only model on Responses, a text-only model without
    images, o1-mini's prompt as user text, the output capped at the model's maximum."""
    from services.compaction.summarizer import Summarizer

    sent: list[tuple[str, dict[str, Any]]] = []

    class Client:
        class chat:  # noqa: N801 - the SDK's attribute names
            class completions:  # noqa: N801
                @staticmethod
                async def create(**body: Any) -> Any:
                    sent.append(("chat", body))
                    message = type("M", (), {"content": "summary"})
                    return type("R", (), {"choices": [type("C", (), {"message": message, "finish_reason": "stop"})]})

        class responses:  # noqa: N801
            @staticmethod
            async def create(**body: Any) -> Any:
                sent.append(("responses", body))
                return type("R", (), {"output_text": "summary"})

    summarizer = Summarizer(Client(), "gpt-5-mini", "chat")  # type: ignore[arg-type]
    await summarizer.complete("sum up", 200_000, model="gpt-5-codex")
    await summarizer.complete("sum up", 200_000, model="o1-mini")
    await summarizer.complete("sum up", 8_000, model="gpt-4o")
    (api1, codex), (api2, o1), (_, gpt4o) = sent
    assert api1 == "responses" and codex["max_output_tokens"] == 128_000
    assert api2 == "chat" and [m["role"] for m in o1["messages"]] == ["user", "user"]
    assert o1["max_completion_tokens"] == 65_536 and gpt4o["messages"][0]["role"] == "system"
    assert gpt4o["max_completion_tokens"] == 8_000
