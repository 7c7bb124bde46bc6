"""Redis grows with what is written (150 x 1 MiB PUTs added 459 MiB) and streams
are never trimmed. File contents now travel by reference (a content blob on the session disk), and
every consumed stream is trimmed to what its groups acknowledged.

Measured through the real services: N x 1 MiB PUTs live and dormant, Redis bytes per MiB written
(the db's keys by MEMORY USAGE, and the server's used_memory) and stream lengths once settled.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}
MIB = 1024 * 1024
N = 12
SERVICE_STREAMS = (keys.ARTIFACT_CHANGES, keys.LIFECYCLE, keys.INJECTIONS_RECORDED, keys.COMPACTION_REQUESTS,
                   keys.NOTIFICATIONS, keys.WAKE)


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_STREAM_TRIM_INTERVAL_S": "0.5", "GAMMA_IDLE_S": "120"}


@pytest.fixture(scope="module")
def stack(module_stack: Stack) -> Stack:
    return module_stack


def status(api: httpx.Client, sid: str) -> str:
    return str(api.get(f"/sessions/{sid}").json()["status"])


def live_session(api: httpx.Client) -> str:
    sid = str(api.post("/sessions").json()["id"])
    assert api.post(f"/sessions/{sid}/messages", json={"message": "hello"}).status_code == 202
    wait_sync(lambda: status(api, sid) == "live", timeout=60, what="live")
    return sid


def unsettled(r: redis.Redis, streams: list[str]) -> list[str]:
    """The groups that have not read and acked everything of their stream."""
    out = []
    for stream in streams:
        if not r.exists(stream):
            continue
        for group in r.xinfo_groups(stream):
            # An inbox keeps the digests it delivered pending until the agent's next turn records them.
            if (group["pending"] and stream in SERVICE_STREAMS) or group.get("lag"):
                out.append(f"{stream} ({group['name'].decode()}): pending {group['pending']}, lag {group.get('lag')}")
    return out


def db_stream_bytes(r: redis.Redis) -> int:
    total = 0
    for key in r.scan_iter(count=1000):
        if r.type(key) == b"stream":
            total += int(r.memory_usage(key, samples=0) or 0)
    return total


def settle(r: redis.Redis, sid: str) -> dict[str, Any]:
    streams = [*SERVICE_STREAMS, keys.inbox(sid)]
    wait_sync(lambda: not unsettled(r, streams) or print(unsettled(r, streams)), timeout=60, interval=0.2, what="every group caught up")
    time.sleep(3.0)  # a few trim rounds (0.5 s) and housekeeping passes (lease_ms / 3)
    return {"used_memory": int(r.info("memory")["used_memory"]), "stream_bytes": db_stream_bytes(r),
            "lengths": {s: int(r.xlen(s)) for s in [*streams, keys.events(sid)]}}


def per_mib(before: dict[str, Any], after: dict[str, Any], field: str) -> float:
    return (after[field] - before[field]) / N


@pytest.mark.timeout(240)
def test_file_writes_do_not_grow_redis_and_streams_are_trimmed(api: httpx.Client, r: redis.Redis,
                                                                 stack: Stack) -> None:
    sid = live_session(api)
    base = settle(r, sid)
    for i in range(N):
        resp = api.put(f"/sessions/{sid}/workspace/files/big{i}.bin", content=os.urandom(MIB))
        assert resp.status_code == 200, resp.text
    live = settle(r, sid)
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: status(api, sid) == "dormant", timeout=30, what="dormant")
    suspended = settle(r, sid)
    for i in range(N):
        resp = api.put(f"/sessions/{sid}/workspace/files/big{i}.bin", content=os.urandom(MIB))
        assert resp.status_code == 200, resp.text
    dormant = settle(r, sid)
    # The digest consumed every content blob the writes left (copied into its revisions, removed).
    blobs = stack.data_dir / "sessions" / sid / ".blobs"
    wait_sync(lambda: not any(blobs.iterdir()), timeout=30, what="every content blob consumed")
    figures = {
        "live_used_memory_per_mib": per_mib(base, live, "used_memory"),
        "live_stream_bytes_per_mib": per_mib(base, live, "stream_bytes"),
        "dormant_used_memory_per_mib": per_mib(suspended, dormant, "used_memory"),
        "dormant_stream_bytes_per_mib": per_mib(suspended, dormant, "stream_bytes"),
        "lengths_live": live["lengths"],
        "lengths_dormant": dormant["lengths"],
    }
    print("stream growth figures:", figures)
    # Before: ~3 MiB of Redis per MiB written (base64 in the inbox and in gamma:artifacts:changes).
    assert figures["live_stream_bytes_per_mib"] < 16 * 1024, figures
    assert figures["dormant_stream_bytes_per_mib"] < 16 * 1024, figures
    # Settled streams hold nothing below what their groups still need (the events stream is capped).
    for stream in [*SERVICE_STREAMS, keys.inbox(sid)]:
        first = r.xrange(stream, count=1)
        floor = needed_from(r, stream)
        assert not first or floor is None or ids(first[0][0]) >= floor, (stream, floor, figures)
        if stream in SERVICE_STREAMS:
            assert dormant["lengths"][stream] <= 1, (stream, figures)


def ids(value: bytes | str) -> tuple[int, int]:
    ms, _, seq = (value.decode() if isinstance(value, bytes) else value).partition("-")
    return int(ms), int(seq)


def needed_from(r: redis.Redis, stream: str) -> tuple[int, int] | None:
    """The oldest entry some group of `stream` has still to read or to ack."""
    floors = []
    for group in r.xinfo_groups(stream):
        if group["pending"]:
            floors.append(ids(r.xpending(stream, group["name"])["min"]))
        else:
            ms, seq = ids(group["last-delivered-id"])
            floors.append((ms, seq + 1))
    return min(floors) if floors else None


@pytest.mark.timeout(240)
def test_trimming_never_drops_what_a_stopped_consumer_has_not_acked(
    api: httpx.Client, r: redis.Redis, stack: Stack
) -> None:
    """gamma:lifecycle has two groups: with the digest down, notifications reads and acks every entry
    and trims, yet the entries stay until the digest has read and acked them too."""
    stack.kill("digest")
    try:
        lifecycle_before = r.xrevrange(keys.LIFECYCLE, count=1)
        sid = live_session(api)  # a wake: SessionLive on gamma:lifecycle
        for i in range(3):
            assert api.put(f"/sessions/{sid}/workspace/files/n{i}.txt", content=f"note {i}\n".encode()).status_code == 200
        new_lifecycle = r.xrange(keys.LIFECYCLE, min=f"({lifecycle_before[0][0].decode()}" if lifecycle_before else "-")
        assert new_lifecycle
        wait_sync(lambda: not unsettled(r, [keys.NOTIFICATIONS]) and not any(
            g["pending"] or g.get("lag") for g in r.xinfo_groups(keys.LIFECYCLE) if g["name"] == b"notifications"),
            timeout=30, what="notifications caught up")
        time.sleep(2.0)  # several trim rounds of notifications and of the runtime
        kept = {eid for eid, _ in r.xrange(keys.LIFECYCLE)}
        assert {eid for eid, _ in new_lifecycle} <= kept
        assert r.xlen(keys.ARTIFACT_CHANGES) >= 3
    finally:
        stack.start("digest")
    settled = settle(r, sid)
    assert settled["lengths"][keys.LIFECYCLE] <= 1 and settled["lengths"][keys.ARTIFACT_CHANGES] == 0
    # The digest read what was kept for it: the three notes have revisions.
    refs = {k.decode() for k in r.hkeys(keys.revisions(sid))}
    assert {f"file:n{i}.txt" for i in range(3)} <= refs


@pytest.mark.timeout(240)
def test_a_change_is_diffed_from_its_own_content_even_if_the_file_is_gone(
    api: httpx.Client, r: redis.Redis, stack: Stack
) -> None:
    """Each change names a blob copied when it was made: the agent's write (seen content) and a later
    user write are diffed from those copies, though the workspace file is deleted before the digest runs."""
    sid = str(api.post("/sessions").json()["id"])
    steps = [{"tool_calls": [{"name": "write", "arguments": {"path": "brief.txt", "content": "alpha\nbeta\n"}}]},
             {"tool_calls": [{"name": "message_user", "arguments": {"message": "written", "blockOnUser": True}}]}]
    assert api.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(steps)}).status_code == 202
    brief = stack.data_dir / "sessions" / sid / "workspace" / "brief.txt"
    wait_sync(lambda: brief.exists() and not api.get(f"/sessions/{sid}").json()["running"], timeout=60,
              what="the agent's write")
    wait_sync(lambda: status(api, sid) == "live", timeout=30, what="live")
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: status(api, sid) == "dormant", timeout=30, what="dormant")
    settle(r, sid)
    stack.kill("digest")
    try:
        assert api.put(f"/sessions/{sid}/workspace/files/brief.txt", content=b"alpha\ngamma\n").status_code == 200
        brief.unlink()  # gone before the digest reads anything
    finally:
        stack.start("digest")
    manifest_path = stack.data_dir / "sessions" / sid / "pending_artifacts.json"
    manifest = wait_sync(lambda: manifest_path.exists() and manifest_path.read_text(), timeout=60,
                         what="the dormant change in the manifest")
    digest = json.loads(manifest)["updates"]["file:brief.txt"]["digest"]
    assert "gamma" in digest and "beta" in digest, digest  # a real diff of the two copies, not a marker
    blobs = stack.data_dir / "sessions" / sid / ".blobs"
    # The digest removes the blobs after the manifest is durable: a moment later on a loaded machine.
    wait_sync(lambda: not any(blobs.iterdir()), timeout=30, what="the change's blobs removed")
