"""The model catalogue through the five services (docs/models.md), asserted on the requests a stand-in
provider received (tests/support/recording_model.py):
- the default configuration (gpt-5-mini over Responses, no effort set) asks for encrypted reasoning on
  every call, so a multi-turn session with tool calls replays its reasoning items whole (reference
  §1.1-1.3: without it, the second call is a 404 under `store:false`);
- POST /sessions refuses what the model rejects with a 422 naming the field and the allowed values, and
  creates nothing;
- PATCH /sessions/{id} changes the model, live and dormant: a `model_change` transcript entry, the next
  call on the new model (the old model's reasoning left out), a refused change changing nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.integration.runtime_support import call, done, script
from tests.support.polling import wait_sync
from tests.support.recording_model import RecordingModel
from tests.support.sessions import ask, entries
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)


@dataclass
class Env:
    stack: Stack
    model: RecordingModel
    http: httpx.Client


@pytest.fixture(scope="module")
def env(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    model = RecordingModel().start()
    env = {k: v for k, v in model.env().items() if k != "GAMMA_MODEL_API"}  # the default: Responses on OpenAI
    env["GAMMA_MODEL_API"] = "responses"
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("catalogue"), env_overrides=env)
    stack.start()
    http = httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)
    try:
        yield Env(stack, model, http)
    finally:
        http.close()
        stack.stop()
        model.stop()


def reasoning_in(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body.get("input", []) if i.get("type") == "reasoning"]


def sent_since(env: Env, n: int) -> list[dict[str, Any]]:
    return [r.body for r in env.model.agent_requests()[n:]]


def test_the_default_config_replays_its_reasoning_whole_across_turns(env: Env) -> None:
    resp = env.http.post("/sessions", json={})
    assert resp.status_code == 201, resp.text
    sid, view = resp.json()["id"], resp.json()
    assert view["model"].get("reasoning_effort") is None and view["model"]["api"] == "responses"
    before = len(env.model.agent_requests())
    steps = [{"tool_calls": [call("read", path=f"f{i}.txt")], "reasoning": f"Read f{i}."} for i in range(2)]
    ask(env.http, sid, script(*steps, done("first")))
    ask(env.http, sid, script({"tool_calls": [call("read", path="g.txt")], "reasoning": "Read g."}, done("second")))
    sent = sent_since(env, before)
    assert len(sent) == 5 and all(b["model"] == "gpt-5-mini" for b in sent)
    for body in sent:  # no effort sent, yet the model reasons at medium: encrypted content on every call
        assert body["include"] == ["reasoning.encrypted_content"] and body["store"] is False
        assert "effort" not in body.get("reasoning", {}) and body["reasoning"]["summary"] == "auto"
    for n, body in enumerate(sent):  # call n carries the n reasoning items before it (the double reasons
        replayed = reasoning_in(body)  # at the default effort on every call), each with its encrypted content
        assert len(replayed) == n and all(i.get("encrypted_content") for i in replayed)


@pytest.mark.parametrize(("model", "field", "allowed"), [
    ({"name": "gpt-4o", "reasoning_effort": "low"}, "model.reasoning_effort", []),
    ({"name": "gpt-5.1", "reasoning_effort": "minimal"}, "model.reasoning_effort", ["none", "low", "medium", "high"]),
    ({"name": "gpt-5-mini", "reasoning_effort": "xhigh"}, "model.reasoning_effort",
     ["minimal", "low", "medium", "high"]),
    ({"name": "gpt-5-codex", "api": "chat"}, "model.api", ["responses"]),
    ({"name": "gpt-5.4", "api": "chat", "reasoning_effort": "high"}, "model.reasoning_effort", ["none"]),
])
def test_create_refuses_what_the_model_rejects(env: Env, model: dict[str, Any], field: str,
                                               allowed: list[str]) -> None:
    count = len(env.http.get("/sessions").json()["sessions"])
    resp = env.http.post("/sessions", json={"model": model})
    assert resp.status_code == 422, resp.text
    assert resp.json()["detail"]["field"] == field and resp.json()["detail"]["allowed"] == allowed
    assert len(env.http.get("/sessions").json()["sessions"]) == count  # nothing created


def test_create_takes_new_efforts_and_refuses_unknown_fields(env: Env) -> None:
    ok = env.http.post("/sessions", json={"model": {"name": "gpt-5.6-sol", "reasoning_effort": "max"}})
    assert ok.status_code == 201 and ok.json()["model"]["api"] == "responses", ok.text
    for bad in ({"name": "gpt-5", "temperature": 0.2}, {"reasoning_effort": "huge"}, {"name": "a b\u202e"}):
        assert env.http.post("/sessions", json={"model": bad}).status_code == 422, bad


def test_patch_changes_the_model_live_and_dormant(env: Env) -> None:
    sid = env.http.post("/sessions", json={"model": {"name": "gpt-5-mini", "reasoning_effort": "low"}}).json()["id"]
    ask(env.http, sid, script({"tool_calls": [call("read", path="a.txt")], "reasoning": "Read a."}, done("one")))
    assert env.http.get(f"/sessions/{sid}").json()["status"] == "live"
    refused = env.http.patch(f"/sessions/{sid}", json={"model": {"name": "gpt-4.1", "reasoning_effort": "low"}})
    assert refused.status_code == 422 and refused.json()["detail"]["field"] == "model.reasoning_effort"
    assert not [e for e in entries(env.http, sid) if e["type"] == "model_change"]  # nothing changed

    changed = env.http.patch(f"/sessions/{sid}", json={"model": {"name": "gpt-4.1"}})  # live
    assert changed.status_code == 200, changed.text
    assert changed.json()["model"]["name"] == "gpt-4.1" and changed.json()["model"].get("reasoning_effort") is None
    marks = [e for e in entries(env.http, sid) if e["type"] == "model_change"]
    assert [m["modelId"] for m in marks] == ["gpt-4.1"]
    before = len(env.model.agent_requests())
    ask(env.http, sid, script(done("two")))
    body = sent_since(env, before)[0]
    assert body["model"] == "gpt-4.1" and reasoning_in(body) == []  # another model's reasoning stays out
    assert "reasoning" not in body and "include" not in body and body["max_output_tokens"] == 32_000

    assert env.http.post(f"/sessions/{sid}/suspend").status_code in (200, 202)
    wait_sync(lambda: env.http.get(f"/sessions/{sid}").json()["status"] == "dormant" or None, timeout=30,
              what="the session dormant")
    dormant = env.http.patch(f"/sessions/{sid}", json={"model": {"name": "o4-mini", "reasoning_effort": "high"}})
    assert dormant.status_code == 200, dormant.text
    assert [m["modelId"] for m in entries(env.http, sid) if m["type"] == "model_change"] == ["gpt-4.1", "o4-mini"]
    before = len(env.model.agent_requests())
    ask(env.http, sid, script(done("three")))
    body = sent_since(env, before)[0]
    assert body["model"] == "o4-mini" and body["reasoning"]["effort"] == "high" and "parallel_tool_calls" not in body


@pytest.mark.parametrize(("model", "check"), [
    # reference §2.2: o-series refuse parallel_tool_calls on Chat, even false
    ({"name": "o4-mini", "api": "chat"}, lambda b: "parallel_tool_calls" not in b and "max_tokens" not in b),
    # §2.1: from gpt-5.4 Chat takes function tools only at effort none; on 5.6 even when none is sent
    ({"name": "gpt-5.6-sol", "api": "chat"}, lambda b: b["reasoning_effort"] == "none"),
    # §2.2/§2.3: gpt-4o's output cap is 16,384 (the deployment's 32,000 is lowered)
    ({"name": "gpt-4o", "api": "chat"}, lambda b: b["max_completion_tokens"] == 16_384 and "reasoning_effort" not in b),
    ({"name": "gpt-4o", "api": "responses"}, lambda b: b["max_output_tokens"] == 16_384 and "include" not in b),
    # §2.1: a codex model is served on Responses only: a session with no API asked for goes there
    ({"name": "gpt-5-codex"}, lambda b: "input" in b and b["include"] == ["reasoning.encrypted_content"]),
    # §2.2: o1-mini takes neither system nor developer
    ({"name": "o1-mini", "api": "chat"}, lambda b: {m["role"] for m in b["messages"]} <= {"user", "assistant", "tool"}),
])
def test_each_model_gets_the_requests_it_accepts(env: Env, model: dict[str, Any], check: Any) -> None:
    """Through the services, against the strict double: a turn with a tool call completes on each model,
    and every request carries only what that model takes (each would be a 400 or 404 today)."""
    resp = env.http.post("/sessions", json={"model": model})
    assert resp.status_code == 201, resp.text
    sid = resp.json()["id"]
    before = len(env.model.agent_requests())
    items = ask(env.http, sid, script({"tool_calls": [call("read", path="a.txt")]}, done("ok")))
    assert not [e for e in items if e["type"] == "message" and e["message"].get("stopReason") == "error"]
    sent = sent_since(env, before)
    assert len(sent) == 2 and all(check(b) for b in sent), sent[-1]
