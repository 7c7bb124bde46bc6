"""The main flows on a slow session disk: every fsync 20 ms, every metadata operation 5 ms (a network
filesystem's figures), through the FUSE passthrough of tests/support/slowfs.py (README "Reliability").

Prompt (with its wake), tools (write, bash), the digest telling the agent of a client's live and
dormant file writes, a compaction, a suspend and the wake after it all complete, and every
acknowledged write is there once. Meanwhile the proxy's /healthz is asked every 100 ms: every probe
is answered (nothing wedges the loop); its latencies are recorded as properties of the test, and the
50 ms target is checked by `make bench-faults-disk` (bench/faults_disk.py), not by a timed assertion.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import fresh_db_url
from tests.reliability.disk_rig import (
    Acknowledged,
    answered,
    audit,
    client,
    post_prompt,
    put_file,
    started_stack,
)
from tests.support import slowfs
from tests.support.healthz import HealthzMonitor
from tests.support.needs import needs
from tests.support.polling import wait_sync
from tests.support.sessions import entries, new_session, tool_results
from tests.support.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              needs(slowfs.available())]

FSYNC_MS, META_MS = 20, 5


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slowfs.SlowFs]:
    with slowfs.slow_fs(tmp_path_factory.mktemp("slowfs"), fsync_ms=FSYNC_MS, meta_ms=META_MS) as fs:
        yield fs


@pytest.fixture(scope="module")
def stack(slow: slowfs.SlowFs, redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(fresh_db_url(redis_base), slow.mountpoint, tmp_path_factory.mktemp("logs"),
                             GAMMA_DIGEST_DEBOUNCE_MS="150")


def updates(items: list[dict[str, Any]], ref: str) -> list[dict[str, Any]]:
    return [e for e in items if e.get("customType") == "gamma.artifact_update" and ref in json.dumps(e)]


def prompt_answered(api: httpx.Client, acked: Acknowledged, sid: str, text: str) -> list[dict[str, Any]]:
    prompt_id = post_prompt(api, acked, sid, text)
    wait_sync(lambda: answered(api, sid, prompt_id), timeout=90, interval=0.3, what=f"an answer to {text[:30]!r}")
    return entries(api, sid)


def test_main_flows_on_a_slow_disk(stack: Stack, record_property: Any) -> None:
    monitor = HealthzMonitor(stack.url() + "/healthz", interval_s=0.1).start()
    acked = Acknowledged()
    try:
        with client(stack) as api:
            _flows(stack, api, acked)
            audit(stack, api, acked)
    finally:
        monitor.stop()
    for key, value in monitor.summary().items():
        record_property(f"healthz_{key}", value)
    assert monitor.failures == [], monitor.failures[:5]  # answered throughout: nothing wedged the loop
    assert monitor.summary()["probes"] > 10


def _flows(stack: Stack, api: httpx.Client, acked: Acknowledged) -> None:
    sid = new_session(api)
    prompt_answered(api, acked, sid, "hello")  # wake, prompt, answer
    script = "script:" + json.dumps([
        {"tool_calls": [{"name": "write", "arguments": {"path": "notes/a.md", "content": "agent notes"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo from-bash > b.txt && cat b.txt"}}]},
        {"tool_calls": [{"name": "message_user", "arguments": {"message": "done", "blockOnUser": True}}]},
    ])
    items = prompt_answered(api, acked, sid, script)
    assert not tool_results(items, "write")[-1]["isError"]
    assert "from-bash" in tool_results(items, "bash")[-1]["content"][0]["text"]
    assert api.get(f"/sessions/{sid}/workspace/files/b.txt").content == b"from-bash\n"

    # The digest: a client's live write reaches the agent before its next turn.
    assert put_file(api, acked, sid, "brief.md", b"# live brief").status_code == 200
    items = prompt_answered(api, acked, sid, "what changed?")
    assert updates(items, "file:brief.md"), "no artifact_update for the live write"

    # Compaction.
    assert api.post(f"/sessions/{sid}/compact", json={}).status_code == 200
    wait_sync(lambda: any(e["type"] == "compaction" for e in entries(api, sid)), timeout=60, what="the compaction entry")

    # Suspend, a dormant write, the wake: the agent is told before the woken prompt.
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["status"] == "dormant", timeout=30, what="dormant")
    assert put_file(api, acked, sid, "dormant.md", b"# while asleep").status_code == 200
    items = prompt_answered(api, acked, sid, "and now?")
    assert updates(items, "file:dormant.md"), "no artifact_update for the dormant write"
