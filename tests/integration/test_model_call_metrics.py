"""The runtime's model call counters on `/metrics` (docs/architecture.md "Model calls: retries and
recovery"): errors by status and code, retries by reason, calls by stop reason, and the time spent
waiting, after a session's call met a 503 and a 429 before it went through (the strict double)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.support.model_runs import FAST_RETRIES
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("model-metrics"),
              env_overrides={k: str(v) for k, v in FAST_RETRIES.items()})
    try:
        s.start("proxy", "runtime")
        yield s
    finally:
        s.stop()


def metric(text: str, name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(w in line for w in want))


@pytest.mark.parametrize("model_api", ["responses", "chat"])
def test_errors_retries_finishes_and_waits_are_counted(stack: Stack, model_api: str) -> None:
    with httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30) as api:
        before = httpx.get(stack.url("runtime") + "/metrics").text
        sid = api.post("/sessions", json={"model": {"api": model_api}}).json()["id"]
        steps = [{"error": {"status": 503, "code": "server_error", "message": "overloaded"}, "times": 1},
                 {"error": {"status": 429, "code": "rate_limit_exceeded", "headers": {"retry-after-ms": "100"}},
                  "times": 1},
                 {"content": f"counted {model_api}"}]  # one script per session (the double counts `times` by it)
        assert api.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(steps)}).status_code == 202
        wait_sync(lambda: any(e["kind"] == "message_user" and e["text"] == f"counted {model_api}"
                              for e in api.get(f"/sessions/{sid}/preview").json()["transcript"]),
                  timeout=60, interval=0.2, what="the answer after two retries")

        def counted() -> str | None:
            text = httpx.get(stack.url("runtime") + "/metrics").text
            return text if metric(text, "gamma_model_finish_total", reason="stop") > metric(
                before, "gamma_model_finish_total", reason="stop") else None

        after = wait_sync(counted, timeout=10, interval=0.1, what="the call's counters")
    grew = {(name, tuple(labels.items())): metric(after, name, **labels) - metric(before, name, **labels)
            for name, labels in [("gamma_model_errors_total", {"status": "503", "code": "server_error"}),
                                 ("gamma_model_errors_total", {"status": "429", "code": "rate_limit_exceeded"}),
                                 ("gamma_model_retries_total", {"reason": "server_error"}),
                                 ("gamma_model_retries_total", {"reason": "rate_limit_exceeded"}),
                                 ("gamma_model_finish_total", {"reason": "stop"})]}
    assert all(v == 1 for v in grew.values()), grew
    waited = metric(after, "gamma_model_wait_seconds_total", cause="backoff") - metric(
        before, "gamma_model_wait_seconds_total", cause="backoff")
    assert waited >= 0.1  # at least the 429's retry-after-ms
