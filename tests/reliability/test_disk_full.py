"""A full session disk (ENOSPC: bytes, then inodes) under the real services (README "Reliability").

The session disk is a 48 MB tmpfs with 4096 inodes, filled to the last byte or inode by ballast at its
root. Every write path then answers 507 with a JSON error naming the cause (or the agent gets a tool
error saying the disk is full), leaves no partial or temp file, and never tears the transcript; the
prompts sent meanwhile are kept, and once the ballast is removed everything resumes by itself and
every acknowledged write is there. /readyz reports the disk degraded while full; the runtime exports
the free bytes and inodes.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import httpx
import pytest
import redis

from shared.redis import keys
from tests.conftest import fresh_db_url
from tests.reliability.disk_rig import (
    Acknowledged,
    answered,
    assert_refused,
    audit,
    client,
    metric,
    post_prompt,
    put_file,
    readyz,
    session_dir,
    started_stack,
    temp_files,
    wait_disk,
)
from tests.support import smalldisk
from tests.support.needs import needs
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries, new_session, tool_results
from tests.support.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              needs(smalldisk.available())]

DECK = {"title": "Plan", "cards": [{"id": "card_1", "title": "One"}]}
UI = {"panes": [{"id": "p1", "tabIds": ["t1"]}], "tabs": {"t1": {"id": "t1", "ari": "file:a.txt"}},
      "activeTabByPane": {"p1": "t1"}, "expandedDirs": ["uploads/"]}


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[smalldisk.SmallDisk]:
    with smalldisk.small_disk(tmp_path_factory.mktemp("disk") / "mnt", size_mb=48, inodes=4096) as mounted:
        yield mounted


@pytest.fixture(scope="module")
def stack(disk: smalldisk.SmallDisk, redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(fresh_db_url(redis_base), disk.mountpoint, tmp_path_factory.mktemp("logs"))


@pytest.fixture
def api(stack: Stack) -> Iterator[httpx.Client]:
    with client(stack) as http:
        yield http


@pytest.fixture
def full(disk: smalldisk.SmallDisk, stack: Stack) -> Iterator[smalldisk.SmallDisk]:
    """The disk is given back at the end of each test, whatever happened."""
    try:
        yield disk
    finally:
        disk.free()


def live_and_dormant(api: httpx.Client) -> tuple[str, str]:
    live = new_session(api)
    ask(api, live, "hello")
    return live, new_session(api)


def test_every_write_path_answers_507_and_recovers(api: httpx.Client, stack: Stack, full: smalldisk.SmallDisk) -> None:
    acked = Acknowledged()
    live, dormant = live_and_dormant(api)
    for sid in (live, dormant):
        assert put_file(api, acked, sid, "keep.txt", b"before").status_code == 200
        assert api.put(f"/sessions/{sid}/documents/deck", json=DECK).status_code == 200
    full.fill_bytes()
    wait_disk(stack, "full")
    body = readyz(stack)
    assert body["ready"] is True and body["degraded"] == ["disk"], body
    assert metric(stack, "gamma_session_disk_free_bytes") is not None
    assert metric(stack, 'gamma_session_disk_state{state="full"}') == 1.0

    for sid in (live, dormant):
        # Topped up before each write: a refused write gives back the pages its temp file took.
        full.fill_bytes()
        assert_refused(put_file(api, acked, sid, "new.bin", b"x" * 200_000), 507, "disk_full")
        full.fill_bytes()
        assert_refused(put_file(api, acked, sid, "keep.txt", b"y" * 200_000), 507, "disk_full")
        full.fill_bytes()
        assert_refused(api.put(f"/sessions/{sid}/documents/deck", json={**DECK, "title": "Full"}), 507, "disk_full")
        full.fill_bytes()
        assert_refused(api.patch(f"/sessions/{sid}/documents/deck", json={"title": "Patched"}), 507, "disk_full")
        full.fill_bytes()
        sync = api.post(f"/sessions/{sid}/ui/sync", json={"update": "AAA=", "snapshot": UI})
        assert_refused(sync, 507, "disk_full")
        # Nothing partial: the old bytes and the old deck, no temp file.
        assert api.get(f"/sessions/{sid}/workspace/files/keep.txt").content == b"before"
        assert api.get(f"/sessions/{sid}/workspace/files/new.bin").status_code == 404
        assert api.get(f"/sessions/{sid}/documents/deck").json()["title"] == "Plan"
        # A delete needs no space: answered (or refused clearly), never a 500.
        gone = api.delete(f"/sessions/{sid}/workspace/files/keep.txt")
        assert gone.status_code in (200, 507), gone.text
        if gone.status_code == 200:
            acked.files.pop((sid, "keep.txt"), None)
    assert temp_files(stack.data_dir / "sessions") == []
    # Prompts meanwhile are kept (they live in Redis until the disk takes them).
    post_prompt(api, acked, live, "while full, live")
    post_prompt(api, acked, dormant, "while full, dormant")
    assert api.get(f"/sessions/{dormant}").json()["status"] in ("waking", "dormant")

    full.free()
    wait_disk(stack, "ok")
    assert "degraded" not in readyz(stack)
    for sid in (live, dormant):
        assert put_file(api, acked, sid, "after.txt", b"after").status_code == 200
        assert api.put(f"/sessions/{sid}/documents/deck", json={**DECK, "title": "After"}).status_code == 200
    audit(stack, api, acked)


def test_inodes_exhausted_answer_507(api: httpx.Client, stack: Stack, full: smalldisk.SmallDisk) -> None:
    acked = Acknowledged()
    live, dormant = live_and_dormant(api)
    full.fill_inodes()
    wait_disk(stack, "full", refill=full.fill_inodes)
    assert metric(stack, "gamma_session_disk_free_inodes") == 0.0
    for sid in (live, dormant):
        full.fill_inodes()
        assert_refused(put_file(api, acked, sid, "n.txt", b"n"), 507, "disk_full")
        full.fill_inodes()
        assert_refused(api.put(f"/sessions/{sid}/documents/fresh", json=DECK), 507, "disk_full")
    assert temp_files(stack.data_dir / "sessions") == []
    post_prompt(api, acked, live, "no inodes left")
    full.free()
    wait_disk(stack, "ok")
    for sid in (live, dormant):
        assert put_file(api, acked, sid, "n.txt", b"n").status_code == 200
    audit(stack, api, acked)


def test_tool_write_on_a_full_disk_tells_the_agent(api: httpx.Client, stack: Stack, full: smalldisk.SmallDisk) -> None:
    """No inode left: the transcript (an existing file) still grows, the agent's new file cannot be
    made. The tool result says the disk is full; a bash command that cannot write fails in the sandbox
    (its output says so), never a harness error; the run answers and the session goes on."""
    acked = Acknowledged()
    sid = new_session(api)
    ask(api, sid, "hello")
    script = "script:" + json.dumps([
        {"tool_calls": [{"name": "write", "arguments": {"path": "notes/new.txt", "content": "agent text"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo x > filler.txt; echo rc=$?"}}]},
        {"tool_calls": [{"name": "message_user", "arguments": {"message": "the disk is full", "blockOnUser": True}}]},
    ])
    full.fill_inodes()
    wait_disk(stack, "full", "runtime", refill=full.fill_inodes)
    prompt_id = post_prompt(api, acked, sid, script)
    wait_sync(lambda: answered(api, sid, prompt_id), timeout=60, interval=0.3, what="the scripted run to answer")
    items = entries(api, sid)
    write = tool_results(items, "write")[-1]
    assert write["isError"] is True and "disk is full" in write["content"][0]["text"], write
    bash = tool_results(items, "bash")[-1]["content"][0]["text"]
    assert "rc=0" not in bash and "Tool bash failed" not in bash, bash
    assert api.get(f"/sessions/{sid}/workspace/files/notes/new.txt").status_code == 404
    full.free()
    wait_disk(stack, "ok")
    post_prompt(api, acked, sid, "and now?")
    audit(stack, api, acked)
    assert temp_files(session_dir(stack, sid)) == []


def test_suspend_and_idle_on_a_full_disk_go_dormant(api: httpx.Client, stack: Stack, full: smalldisk.SmallDisk) -> None:
    """Going dormant needs no space: the session is suspended (its last UI state written stays), the
    prompt sent meanwhile wakes it once the disk has room, and it is answered."""
    acked = Acknowledged()
    sid = new_session(api)
    ask(api, sid, "hello")
    full.fill_bytes()
    wait_disk(stack, "full", "runtime")
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["status"] == "dormant", timeout=30, what="dormant")
    post_prompt(api, acked, sid, "after a suspend on a full disk")
    full.free()
    wait_disk(stack, "ok")
    audit(stack, api, acked)


def test_digest_and_compaction_wait_for_space(api: httpx.Client, stack: Stack, full: smalldisk.SmallDisk) -> None:
    """An acknowledged write whose revision the digest cannot record yet, and a compaction whose entry
    the runtime cannot append: both retried past the delivery cap while the disk is full (never
    dead-lettered), both land once it has room; the agent is told of the write."""
    acked = Acknowledged()
    sid = new_session(api)
    ask(api, sid, "hello")
    stack.kill("digest", signal.SIGSTOP)
    try:
        assert put_file(api, acked, sid, "late.md", b"# acknowledged before the disk filled").status_code == 200
        full.fill_bytes()
    finally:
        stack.kill("digest", signal.SIGCONT)
    compact = api.post(f"/sessions/{sid}/compact", json={})
    assert compact.status_code in (200, 507), compact.text
    # Past the delivery cap (GAMMA_MAX_DELIVERIES, one claim per GAMMA_CLAIM_IDLE_MS).
    wait_sync(lambda: stack.log("digest").count("No space left") >= 7, timeout=60, interval=0.5,
              what="the digest retrying past the delivery cap")
    full.free()
    wait_disk(stack, "ok")
    if compact.status_code == 200:
        wait_sync(lambda: any(e["type"] == "compaction" for e in entries(api, sid)), timeout=60, what="the compaction")
    prompt_id = post_prompt(api, acked, sid, "what changed?")
    wait_sync(lambda: answered(api, sid, prompt_id), timeout=60, interval=0.3, what="the answer")
    told = [e for e in entries(api, sid) if e.get("customType") == "gamma.artifact_update" and "late.md" in json.dumps(e)]
    assert told, "the agent was never told of the acknowledged write"
    dead = redis.Redis.from_url(stack.redis_url).xrange(keys.DEADLETTER)
    assert not [d for d in dead if b"late.md" in json.dumps({k.decode(): v.decode(errors="replace") for k, v in d[1].items()}).encode()]
    audit(stack, api, acked)


def test_disk_fills_during_a_run(api: httpx.Client, stack: Stack, full: smalldisk.SmallDisk) -> None:
    """The disk fills while a tool runs: its result (9 KB: more than the transcript's last page has
    left) is refused, the run is closed where it stood (the call's result says it was interrupted;
    a repair that cannot be written either waits for space) and goes on: nothing torn, nothing
    recorded twice, the prompt answered."""
    acked = Acknowledged()
    sid = new_session(api)
    ask(api, sid, "hello")
    script = "script:" + json.dumps([
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 2; head -c 9000 /dev/zero | tr '\\\\0' x"}}]},
        {"tool_calls": [{"name": "message_user", "arguments": {"message": "done", "blockOnUser": True}}]},
    ])
    post_prompt(api, acked, sid, script)
    wait_sync(lambda: tool_results(entries(api, sid), "bash") == [] and api.get(f"/sessions/{sid}").json().get("running"),
              timeout=30, interval=0.1, what="the run inside its bash call")
    seen = stack.log("runtime").count("run_interrupted_by_disk")
    full.fill_bytes()
    # Full until the run has hit it: its result refused, the run closed as interrupted where it stood.
    wait_sync(lambda: stack.log("runtime").count("run_interrupted_by_disk") > seen, timeout=30, interval=0.2,
              what="the run refused by the full disk")
    full.free()
    wait_disk(stack, "ok")
    audit(stack, api, acked)
