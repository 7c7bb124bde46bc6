"""Every token counted (docs/costs.md "Every token counted"), through the five services with the
scripted model: a subagent's calls, a compaction summary, a failed attempt that was retried and an
aborted one each leave a priced usage row in the session's totals (GET /sessions/{id} `spend`), in its
owner's (GET /spend) and in the runtime's Prometheus counters (bounded labels: family, kind, attempt)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.runtime_support import Driver, call, done, script
from tests.support.model_runs import FAST_RETRIES
from tests.support.polling import wait_sync
from tests.support.sessions import ask
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def env(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, httpx.Client]]:
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("usage-rows"),
                  env_overrides={k: str(v) for k, v in FAST_RETRIES.items()})
    stack.start()
    http = httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)
    try:
        yield stack, http
    finally:
        http.close()
        stack.stop()


def create(http: httpx.Client) -> str:
    resp = http.post("/sessions", json={})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def spend_when(http: httpx.Client, sid: str, ready: Any, what: str) -> dict[str, Any]:
    def read() -> dict[str, Any] | None:
        spend = http.get(f"/sessions/{sid}").json()["spend"]
        return dict(spend) if ready(spend) else None

    return dict(wait_sync(read, timeout=60, interval=0.2, what=what))


def series(stack: Stack, name: str, **labels: str) -> list[float]:
    """The values of the runtime's series `name` that carry `labels`."""
    text = httpx.get(stack.url("runtime") + "/metrics").text
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(name + "{") and all(w in line for w in want)]


def metric(stack: Stack, name: str, **labels: str) -> float:
    return sum(series(stack, name, **labels))


def test_a_subagents_calls_are_counted_and_priced(env: tuple[Stack, httpx.Client]) -> None:
    stack, http = env
    sid = create(http)
    ask(http, sid, script({"tool_calls": [call("subagent", task="Summarize the workspace.")]}, done("started")))
    spend = spend_when(http, sid, lambda s: "subagent" in s["by_kind"], "the subagent's row")
    sub = spend["by_kind"]["subagent"]
    assert sub["requests"] >= 1 and sub["tokens"] > 0 and sub["usd"] > 0
    assert spend["by_kind"]["agent"]["requests"] >= 2
    assert spend["usd"] == pytest.approx(sum(k["usd"] for k in spend["by_kind"].values()))
    assert metric(stack, "gamma_model_cost_usd_total", family="gpt-5", kind="subagent", attempt="ok") > 0


def test_a_compaction_summary_is_counted_once(env: tuple[Stack, httpx.Client]) -> None:
    stack, http = env
    sid = create(http)
    ask(http, sid, script({"tool_calls": [call("read", path="a.txt")]}, done("read it")))
    resp = http.post(f"/sessions/{sid}/compact", json={})
    assert resp.status_code == 200, resp.text
    spend = spend_when(http, sid, lambda s: "compaction" in s["by_kind"], "the compaction's row")
    summary = spend["by_kind"]["compaction"]
    assert summary["requests"] >= 1 and summary["tokens"] > 0 and summary["usd"] > 0
    assert metric(stack, "gamma_model_usage_tokens_total", kind="compaction", type="input") > 0


def test_failed_and_aborted_attempts_are_marked(env: tuple[Stack, httpx.Client]) -> None:
    stack, http = env
    sid = create(http)
    # A 500, retried; then a stream cut mid-body, retried; then the answer.
    failing = script({"error": {"status": 500, "code": "server_error"}, "times": 1}, {**done("after two failures"),
                                                                                      "cut": True})
    ask(http, sid, failing)
    spend = spend_when(http, sid, lambda s: s["failed_requests"] >= 2, "the failed attempts' rows")
    assert spend["requests"] == spend["failed_requests"] + 1 and spend["aborted_requests"] == 0
    assert series(stack, "gamma_model_cost_usd_total", family="gpt-5", kind="agent", attempt="failed")
    # An abort while the model streams: the cut call is counted, estimated, as aborted.
    stalling = script({"content": "never sent", "stall_s": 20})  # the provider goes quiet before its headers
    sid = create(http)
    assert http.post(f"/sessions/{sid}/messages", json={"message": stalling}).status_code == 202
    Driver(stack.redis_url).wait_event(sid, lambda e: e["type"] == "message_start" and e["data"]["message"]["role"]
                                       == "assistant", what="the model call")
    assert http.post(f"/sessions/{sid}/abort", json={}).status_code == 200
    spend = spend_when(http, sid, lambda s: s["aborted_requests"] == 1, "the aborted attempt's row")
    assert spend["requests"] == 1 and spend["tokens"] > 0  # its prompt, counted before it was sent (estimated)
    assert metric(stack, "gamma_model_cost_usd_total", kind="agent", attempt="aborted") > 0
    mine = http.get("/spend").json()  # the owner's totals: both sessions
    assert mine["user"] == "alice" and mine["failed_requests"] >= 2 and mine["aborted_requests"] == 1
