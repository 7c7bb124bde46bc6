"""Connector faults through the five services, the test playing the connector (it reads the call
stream and answers over HTTP when it chooses): a timeout is an error result and the run goes on, a
late answer is dropped; a schema change reaches the next request with a workspace_update; a runtime
killed mid-call delivers the answer once after the takeover, and that takeover holds up no other wake
(docs/architecture.md "Connectors")."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.integration.runtime_support import Driver, call, done, script
from tests.support.played_connector import PlayedConnector
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries
from tests.support.sessions import tool_results as results
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("connector-faults"),
              # One wake per read: a wake that waited for a connector would hold up the next one.
              env_overrides={"GAMMA_DYNAMIC_TOOLS": "1", "GAMMA_RUNTIME_WAKES_AT_ONCE": "1"})
    try:
        s.start()
        yield s
    finally:
        s.stop()


def user(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)


def post(api: httpx.Client, sid: str, text: str) -> None:
    assert api.post(f"/sessions/{sid}/messages", json={"message": text}).status_code == 202


def test_a_session_that_never_loads_a_connector_sends_the_same_prefix(stack: Stack) -> None:
    """Before any connector exists, and with one enabled for every workspace: the same requests, byte for
    byte in their static prefix (system prompt and tool schemas, prefix_sha256)."""
    api = user(stack)
    d = Driver(stack.redis_url)
    steps = ({"tool_calls": [call("load_tools", namespace="gamma")]}, {"tool_calls": [call("todo", todos=[])]}, done())

    def prefixes() -> list[str]:
        sid = api.post("/sessions").json()["id"]
        ask(api, sid, script(*steps))
        return [e["data"]["prefix_sha256"] for e in d.events(sid) if e["type"] == "model_request"]

    without = prefixes()
    PlayedConnector(stack, "present", timeout_s=5)
    assert prefixes() == without and len(set(without)) == 2


def test_a_timeout_is_an_error_result_and_a_late_answer_is_dropped(stack: Stack) -> None:
    played = PlayedConnector(stack, "slow", timeout_s=1)
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:slow")]},
                              {"tool_calls": [call("slow__echo", a="x")]}, done("went on")))
    timed_out = results(es, "slow__echo")[0]
    assert timed_out["isError"] and timed_out["details"]["timed_out"] is True
    late = played.answer(played.calls(sid)[0], "too late")
    assert late.status_code == 200 and late.json()["status"] == "late"
    assert "connector_result_late" in stack.log("notifications")
    assert len(results(entries(api, sid), "slow__echo")) == 1
    assert "too late" not in json.dumps(entries(api, sid))


def test_a_schema_change_reaches_the_next_request_with_a_workspace_update(stack: Stack) -> None:
    played = PlayedConnector(stack, "changing", timeout_s=60)
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    post(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:changing")]},
                          {"tool_calls": [call("changing__echo", a="x")]},
                          {"tool_calls": [call("changing__echo", b="y")]}, done()))
    first = played.wait_call(sid)
    version = played.register(60, "b")  # while the first call runs: the next request has the new schema
    assert played.answer(first, "one").status_code == 202
    second = played.wait_call(sid, 2)
    assert second["arguments"] == {"b": "y"}  # valid only under the new schema: sent
    assert played.answer(second, "two").status_code == 202
    es = wait_sync(lambda: (lambda es: es if results(es, "message_user") else None)(entries(api, sid)), timeout=60,
                   what="the run's end")
    updates = [e for e in es if e["type"] == "custom_message"
               and e["details"].get("sourceId", "").startswith("connector.changing.")]
    assert len(updates) == 1 and f"now version {version}" in json.dumps(updates[0])
    # The catalog changed during the run: told through the inbox, with the connector's new version.
    catalogs = [e for e in es if e["type"] == "custom_message"
                and e["details"].get("sourceId", "").startswith("connectors.catalog.")]
    assert any(f'namespace="connector:changing" version="{version}"' in e["content"] for e in catalogs)
    d = Driver(stack.redis_url)
    hashes = [e["data"]["prefix_sha256"] for e in d.events(sid) if e["type"] == "model_request"]
    assert len(set(hashes[:3])) == 3  # the core tools, the connector loaded, its changed schema
    echoes = results(es, "changing__echo")
    assert [e["content"][0]["text"] for e in echoes] == ["one", "two"] and not any(e["isError"] for e in echoes)


def test_a_runtime_killed_mid_call_delivers_the_answer_once(stack: Stack) -> None:
    played = PlayedConnector(stack, "durable", timeout_s=90)
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    post(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:durable")]},
                          {"tool_calls": [call("durable__echo", a="x")]}, done("after the takeover")))
    sent = played.wait_call(sid)
    stack.kill("runtime", signal.SIGKILL)
    assert played.answer(sent, "the answer").status_code == 202
    assert played.answer(sent, "the answer").json()["status"] == "duplicate"  # a retry changes nothing
    stack.start("runtime")

    def finished() -> list[dict[str, Any]] | None:
        es = entries(api, sid)
        return es if results(es, "message_user") and "after the takeover" in json.dumps(es) else None

    es = wait_sync(finished, timeout=120, what="the run continued after the takeover")
    answers = results(es, "durable__echo")
    assert len(answers) == 1 and answers[0]["content"][0]["text"] == "the answer" and not answers[0]["isError"]


def test_a_takeover_waits_for_an_answer_that_comes_after_it(stack: Stack) -> None:
    played = PlayedConnector(stack, "later", timeout_s=90)
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    post(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:later")]},
                          {"tool_calls": [call("later__echo", a="x")]}, done("answered late")))
    sent = played.wait_call(sid)
    stack.kill("runtime", signal.SIGKILL)
    stack.start("runtime")
    wait_sync(lambda: f'"session_id": "{sid}", "event": "resuming_orphaned_session"' in stack.log("runtime"),
              timeout=90, what="the takeover waiting for the answer")
    assert played.answer(sent, "after the takeover").status_code == 202

    def finished() -> list[dict[str, Any]] | None:
        es = entries(api, sid)
        return es if results(es, "message_user") and "answered late" in json.dumps(es) else None

    answers = results(wait_sync(finished, timeout=120, what="the run's end"), "later__echo")
    assert [a["content"][0]["text"] for a in answers] == ["after the takeover"]


def test_a_taken_over_call_still_pending_holds_up_no_other_wake(stack: Stack) -> None:
    """The takeover's wake ends with the call open: a second session woken on the same worker after it
    answers its prompt while that call is still unanswered; then the answer enters once, before the
    prompt sent to the first session meanwhile, and the run goes on to answer that prompt."""
    played = PlayedConnector(stack, "pending", timeout_s=600)  # longer than any wait below
    api = user(stack)
    r = redis.Redis.from_url(stack.redis_url)
    first = api.post("/sessions").json()["id"]
    post(api, first, script({"tool_calls": [call("load_tools", namespace="connector:pending")]},
                            {"tool_calls": [call("pending__echo", a="x")]}, done("before the takeover")))
    sent = played.wait_call(first)
    stack.kill("runtime", signal.SIGKILL)
    wait_sync(lambda: not r.exists(keys.lease(first)), timeout=30, what="the dead holder's lease expired")
    post(api, first, script(done("after the pending call")))  # a dormant session's prompt: a wake on the bus
    stack.start("runtime")
    wait_sync(lambda: r.exists(keys.lease(first)), timeout=90, what="the takeover's wake under way")
    second = api.post("/sessions").json()["id"]
    answered = ask(api, second, script(done("the second session answered")))  # its wake queued after the first's
    assert "the second session answered" in json.dumps(answered)
    assert not r.hexists(keys.connector_call(first, sent["call_id"]), "outcome")
    assert not results(entries(api, first), "pending__echo")  # still pending: no result, no "interrupted"
    assert played.answer(sent, "the late answer").status_code == 202

    def finished() -> list[dict[str, Any]] | None:
        es = entries(api, first)
        said = [c["arguments"].get("message") for e in es if e["type"] == "message"
                and e["message"]["role"] == "assistant" for c in e["message"]["content"] if c["type"] == "toolCall"]
        return es if "after the pending call" in said else None

    es = wait_sync(finished, timeout=120, what="the first session's run went on to the prompt sent meanwhile")
    answers = results(es, "pending__echo")
    assert [a["content"][0]["text"] for a in answers] == ["the late answer"] and not answers[0]["isError"]
    roles = [(e["message"]["role"], json.dumps(e["message"])) for e in es if e["type"] == "message"]
    result_at = next(i for i, (role, m) in enumerate(roles) if role == "toolResult" and "the late answer" in m)
    prompt_at = next(i for i, (role, m) in enumerate(roles) if role == "user" and "after the pending call" in m)
    assert result_at < prompt_at
