"""Dynamic tool loading (GAMMA_DYNAMIC_TOOLS=1) through the five services: a tool outside the active
namespaces is not offered and not run, `load_tools` activates its namespace from the next model call
(the request's static prefix hash changes once), and after a wake the subset is restored from the
transcript."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.integration.runtime_support import Driver, call, done, script
from tests.support.polling import wait_sync
from tests.support.sessions import ask
from tests.support.sessions import tool_results as results
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("dynamic-tools"),
              env_overrides={"GAMMA_DYNAMIC_TOOLS": "1"})
    try:
        s.start()
        yield s
    finally:
        s.stop()


def test_namespaces_load_on_demand_and_survive_a_wake(stack: Stack) -> None:
    api = httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, script({"tool_calls": [call("show_gamma", doc="deck")]},
                              {"tool_calls": [call("load_tools", namespace="gamma")]},
                              {"tool_calls": [call("show_gamma", doc="deck")]}, done()))
    first, second = results(es, "show_gamma")
    assert first["isError"] and "not found" in first["content"][0]["text"]
    assert "not found" not in second["content"][0]["text"]  # run now (no such deck is its own answer)
    assert results(es, "load_tools")[0]["details"] == {"namespace": "gamma"}
    d = Driver(stack.redis_url)
    hashes = [e["data"]["prefix_sha256"] for e in d.events(sid) if e["type"] == "model_request"]
    assert len(hashes) == 4 and hashes[0] == hashes[1] and hashes[1] != hashes[2] and hashes[2] == hashes[3]
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["status"] == "dormant", timeout=30, what="dormant")
    ask(api, sid, "hello after the wake")
    after = [e["data"]["prefix_sha256"] for e in d.events(sid) if e["type"] == "model_request"]
    assert after[-1] == hashes[-1]  # the gamma namespace is still active
