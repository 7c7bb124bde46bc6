"""Models before GPT-5.6 (the `prefix` cache regime) get exactly the requests they got before the
breakpoint regime existed (docs/cache.md "Old models"): each variant's request on both APIs, built
from the real system prompt and tool set, is compared with `tests/golden/requests/` (recorded
before breakpoints were added), and its system prompt and tools with `tests/golden/prefix/` (the
static prefix's own golden). `GAMMA_UPDATE_GOLDEN=1` rewrites the request goldens (review the diff:
for these models it must be empty)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from services.runtime.engine.types import AgentContext
from services.runtime.model.chat_api import ChatApi
from services.runtime.model.model_api import ModelSettings
from services.runtime.model.responses_api import ResponsesApi
from services.runtime.skillset.prompt import VARIANTS, Variant, build_system_prompt, static_prefix
from services.runtime.skillset.skills import load_skills
from services.runtime.tools import Toolset
from shared.contracts.records.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "requests"
PREFIX = REPO / "tests" / "golden" / "prefix"
UPDATE = os.environ.get("GAMMA_UPDATE_GOLDEN") == "1"
OLD_MODELS = ("gpt-5", "gpt-4.1")
MARK = "\n===== tools (in order) =====\n"


def conversation(model: str) -> list[Any]:
    return [UserMessage(content="Make a 3-card deck about tides"),
            AssistantMessage(model=model, content=[ToolCall(id="c1", name="read", arguments={"path": "brief.md"})]),
            ToolResultMessage(tool_call_id="c1", tool_name="read", content=[TextContent(text="Tides: the moon.")]),
            AssistantMessage(model=model, content=[TextContent(text="Done.")])]


def request(model: str, api: str, variant: Variant) -> dict[str, Any]:
    skills = load_skills(REPO / "skills")
    context = AgentContext(build_system_prompt(variant, skills), conversation(model),
                           Toolset(None).tools, static_prefix=static_prefix(skills))  # type: ignore[arg-type]
    settings = ModelSettings(model=model, api=api, cache_key="sess-1", chat_cache_key=True,  # type: ignore[arg-type]
                             max_output_tokens=32_000)
    return (ResponsesApi() if api == "responses" else ChatApi()).body(context, settings)


def prompt_and_tools(api: str, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    if api == "responses":
        return body["instructions"], [{"type": "function", "function": {
            "name": t["name"], "description": t["description"], "parameters": t["parameters"]}} for t in body["tools"]]
    return body["messages"][0]["content"], body["tools"]


def without_prompt(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The body with the system prompt and tool schemas out (they are pinned by the prefix golden)."""
    out = json.loads(json.dumps(body))
    if api == "responses":
        out["instructions"] = "<tests/golden/prefix>"
    else:
        out["messages"][0]["content"] = "<tests/golden/prefix>"
    out["tools"] = [t.get("name") or t["function"]["name"] for t in out["tools"]]
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize("model", OLD_MODELS)
def test_old_models_requests_are_unchanged(model: str, api: str, variant: Variant) -> None:
    body = request(model, api, variant)
    prompt, tools = prompt_and_tools(api, body)
    assert prompt + MARK + json.dumps(tools, ensure_ascii=False, indent=1) + "\n" == \
        (PREFIX / f"{variant}.txt").read_text(encoding="utf-8")
    text = json.dumps(without_prompt(api, body), ensure_ascii=False, indent=1) + "\n"
    path = GOLDEN / f"{model}.{api}.{variant}.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path.name} missing: run with GAMMA_UPDATE_GOLDEN=1 and commit it"
    assert path.read_text(encoding="utf-8") == text, f"{model}'s {api} request changed ({path.name})"
    assert "prompt_cache_options" not in json.dumps(body) and "prompt_cache_breakpoint" not in json.dumps(body)
