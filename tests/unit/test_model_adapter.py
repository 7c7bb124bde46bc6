"""Model adapter pieces without a stack: the API default, old transcripts, the
simulated prompt cache."""

from __future__ import annotations

import pytest

from scripted.prompt_cache import PromptCache
from services.runtime.model.model_api import ModelSettings
from shared.contracts.records.messages import AssistantMessage
from shared.contracts.records.transcript import parse_entries
from shared.history.context import build_context
from shared.settings import Settings


@pytest.mark.parametrize(("base_url", "setting", "expected"), [
    (None, None, "responses"),
    ("https://api.openai.com/v1", None, "responses"),
    ("http://localhost:11434/v1", None, "chat"),
    ("https://x.openai.azure.com/openai/v1/", None, "chat"),
    ("http://localhost:8000/v1", "responses", "responses"),
    (None, "chat", "chat"),
])
def test_default_model_api(base_url: str | None, setting: str | None, expected: str) -> None:
    s = Settings(OPENAI_BASE_URL=base_url, GAMMA_MODEL_API=setting)
    assert s.models.default_model_api == expected


def test_transcripts_written_before_issue_18_still_load() -> None:
    old = [
        {"type": "session", "id": "h", "timestamp": "2026-01-01T00:00:00.000Z", "version": 3},
        {"type": "message", "id": "a1", "parentId": "h", "timestamp": "2026-01-01T00:00:01.000Z",
         "message": {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"},
                                                      {"type": "text", "text": "hi"}],
                     "stopReason": "stop", "model": "gpt-4o",
                     "usage": {"input": 10, "output": 2, "cacheRead": 0, "totalTokens": 12}, "timestamp": 1}},
    ]
    entries = parse_entries(old)
    assert len(entries) == 2
    (message,) = build_context(entries)
    assert isinstance(message, AssistantMessage) and message.text() == "hi"
    assert message.api is None and message.refusal is None and not message.implicit_message_user
    assert message.usage.reasoning == 0


def test_prompt_cache_hits_in_128_token_steps_past_1024_per_key() -> None:
    cache = PromptCache()
    base = "x" * (4 * 1000)
    assert cache.lookup_and_store("k", base + "a" * 400) == 0  # nothing seen before
    assert cache.lookup_and_store("k", base + "b") == 0  # 1,000 shared tokens: under the minimum
    long = "y" * (4 * 1300)
    cache.lookup_and_store("k", long + "1")
    assert cache.lookup_and_store("k", long + "2") == 1280  # 1,300 shared -> 1,024 + 2 x 128
    assert cache.lookup_and_store("other", long + "3") == 0  # another prompt_cache_key


def test_prompt_cache_drops_a_key_unused_for_its_ttl() -> None:
    """A dormant session's prompts do not stay in the simulator (it lives in the runtime's process)."""
    now = [0.0]
    cache = PromptCache(ttl_s=300, clock=lambda: now[0])
    long = "y" * (4 * 1300)
    cache.lookup_and_store("old", long + "1")
    now[0] = 200.0
    cache.lookup_and_store("recent", long + "2")
    now[0] = 299.0
    assert cache.lookup_and_store("old", long + "3") == 1280  # used again within the TTL: kept, refreshed
    now[0] = 550.0
    cache.lookup_and_store("new", "z")
    assert len(cache) == 2  # "recent" (last used at 200) went; "old" (299) stays
    now[0] = 700.0
    assert cache.lookup_and_store("old", long + "4") == 0 and len(cache) == 2  # expired, then stored again


def test_chat_sends_prompt_cache_key_only_to_openai() -> None:
    from services.runtime.engine.types import AgentContext
    from services.runtime.model.chat_api import ChatApi

    context = AgentContext("sys", [], [])
    for base, expected in ((None, True), ("https://api.openai.com/v1", True), ("http://localhost:8000/v1", False)):
        s = Settings(OPENAI_BASE_URL=base)
        body = ChatApi().body(context, ModelSettings(model="m", cache_key="sid1", chat_cache_key=s.models.openai_endpoint))
        assert ("prompt_cache_key" in body) is expected
