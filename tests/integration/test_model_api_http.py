"""Both model APIs through the full stack (proxy and runtime processes, real Redis, the scripted model
behind the real openai client): the API chosen on POST /sessions, a multi-turn tool-using deck run,
and the session's prompt-cache hit ratio in GET /sessions/{id} (README "Models")."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("model-api"))
    try:
        s.start("proxy", "runtime")
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url(), headers=ALICE, timeout=httpx.Timeout(30, read=30)) as client:
        yield client


def replies(api: httpx.Client, sid: str) -> list[str]:
    return [e["text"] for e in api.get(f"/sessions/{sid}/preview").json()["transcript"] if e["kind"] == "message_user"]


def test_the_api_is_chosen_on_create_and_defaults_from_the_setting(api: httpx.Client) -> None:
    default = api.post("/sessions", json={})
    assert default.status_code == 201 and default.json()["model"]["api"] == "responses"  # no OPENAI_BASE_URL
    chosen = api.post("/sessions", json={"model": {"api": "chat"}})
    assert chosen.status_code == 201 and chosen.json()["model"]["api"] == "chat"
    bad = api.post("/sessions", json={"model": {"api": "completions"}})
    assert bad.status_code == 422


@pytest.mark.timeout(120)
@pytest.mark.parametrize("model_api", ["responses", "chat"])
def test_deck_run_and_cache_hit_ratio(stack: Stack, api: httpx.Client, model_api: str) -> None:
    created = api.post("/sessions", json={"variant": "deck-generation",
                                          "model": {"api": model_api, "reasoning_effort": "low"}})
    assert created.status_code == 201
    sid = created.json()["id"]
    assert api.get(f"/sessions/{sid}").json()["model_usage"]["requests"] == 0
    assert api.post(f"/sessions/{sid}/messages", json={"message": "Create a presentation about tides"}).status_code == 202
    # The final answer ("... is ready: 5 cards"), not the progress one ("... are ready; I am reviewing").
    wait_sync(lambda: [t for t in replies(api, sid) if "is ready" in t], timeout=90, interval=0.25, what="the deck")
    # The usage travels with the queued model_request events, flushed just after the transcript line.
    first = wait_sync(lambda: (u := api.get(f"/sessions/{sid}").json()["model_usage"])["requests"] >= 7 and u,
                      timeout=10, interval=0.1, what="the deck run's usage")
    assert first["reasoning_tokens"] > 0
    assert 0.5 < first["cache_hit_ratio"] < 1  # the static prefix and every earlier turn are cache hits
    assert api.post(f"/sessions/{sid}/messages", json={"message": "thanks"}).status_code == 202
    wait_sync(lambda: len(replies(api, sid)) >= 3, timeout=60, interval=0.25, what="the second answer")
    later = wait_sync(lambda: (u := api.get(f"/sessions/{sid}").json()["model_usage"])["requests"] > first["requests"]
                      and u, timeout=10, interval=0.1, what="the usage of the second run")
    assert later["cache_hit_ratio"] >= first["cache_hit_ratio"] and later["cached_tokens"] > first["cached_tokens"]
    metrics = httpx.get(stack.url("runtime") + "/metrics").text
    for name in ("gamma_model_input_tokens_total", "gamma_model_cached_tokens_total",
                 "gamma_model_reasoning_tokens_total"):
        assert _metric(metrics, name, model_api) > 0, name


def _metric(text: str, name: str, model_api: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and f'api="{model_api}"' in line)


@pytest.mark.timeout(60)
def test_plain_text_and_refusals_show_as_implicit_messages_in_the_preview(api: httpx.Client) -> None:
    sid = api.post("/sessions", json={}).json()["id"]
    plain = 'script:[{"content": "Just text, no tool."}]'
    assert api.post(f"/sessions/{sid}/messages", json={"message": plain}).status_code == 202
    wait_sync(lambda: replies(api, sid), timeout=30, interval=0.2, what="the implicit message")
    refusal = 'script:[{"refusal": "I cannot do that."}]'
    assert api.post(f"/sessions/{sid}/messages", json={"message": refusal}).status_code == 202
    wait_sync(lambda: len(replies(api, sid)) >= 2, timeout=30, interval=0.2, what="the refusal")
    shown = [e for e in api.get(f"/sessions/{sid}/preview").json()["transcript"] if e["kind"] == "message_user"]
    assert [(e["text"], e["implicit"], e["refusal"]) for e in shown] == [
        ("Just text, no tool.", True, False), ("The model refused: I cannot do that.", True, True)]
