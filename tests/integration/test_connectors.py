"""Connectors through the five services and the example connector (services/connectors/example):
registration checks (422 naming the field, nothing stored), an agent that loads the `brand`
namespace and calls its tools, an invalid call that is never sent, and a call answered `accepted`
whose end arrives as a background_result (docs/architecture.md "Connectors")."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.integration.runtime_support import call, done, script
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries
from tests.support.sessions import tool_results as results
from tests.support.stack import API_TOKEN, EXAMPLE_CONNECTOR, SERVICE_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)
MAX_CONNECTORS = 3


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("connectors"),
              env_overrides={"GAMMA_DYNAMIC_TOOLS": "1", "GAMMA_MAX_CONNECTORS": str(MAX_CONNECTORS)})
    try:
        s.start()
        s.start(EXAMPLE_CONNECTOR)
        wait_sync(lambda: httpx.get(s.url(EXAMPLE_CONNECTOR) + "/readyz").status_code == 200, timeout=30,
                  what="the example connector registered")
        yield s
    finally:
        s.stop()


def service(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url("notifications"), headers={"Authorization": f"Bearer {SERVICE_TOKEN}"},
                        timeout=30)


def user(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)


def tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": "a tool", "parameters": {"type": "object", "properties": {
        "a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}, **extra}


def spec(*tools: dict[str, Any]) -> dict[str, Any]:
    return {"description": "a test connector", "tools": list(tools) or [tool("t")]}


def refused(resp: httpx.Response, loc: list[Any]) -> None:
    assert resp.status_code == 422, resp.text
    assert any(e["loc"][: len(loc)] == loc for e in resp.json()["detail"]), resp.json()


def test_registration_refuses_bad_input_and_stores_nothing(stack: Stack) -> None:
    api = service(stack)
    assert httpx.put(stack.url("notifications") + "/connectors/x", json=spec()).status_code == 401
    refused(api.put("/connectors/Bad!Name", json=spec()), ["path", "name"])
    bad_schema = tool("t") | {"parameters": {"type": "object", "properties": {"a": {"type": 12}}}}
    refused(api.put("/connectors/badschema", json=spec(bad_schema)), ["body", "tools", 0, "parameters"])
    huge = tool("t") | {"parameters": {"type": "object", "description": "x" * 20_000}}
    refused(api.put("/connectors/huge", json=spec(huge)), ["body", "tools", 0, "parameters"])
    refused(api.put("/connectors/many", json=spec(*[tool(f"t{i}") for i in range(17)])), ["body", "tools"])
    refused(api.put("/connectors/dup", json=spec(tool("t"), tool("t"))), ["body", "tools", 1, "name"])
    # Valid draft 2020-12, refused by the provider's function calling: it would fail every request.
    no_items = tool("t") | {"parameters": {"type": "object", "properties": {"tags": {"type": "array"}}}}
    refused(api.put("/connectors/noitems", json=spec(no_items)), ["body", "tools", 0, "parameters", "properties", "tags"])
    for name in ("badschema", "huge", "many", "dup", "noitems"):
        assert api.get(f"/connectors/{name}").status_code == 404
    # The example holds one place: fill the rest, then one more is refused and not stored.
    for i in range(MAX_CONNECTORS - 1):
        assert api.put(f"/connectors/fill{i}", json=spec()).status_code == 200
    refused(api.put("/connectors/onetoomany", json=spec()), ["path", "name"])
    assert api.get("/connectors/onetoomany").status_code == 404
    same = api.put("/connectors/fill0", json=spec()).json()
    assert api.put("/connectors/fill0", json=spec()).json()["version"] == same["version"]  # a repeat changes nothing
    assert api.put("/connectors/fill0", json=spec(tool("u"))).json()["version"] > same["version"]  # no new place
    for i in range(MAX_CONNECTORS - 1):
        assert api.delete(f"/connectors/fill{i}").status_code == 204
    assert [c["name"] for c in api.get("/connectors").json()["connectors"]] == ["brand"]


def test_an_agent_loads_the_brand_library_and_calls_it(stack: Stack) -> None:
    api = user(stack)
    r = redis.Redis.from_url(stack.redis_url)
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, script({"tool_calls": [call("brand__colours")]},
                              {"tool_calls": [call("load_tools", namespace="connector:brand")]},
                              {"tool_calls": [call("brand__colours", role="primary")]},
                              {"tool_calls": [call("brand__images", query="logo", limit=50)]},
                              {"tool_calls": [call("brand__images", query="pattern waves")]}, done()))
    first, second = results(es, "brand__colours")
    assert first["isError"] and "not found" in first["content"][0]["text"]  # not loaded yet: not offered
    assert results(es, "load_tools")[0]["details"]["connector"] == "brand"
    assert not second["isError"]
    assert json.loads(second["content"][0]["text"])["colours"] == [
        {"name": "Aurora Teal", "hex": "#0F766E", "role": "primary"}]
    invalid, found = results(es, "brand__images")
    assert invalid["isError"] and "limit" in invalid["content"][0]["text"] and "not sent" in invalid["content"][0]["text"]
    assert [i["name"] for i in json.loads(found["content"][0]["text"])["images"]] == ["pattern-waves.svg"]
    sent = [json.loads(f[b"data"]) for _, f in r.xrange(keys.connector_calls("brand"))]
    mine = [c for c in sent if c["session_id"] == sid]
    assert [c["tool"] for c in mine] == ["colours", "images"]  # the invalid call never went out
    assert set(mine[0]) == {"type", "call_id", "session_id", "connector", "tool", "arguments", "deadline_ms"}


def test_the_scripted_model_uses_a_connector_from_plain_words(stack: Stack) -> None:
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, "Which colours do we use? Ask the connector brand for colours.")
    assert len(results(es, "brand__colours")) == 1
    assert "Aurora Teal" in json.dumps([e for e in es if e["type"] == "message"][-2])  # the reply names them


def test_an_accepted_call_finishes_as_a_background_result(stack: Stack) -> None:
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:brand")]},
                              {"tool_calls": [call("brand__kit")]}, done()))
    kit = results(es, "brand__kit")[0]
    assert not kit["isError"] and kit["details"]["accepted"] is True

    r = redis.Redis.from_url(stack.redis_url)
    wait_sync(lambda: b"pattern-waves.svg" in b"".join(f[b"data"] for _, f in r.xrange(keys.inbox(sid))),
              timeout=60, what="the kit's completion in the inbox")
    # Delivered after the yield, a background_result waits for the next turn (the idle rules).
    after = ask(api, sid, script(done("the kit is in")))
    found = [e for e in after if "background_result" in json.dumps(e) and "pattern-waves.svg" in json.dumps(e)]
    assert len(found) == 1 and "<quoted" in json.dumps(found[0])  # the connector's words are quoted data


def test_a_connector_killed_before_it_answers_answers_once_after_its_restart(stack: Stack) -> None:
    api = user(stack)
    r = redis.Redis.from_url(stack.redis_url)
    stack.kill(EXAMPLE_CONNECTOR, signal.SIGSTOP)  # it may hold the call unread ...
    sid = api.post("/sessions").json()["id"]
    assert api.post(f"/sessions/{sid}/messages", json={"message": script(
        {"tool_calls": [call("load_tools", namespace="connector:brand")]},
        {"tool_calls": [call("brand__colours", role="accent")]}, done("coloured"))}).status_code == 202
    wait_sync(lambda: any(json.loads(f[b"data"])["session_id"] == sid
                          for _, f in r.xrange(keys.connector_calls("brand"))), timeout=60, what="the call sent")
    stack.kill(EXAMPLE_CONNECTOR, signal.SIGKILL)  # ... when it dies
    stack.start(EXAMPLE_CONNECTOR)
    es = wait_sync(lambda: (lambda es: es if results(es, "message_user") else None)(entries(api, sid)), timeout=90,
                   what="the run's end")
    answers = results(es, "brand__colours")
    assert len(answers) == 1 and not answers[0]["isError"]
    assert json.loads(answers[0]["content"][0]["text"])["colours"][0]["name"] == "Signal Coral"
    # The restart registered the same spec: nothing changed, so no update about the loaded connector.
    assert not [e for e in es if e["type"] == "custom_message" and "connector.brand." in json.dumps(e)]
