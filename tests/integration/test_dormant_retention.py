"""A dormant session's streams leave Redis after GAMMA_DORMANT_RETENTION_S.

Real stack (five processes, real Redis, scripted model) with a one-second retention: after dormancy
only the row (with its fence), the user's index (and digest / notification / usage state) remain; a client
resuming the SSE stream from an id that is gone gets a `reset` event and the history from
GET /transcript; a wake afterwards works end to end (the prompt answered, the notification and the
file write made while dormant delivered first).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from shared.redis.redis_wire import parse_id
from tests.integration.test_digest_acceptance import artifact_updates, manifest
from tests.integration.test_notifications_acceptance import (
    USER,
    create_session,
    entries,
    injected,
    post,
    say,
    user_index,
    wait_live,
)
from tests.support.polling import wait_sync
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(240)
# What a swept dormant session may keep under its hash tag (docs/integration.md).
# `digest-handled` (the digest's dedupe of changes) expires 7 days after the session's last change.
# `spend`: the session's spending and its own caps, kept while it is dormant (docs/costs.md "Where it shows").
KEPT = {"session", "revisions", "notifications:pending", "digest-handled", "spend"}


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("dormant"),
              env_overrides={"GAMMA_DORMANT_RETENTION_S": "1", "GAMMA_DORMANT_SWEEP_INTERVAL_S": "0.5",
                             "GAMMA_LEASE_MS": "3000", "GAMMA_SSE_HEARTBEAT_S": "1"})
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


def session_keys(r: redis.Redis, sid: str) -> set[str]:
    prefix = "gamma:{" + sid + "}:"
    return {k.decode()[len(prefix):] for k in r.scan_iter(match=prefix + "*", count=1000)}


def digest_state(r: redis.Redis, sid: str, ref: str) -> dict[str, Any]:
    return dict(json.loads(r.hget(keys.revisions(sid), ref) or "{}"))


def gone_out(r: redis.Redis, sid: str, ref: str) -> bool:
    """The digest's update of `ref` went to the live inbox: sent, or already recorded (an idle agent's
    update is recorded after its merge window, so `sent` may last only a few hundred ms)."""
    state = digest_state(r, sid, ref)
    return bool(state.get("sent")) or state.get("seen") is not None


def suspend_and_wait_swept(stack: Stack, r: redis.Redis, sid: str) -> None:
    resp = httpx.post(f"{stack.url()}/sessions/{sid}/suspend", headers=USER, timeout=30)
    assert resp.status_code == 200, resp.text
    wait_live(stack, sid, live=False)
    wait_sync(lambda: not r.exists(keys.events(sid)) and r.zscore(keys.DORMANT_DUE, sid) is None, timeout=30,
              interval=0.2, what=f"{sid} swept")


def sse_head(stack: Stack, sid: str, last_event_id: str, frames: int) -> list[dict[str, str]]:
    """The first `frames` SSE events (fields per event) of a stream resumed at `last_event_id`."""
    out: list[dict[str, str]] = []
    current: dict[str, str] = {}
    with httpx.stream("GET", f"{stack.url()}/sessions/{sid}/events", headers=USER | {"Last-Event-ID": last_event_id},
                      timeout=30) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line:
                if "data" in current:
                    out.append(current)
                    if len(out) >= frames:
                        return out
                current = {}
            elif not line.startswith(":") and ":" in line:
                name, _, value = line.partition(":")
                current[name] = value.strip()
    return out


def test_swept_session_keeps_only_its_row_and_index_and_wakes_fully(stack: Stack, r: redis.Redis) -> None:
    sid = create_session(stack)
    say(stack, sid, "hello")
    resp = httpx.put(f"{stack.url()}/sessions/{sid}/workspace/files/notes.md", content=b"# Notes\n", headers=USER,
                     timeout=30)
    assert resp.status_code in (200, 201), resp.text
    # The digest's update goes out to the live inbox; the next turn records it. (Unrecorded at the
    # suspend, the digest sends it again at the next wake: tests/integration/test_dormant_inbox.py.)
    wait_sync(lambda: gone_out(r, sid, "file:notes.md"), timeout=30, what="the digest's update sent")
    say(stack, sid, "hello before sleeping")
    old_ids = [i.decode() for i, _ in r.xrange(keys.events(sid))]
    assert len(old_ids) > 3
    suspend_and_wait_swept(stack, r, sid)

    left = session_keys(r, sid)
    assert "session" in left and left <= KEPT, left
    for gone in ("events", "inbox", "lease", "running", "digest-live"):
        assert gone not in left
    assert r.zscore(keys.user_sessions("alice"), sid) is not None  # the user's index keeps it
    swept = r.hget(keys.session_row(sid), keys.EVENTS_SWEPT_FIELD).decode()  # the "dormant" status entry
    assert parse_id(swept) > parse_id(old_ids[-1])

    # A client resuming from an id that is gone is told to reload; the history is on disk.
    [reset] = sse_head(stack, sid, old_ids[1], 1)
    assert reset["event"] == "reset" and reset["id"] == swept
    body = json.loads(reset["data"])
    assert body["type"] == "reset" and body["transcript"] == f"/sessions/{sid}/transcript"
    assert user_index(entries(stack, sid), "hello before sleeping") is not None
    # One that saw everything is not: resumed at the last id, the stream just waits (a heartbeat).
    seen: list[str] = []
    with httpx.stream("GET", f"{stack.url()}/sessions/{sid}/events", timeout=30,
                      headers=USER | {"Last-Event-ID": swept}) as resp:
        for line in resp.iter_lines():
            seen.append(line)
            if line == ": heartbeat":
                break
    assert seen[0].startswith("retry:") and not [line for line in seen if line.startswith(("event:", "data:"))], seen

    # While dormant and swept: a notification (must stay pending, no TTL) and a file write.
    assert post(stack, sid, "imp-asleep").status_code == 202
    assert r.ttl(keys.notifications_pending(sid)) == -1
    resp = httpx.put(f"{stack.url()}/sessions/{sid}/workspace/files/notes.md", content=b"# Notes\nwritten asleep\n",
                     headers=USER | {"x-gamma-digest": "The user wrote notes while you slept."}, timeout=30)
    assert resp.status_code in (200, 201), resp.text
    wait_sync(lambda: "file:notes.md" in manifest(stack, sid), timeout=20, what="the dormant write in the manifest")

    items = say(stack, sid, "good morning")  # the wake: streams and the inbox group come back
    at = user_index(items, "good morning")
    assert at is not None
    assert injected(items[:at], "imp-asleep"), "the notification pending while dormant was not delivered"
    updates = artifact_updates(items[:at], "file:notes.md")
    assert len([u for u in updates if "The user wrote notes while you slept." in u["content"]]) == 1
    assert r.exists(keys.events(sid)) and r.exists(keys.inbox(sid))
    assert r.zscore(keys.DORMANT_DUE, sid) is None  # live sessions are not due


def test_sse_from_zero_after_the_sweep_resets_then_follows_the_new_stream(stack: Stack, r: redis.Redis) -> None:
    sid = create_session(stack)
    say(stack, sid, "first turn")
    suspend_and_wait_swept(stack, r, sid)
    swept = r.hget(keys.session_row(sid), keys.EVENTS_SWEPT_FIELD).decode()
    say(stack, sid, "second turn")
    new_first = r.xrange(keys.events(sid), count=1)[0][0].decode()
    head = sse_head(stack, sid, "0", 2)
    assert head[0]["event"] == "reset" and head[0]["id"] == swept
    assert head[1]["id"] == new_first and "event" not in head[1]  # then the stream as it is now
    texts: list[Any] = [e["message"].get("content") for e in entries(stack, sid) if e.get("type") == "message"]
    assert "first turn" in texts and "second turn" in texts


def usage(stack: Stack, sid: str) -> dict[str, Any]:
    resp = httpx.get(f"{stack.url()}/sessions/{sid}", headers=USER, timeout=30)
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["model_usage"])


def test_what_a_swept_session_keeps_is_compact_and_its_usage_survives_sweeps(stack: Stack, r: redis.Redis) -> None:
    sid = create_session(stack)
    say(stack, sid, "first turn")
    resp = httpx.put(f"{stack.url()}/sessions/{sid}/workspace/files/plan.md", content=b"# Plan\n", headers=USER,
                     timeout=30)
    assert resp.status_code in (200, 201), resp.text
    wait_sync(lambda: gone_out(r, sid, "file:plan.md"), timeout=30, what="the digest's update sent")
    say(stack, sid, "did you see my plan?")  # the agent is told: the digest's state of the ref settles
    wait_sync(lambda: digest_state(r, sid, "file:plan.md").get("seen") == 1, timeout=30,
              what="the digest to see the update recorded")
    live_usage = usage(stack, sid)
    assert live_usage["requests"] >= 1 and r.exists(keys.model_usage(sid))
    suspend_and_wait_swept(stack, r, sid)
    # The usage totals moved into the row; the wake bookkeeping went; the digest's hash stays a listpack.
    assert "model-usage" not in session_keys(r, sid)
    assert usage(stack, sid) == live_usage
    row = {k.decode() for k in r.hkeys(keys.session_row(sid))}
    # The wake bookkeeping and the fields at their defaults went (the view still says dormant); the
    # fence is a field of the row, no key of its own.
    assert not row & {"wake_id", "waking_since", "wake_fence", "status", "variant", "id"}, row
    assert keys.FENCE_FIELD in row and "fence" not in session_keys(r, sid)
    assert httpx.get(f"{stack.url()}/sessions/{sid}", headers=USER, timeout=30).json()["status"] == "dormant"
    for key in (keys.session_row(sid), keys.revisions(sid)):
        assert r.object("encoding", key) == b"listpack", key
    # A wake and a second sleep add to what the first sweep folded: nothing counted twice or lost.
    say(stack, sid, "second turn")
    second = usage(stack, sid)
    assert second["requests"] > live_usage["requests"]
    suspend_and_wait_swept(stack, r, sid)
    assert usage(stack, sid) == second and "model-usage" not in session_keys(r, sid)
