"""The documented timeouts happen, under the redis-py version installed.

redis-py 8 reads every reply under a 5 s socket timeout by default. The proxy's BLPOP for a forwarded
write's reply (GAMMA_REPLY_TIMEOUT_S) and the SSE read (XREAD BLOCK, GAMMA_SSE_HEARTBEAT_S) wait longer
than that: they raised, were retried six times, and the client got a 500 after ~37 s instead of a 504
at the reply timeout; an idle SSE stream got no heartbeat and was cut after ~37 s. Both settings are
set above 5 s here, so the tests fail on a client that applies the default to blocking commands.

The proxy runs alone: a lease key nobody renews makes a session "live" with no runtime to answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from shared.redis import keys
from tests.hostile.sse_client import open_sse
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}
REPLY_TIMEOUT_S = 6.5
HEARTBEAT_S = 6.0


@pytest.fixture(scope="module")
def proxy(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("timeouts"),
                  env_overrides={"GAMMA_REPLY_TIMEOUT_S": str(REPLY_TIMEOUT_S), "GAMMA_SSE_HEARTBEAT_S": str(HEARTBEAT_S)})
    try:
        stack.start("proxy")
        yield stack
    finally:
        stack.stop()


def live_session_without_runtime(proxy: Stack, r: redis.Redis) -> str:
    sid = str(httpx.post(proxy.url() + "/sessions", headers=ALICE, timeout=10).json()["id"])
    r.set(keys.lease(sid), "nobody", px=120_000)
    return sid


def blocked_clients(r: redis.Redis) -> list[dict[str, object]]:
    return [c for c in r.client_list() if c.get("cmd") in ("blpop", "xread") and "b" in str(c.get("flags", ""))]


@pytest.mark.timeout(60)
def test_an_unanswered_live_write_gets_504_at_the_reply_timeout(proxy: Stack, r: redis.Redis) -> None:
    sid = live_session_without_runtime(proxy, r)
    started = time.monotonic()
    resp = httpx.post(proxy.url() + f"/sessions/{sid}/compact", headers=ALICE, json={}, timeout=60)
    took = time.monotonic() - started
    assert resp.status_code == 504, resp.text
    assert f"{REPLY_TIMEOUT_S:g} s" in resp.json()["error"]
    assert took >= REPLY_TIMEOUT_S - 0.2, f"504 after {took:.1f} s"  # at the timeout, not before
    assert "Traceback" not in proxy.log("proxy")


@pytest.mark.timeout(60)
def test_a_client_that_gives_up_leaves_no_redis_connection_blocked_past_the_timeout(proxy: Stack, r: redis.Redis) -> None:
    sid = live_session_without_runtime(proxy, r)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(proxy.url() + f"/sessions/{sid}/compact", headers=ALICE, json={}, timeout=1.0)
    wait_sync(lambda: not any(c.get("cmd") == "blpop" for c in blocked_clients(r)), timeout=REPLY_TIMEOUT_S + 3.0,
              interval=0.2, what="no BLPOP blocked once the reply timeout passed")


@pytest.mark.timeout(90)
def test_an_idle_event_stream_gets_heartbeats_and_stays_open(proxy: Stack, r: redis.Redis) -> None:
    sid = live_session_without_runtime(proxy, r)

    async def scenario() -> tuple[int, list[str], float]:
        client = await open_sse(proxy.ports["proxy"], sid, last_event_id="$")
        assert client.status == 200
        started = time.monotonic()
        # Three heartbeat intervals of silence: each one longer than redis-py's default read timeout.
        await client.collect(wait_s=3 * HEARTBEAT_S + 4, until_comments=4)  # "connected" + 3 heartbeats
        idle_for = time.monotonic() - started
        heartbeats = client.comments.count("heartbeat")
        # The fan-out's read survived the silence: an entry appended now still arrives.
        r.xadd(keys.events(sid), {"data": json.dumps({"type": "status", "session_id": sid, "data": {}})})
        await client.collect(wait_s=5, until_ids=1)
        client.close()
        return heartbeats, client.ids, idle_for

    heartbeats, ids, idle_for = asyncio.run(scenario())
    assert heartbeats >= 3, f"{heartbeats} heartbeats in {idle_for:.1f} s"
    assert ids == [r.xrevrange(keys.events(sid), count=1)[0][0].decode()]
    log = proxy.log("proxy")
    assert "Traceback" not in log and "sse_fanout_read_failed" not in log and "stream_read_failed" not in log
