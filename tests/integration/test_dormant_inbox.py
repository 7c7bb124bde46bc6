"""A dormant session's inbox goes with the retention even when the last updates were never recorded.

Real stack (five processes, real Redis, scripted model), one-second retention. The session goes live
→ dormant → a dormant write → woken → a file write and a notification after the last answer → dormant.
The digest's `artifact_update` and the notification's injection reached the live inbox, and the idle
runtime (no active task) held them for the next user turn, unacked (docs/architecture.md "Delivery"),
when it closed. Their owners keep them until recorded (the digest's revision state, the notification's
pending record) and deliver them again at the next `SessionLive` (docs/integration.md "Dormant
sessions in Redis"), so the inbox entries pin nothing: the sweep deletes the inbox, nothing but the
keys kept by design remains, and the wake that comes later still gets both updates, once each.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.inbox import Injection, UserPrompt
from shared.redis import dormancy, keys
from shared.streams.bus import ensure_group
from shared.streams.inbox import append
from tests.integration.test_digest_acceptance import artifact_updates
from tests.integration.test_dormant_retention import KEPT, digest_state, session_keys, suspend_and_wait_swept
from tests.integration.test_notifications_acceptance import (
    USER,
    create_session,
    injected,
    post,
    say,
    user_index,
)
from tests.support.polling import wait_sync
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("dormant-inbox"),
              env_overrides={"GAMMA_DORMANT_RETENTION_S": "1", "GAMMA_DORMANT_SWEEP_INTERVAL_S": "0.5",
                             "GAMMA_LEASE_MS": "3000"})
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture
def r(stack: Stack) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(stack.redis_url)
    yield client
    client.close()


def put(stack: Stack, sid: str, text: str) -> None:
    resp = httpx.put(f"{stack.url()}/sessions/{sid}/workspace/files/notes.md", content=text.encode(), headers=USER,
                     timeout=30)
    assert resp.status_code in (200, 201), resp.text


def read_by_runtime(r: redis.Redis, sid: str) -> bool:
    """The runtime's group has read the inbox's newest entry (it holds what it did not record)."""
    newest = r.xrevrange(keys.inbox(sid), count=1)
    groups = r.xinfo_groups(keys.inbox(sid))
    return bool(newest) and any(g["name"] == keys.RUNTIME_GROUP.encode() and g["last-delivered-id"] == newest[0][0]
                                for g in groups)


def test_updates_held_at_close_do_not_keep_the_inbox_and_reach_the_next_wake(stack: Stack, r: redis.Redis) -> None:
    sid = create_session(stack)
    say(stack, sid, "hello")
    put(stack, sid, "# Notes\n")
    say(stack, sid, "noted?")
    suspend_and_wait_swept(stack, r, sid)
    put(stack, sid, "# Notes\nwritten asleep\n")  # a dormant write: the manifest, no inbox entry
    say(stack, sid, "good morning")

    # After the last answer: a write and a notification, read and held by the idle runtime.
    put(stack, sid, "# Notes\nwritten asleep\nand after the last answer\n")
    assert post(stack, sid, "imp-late").status_code == 202
    wait_sync(lambda: 3 in digest_state(r, sid, "file:notes.md").get("sent", []), timeout=30,
              what="the digest's update of revision 3 sent")
    wait_sync(lambda: read_by_runtime(r, sid), timeout=30, what="the runtime to read the inbox")
    suspend_and_wait_swept(stack, r, sid)

    left = session_keys(r, sid)
    assert "inbox" not in left, r.xinfo_groups(keys.inbox(sid))
    # The notification, unconsumed, keeps its record (kept while pending, by design).
    assert {k for k in left if not k.startswith("ntf:")} <= KEPT, left

    # Nothing was lost: the next wake gets both, before its prompt, once each.
    items = say(stack, sid, "back again")
    at = user_index(items, "back again")
    assert at is not None
    assert len(injected(items[:at], "imp-late")) == 1, items[-12:]
    late = [u for u in artifact_updates(items[:at], "file:notes.md") if (u.get("details") or {}).get("toRevision") == 3]
    assert len(late) == 1, artifact_updates(items, "file:notes.md")



def _injection(sid: str, source: str) -> Injection:
    return Injection(session_id=sid, injection=RuntimeInjection(kind="artifact_update", content="x"), source=source,
                     source_id=f"{source}-1")


@pytest.mark.parametrize(("waiting", "read", "kept"), [
    ("artifact", True, False), ("notification", False, False),  # delivered again at the next SessionLive
    ("prompt", True, True), ("prompt", False, True),  # only the inbox has it: the next wake reads it
    ("client", True, True),
])
async def test_the_sweep_keeps_an_inbox_only_for_what_no_owner_redelivers(
        redis_client: aioredis.Redis, waiting: str, read: bool, kept: bool) -> None:
    """Against a real Redis: one entry acked and trimmed, one waiting (read and unacked, or unread)."""
    sid = f"s_inbox_{waiting}_{read}"
    await ensure_group(redis_client, keys.inbox(sid), keys.RUNTIME_GROUP, track=False)
    done = await append(redis_client, UserPrompt(session_id=sid, message="answered"))
    message = UserPrompt(session_id=sid, message="later") if waiting == "prompt" else _injection(sid, waiting)
    await append(redis_client, message)
    await redis_client.xreadgroup(keys.RUNTIME_GROUP, "w", {keys.inbox(sid): ">"}, count=1 + read)
    await redis_client.xack(keys.inbox(sid), keys.RUNTIME_GROUP, done)
    await redis_client.xdel(keys.inbox(sid), done)
    assert await dormancy.sweep_session(redis_client, sid) == int(kept)
    assert bool(await redis_client.exists(keys.inbox(sid))) is kept
