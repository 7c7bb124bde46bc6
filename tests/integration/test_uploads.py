"""Dormant writes (docs/integration.md "Session row and liveness") on the real stack (five processes, real Redis, scripted model): uploads and new
documents into dormant and never-woken sessions, and DELETE of files and documents, live and dormant.

What the agent was told is read from its transcript (GET /transcript): each `artifact_update` is a
`custom_message` entry, and the order of entries is the order of the model's context.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from faststream.redis.parser import BinaryMessageFormatV1

from shared.contracts.streams.inbox import INBOX_ADAPTER, Injection
from shared.redis import keys
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries, new_session
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)
USER = {"Authorization": f"Bearer {API_TOKEN}"}
MAX_FILES = 6
MAX_BYTES = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_WORKSPACE_MAX_FILES": str(MAX_FILES), "GAMMA_WORKSPACE_MAX_BYTES": str(MAX_BYTES)}


@pytest.fixture(scope="module")
def stack(module_stack: Stack) -> Stack:
    return module_stack


def workspace(stack: Stack, sid: str) -> Path:
    return stack.data_dir / "sessions" / sid / "workspace"


def status(api: httpx.Client, sid: str) -> str:
    return str(api.get(f"/sessions/{sid}").json()["status"])


def user_at(items: list[dict[str, Any]], text: str) -> int | None:
    for i, e in enumerate(items):
        if e.get("type") == "message" and e["message"].get("role") == "user" and e["message"].get("content") == text:
            return i
    return None


def updates(items: list[dict[str, Any]], ref: str) -> list[int]:
    """Indexes of the artifact_update entries for `ref`."""
    return [i for i, e in enumerate(items) if e.get("type") == "custom_message"
            and e.get("customType") == "gamma.artifact_update" and (e.get("details") or {}).get("ref") == ref]


def suspend(api: httpx.Client, sid: str) -> None:
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: status(api, sid) == "dormant", timeout=30, what="dormant")


def manifest_refs(stack: Stack, sid: str) -> set[str]:
    path = stack.data_dir / "sessions" / sid / "pending_artifacts.json"
    return set(json.loads(path.read_text())["updates"]) if path.exists() else set()


def queued(r: redis.Redis, sid: str, ref: str, text: str) -> bool:
    """The digest put an artifact injection for `ref` saying `text` in the live session's inbox."""
    for _, fields in r.xrange(keys.inbox(sid)):
        m = INBOX_ADAPTER.validate_json(fields[b"data"])
        if isinstance(m, Injection) and m.ref == ref and text in m.injection.content:
            return True
    return False


def content(items: list[dict[str, Any]], at: int) -> str:
    return str(items[at]["content"])


# ---------------------------------------------------------------- uploads into a never-woken session


def test_upload_into_a_never_woken_session_is_told_before_the_first_message_once(
    api: httpx.Client, r: redis.Redis, stack: Stack
) -> None:
    sid = new_session(api)
    brief = b"<brief>\n  <topic>sea otters</topic>\n  <audience>children</audience>\n</brief>\n"
    resp = api.put(f"/sessions/{sid}/workspace/files/imports/q3/brief.xml", content=brief)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"path": "imports/q3/brief.xml", "size": len(brief), "revision": 1, "created": True}
    deck = {"title": "Otters", "cards": [{"id": "c1", "title": "Intro"}, {"id": "c2", "title": "Food"}]}
    resp = api.put(f"/sessions/{sid}/documents/d1", json=deck)
    assert resp.status_code == 200 and resp.json()["revision"] == 1, resp.text
    # Nothing woke: the session is dormant, no lease, no wake; the digest wrote the dormant manifest.
    assert status(api, sid) == "dormant" and not r.exists(keys.lease(sid))
    assert (workspace(stack, sid) / "imports" / "q3" / "brief.xml").read_bytes() == brief
    wait_sync(lambda: manifest_refs(stack, sid) >= {"file:imports/q3/brief.xml", "gamma:file:d1"},
              what="both uploads in pending_artifacts.json")

    items = ask(api, sid, "here is my brief, please start")
    at = user_at(items, "here is my brief, please start")
    assert at is not None
    [file_at] = updates(items, "file:imports/q3/brief.xml")
    [deck_at] = updates(items, "gamma:file:d1")
    assert file_at < at and deck_at < at, "the uploads must precede the first message"
    assert "A new file was added" in content(items, file_at) and "<topic>sea otters</topic>" in content(items, file_at)
    assert 'A new deck "Otters" was created with 2 cards.' in content(items, deck_at)
    assert items[file_at]["details"]["trusted"] is True
    # The model's context had them before the message (the scripted model lists what it was given).
    reply = next(e for e in items[at + 1:] if e.get("type") == "message" and e["message"].get("role") == "assistant")
    assert "artifact_update (ref=file:imports/q3/brief.xml)" in str(reply["message"]["content"])
    # Exactly once: consumed from the manifest, never again on later turns.
    wait_sync(lambda: not manifest_refs(stack, sid), what="the manifest cleared after the record")
    items = ask(api, sid, "and now?")
    assert len(updates(items, "file:imports/q3/brief.xml")) == 1 and len(updates(items, "gamma:file:d1")) == 1
    assert items[file_at]["details"]["toRevision"] == 1  # the number the dormant PUT answered
    # Live now: the numbering goes on from the dormant write's number (no second revision 1).
    resp = api.put(f"/sessions/{sid}/workspace/files/imports/q3/brief.xml", content=brief + b"<!-- v2 -->\n")
    assert resp.status_code == 200 and resp.json()["revision"] == 2, resp.text


def test_upload_then_first_message_at_once_is_told_before_it_every_time(api: httpx.Client, stack: Stack) -> None:
    """No wait between the upload's 200 and the first message: the wake barrier (notifications waits
    for the digest to be past every change published before the wake) puts it first, every time."""
    sids = [new_session(api) for _ in range(5)]
    for i, sid in enumerate(sids):
        assert api.put(f"/sessions/{sid}/workspace/files/brief.xml", content=f"<brief>{i}</brief>".encode()).status_code == 200
        assert api.post(f"/sessions/{sid}/messages", json={"message": f"start {i}"}).status_code == 202
    for i, sid in enumerate(sids):
        def answered(sid: str = sid, i: int = i) -> list[dict[str, Any]] | None:
            items = entries(api, sid)
            at = user_at(items, f"start {i}")
            done = at is not None and any(e["message"].get("role") == "assistant" for e in items[at + 1:]
                                          if e.get("type") == "message")
            return items if done else None

        items = wait_sync(answered, timeout=90, interval=0.2, what=f"the answer in {sid}")
        told = updates(items, "file:brief.xml")
        assert len(told) == 1 and told[0] < (user_at(items, f"start {i}") or 0), (sid, told)
        assert f"<brief>{i}</brief>" in content(items, told[0])


# ---------------------------------------------------------------- DELETE, live and dormant


def test_delete_live_and_dormant_is_announced_as_a_removal(api: httpx.Client, r: redis.Redis, stack: Stack) -> None:
    sid = new_session(api)
    for name in ("a.txt", "b.txt"):
        assert api.put(f"/sessions/{sid}/workspace/files/docs/{name}", content=name.encode()).status_code == 200
    assert api.put(f"/sessions/{sid}/documents/d2", json={"title": "Gone soon"}).status_code == 200
    items = ask(api, sid, "hello")
    assert updates(items, "file:docs/a.txt") and updates(items, "gamma:file:d2")
    assert status(api, sid) == "live"

    # Live: the runtime removes it (read-your-writes), the digest tells the agent before the next prompt.
    resp = api.delete(f"/sessions/{sid}/workspace/files/docs/a.txt")
    assert resp.status_code == 200, resp.text
    assert resp.json()["deleted"] is True and isinstance(resp.json()["revision"], int)
    assert not (workspace(stack, sid) / "docs" / "a.txt").exists()
    assert api.get(f"/sessions/{sid}/workspace/files/docs/a.txt").status_code == 404
    assert api.delete(f"/sessions/{sid}/workspace/files/docs/a.txt").status_code == 404  # the runtime's 404
    assert api.delete(f"/sessions/{sid}/workspace/files/docs").status_code == 409
    resp = api.delete(f"/sessions/{sid}/documents/d2", headers={"If-Match": "1"})
    assert resp.status_code == 200 and resp.json() == {"doc": "d2", "deleted": True, "revision": 1}, resp.text
    # (Waited for: a prompt sent at once may overtake the debounced digest; that order is item 1's.)
    assert api.put(f"/sessions/{sid}/documents/d3", json={"title": "Kept a while"}).status_code == 200
    wait_sync(lambda: queued(r, sid, "file:docs/a.txt", "The file was deleted."), what="the removal's digest")
    wait_sync(lambda: queued(r, sid, "gamma:file:d3", "A new deck"), what="the new deck's digest")
    items = ask(api, sid, "I removed a.txt")
    at = user_at(items, "I removed a.txt")
    assert at is not None
    removed = [i for i in updates(items, "file:docs/a.txt") if "The file was deleted." in content(items, i)]
    assert len(removed) == 1 and removed[0] < at
    assert [i for i in updates(items, "gamma:file:d2") if "The deck was deleted." in content(items, i)]

    # Dormant: the proxy removes it under the dormant-write lock; the session stays dormant.
    suspend(api, sid)
    resp = api.delete(f"/sessions/{sid}/workspace/files/docs/b.txt")
    assert resp.status_code == 200 and resp.json() == {"path": "docs/b.txt", "deleted": True, "revision": 2}
    assert status(api, sid) == "dormant" and not r.exists(keys.lease(sid))
    assert not (workspace(stack, sid) / "docs" / "b.txt").exists()
    resp = api.delete(f"/sessions/{sid}/documents/d3")
    assert resp.status_code == 200 and resp.json() == {"doc": "d3", "deleted": True, "revision": 1}, resp.text
    assert status(api, sid) == "dormant"
    wait_sync(lambda: {"file:docs/b.txt", "gamma:file:d3"} <= manifest_refs(stack, sid),
              what="the dormant removals in the manifest")
    items = ask(api, sid, "I removed b.txt too")
    at = user_at(items, "I removed b.txt too")
    assert at is not None
    removed = [i for i in updates(items, "file:docs/b.txt") if "The file was deleted." in content(items, i)]
    assert len(removed) == 1 and removed[0] < at
    removed = [i for i in updates(items, "gamma:file:d3") if "The deck was deleted." in content(items, i)]
    assert len(removed) == 1 and removed[0] < at


# ---------------------------------------------------------------- refusals change nothing


def _changes_for(r: redis.Redis, sid: str) -> int:
    bodies = [json.loads(BinaryMessageFormatV1.parse(f[b"__data__"])[0]) for _, f in r.xrange(keys.ARTIFACT_CHANGES)]
    return sum(b.get("session_id") == sid for b in bodies)


def test_quota_exceeded_is_507_and_nothing_changes(api: httpx.Client, r: redis.Redis, stack: Stack) -> None:
    sid = new_session(api)
    for i in range(MAX_FILES):
        assert api.put(f"/sessions/{sid}/workspace/files/f{i}.txt", content=b"x").status_code == 200
    wait_sync(lambda: _changes_for(r, sid) == MAX_FILES, what="one change per accepted upload")
    before = sorted(p.name for p in workspace(stack, sid).iterdir())
    resp = api.put(f"/sessions/{sid}/workspace/files/sub/one-too-many.txt", content=b"y")
    assert resp.status_code == 507 and "quota" in resp.json()["error"], resp.text
    assert api.delete(f"/sessions/{sid}/workspace/files/f0.txt").status_code == 200  # room for one more
    big = b"z" * (1024 * 1024)
    for i in range(3):  # 3 MiB + the small ones: under the byte quota
        assert api.put(f"/sessions/{sid}/workspace/files/f{i + 1}.txt", content=big).status_code == 200
    resp = api.put(f"/sessions/{sid}/workspace/files/f0.txt", content=big)
    assert resp.status_code == 507 and "bytes" in resp.json()["error"], resp.text
    # The refused writes published nothing: only the accepted ones and the removal.
    wait_sync(lambda: _changes_for(r, sid) == MAX_FILES + 1 + 3, what="changes of accepted writes only")
    assert not (workspace(stack, sid) / "sub").exists() and not (workspace(stack, sid) / "f0.txt").exists()
    assert sorted(p.name for p in workspace(stack, sid).iterdir()) == [n for n in before if n != "f0.txt"]
    assert status(api, sid) == "dormant"


def test_bad_names_and_sizes_are_4xx_and_nothing_changes(api: httpx.Client, r: redis.Redis, stack: Stack) -> None:
    sid = new_session(api)
    assert api.put(f"/sessions/{sid}/workspace/files/dir/file.txt", content=b"seed").status_code == 200
    wait_sync(lambda: _changes_for(r, sid) == 1, what="the seed file's change")
    cases = [
        ("PUT", "%2e%2e/escape.txt", 400), ("PUT", "dir/%2e%2e/%2e%2e/escape.txt", 400), ("PUT", "n" * 256, 400),
        ("PUT", "dir/", 400), ("PUT", "dir", 409), ("PUT", "dir/file.txt/child", 409), ("PUT", "%ff.txt", 400),
        ("DELETE", "", 400), ("DELETE", "%2e%2e/x", 400), ("DELETE", "dir", 409), ("DELETE", "missing.txt", 404),
    ]
    for method, path, want in cases:
        resp = api.request(method, f"/sessions/{sid}/workspace/files/{path}", content=b"x" if method == "PUT" else None)
        assert resp.status_code == want, (method, path, resp.text)
        assert resp.json()["error"]
    too_big = api.put(f"/sessions/{sid}/workspace/files/big.bin", content=b"b" * (1024 * 1024 + 1))
    assert too_big.status_code == 413
    assert api.put(f"/sessions/{sid}/documents/bad%20id", json={"title": "x"}).status_code == 400
    assert api.put(f"/sessions/{sid}/documents/d1", json={"cards": [{"id": ""}]}).status_code == 422
    ws = workspace(stack, sid)
    assert sorted(str(p.relative_to(ws)) for p in ws.rglob("*")) == ["dir", "dir/file.txt"]
    assert (ws / "dir" / "file.txt").read_bytes() == b"seed"
    assert not (stack.data_dir / "sessions" / sid / "documents" / "d1.json").exists()
    assert not (stack.data_dir / "sessions" / "escape.txt").exists()
    assert _changes_for(r, sid) == 1 and status(api, sid) == "dormant"


# ---------------------------------------------------------------- a wake during the dormant write


def test_a_wake_racing_a_dormant_upload_loses_nothing(api: httpx.Client, r: redis.Redis, stack: Stack) -> None:
    """An upload and the first message at the same moment, several times: whichever wins the
    dormant-write lock, the file is whole on disk and the agent is told of it exactly once."""
    body = b"0123456789abcdef" * (32 * 1024)  # 512 KiB: a write that takes a while
    sids = [new_session(api) for _ in range(4)]
    results: dict[str, int] = {}

    def upload(sid: str) -> None:
        with httpx.Client(base_url=stack.url(), headers=USER, timeout=60) as c:
            results[sid] = c.put(f"/sessions/{sid}/workspace/files/race/data.bin", content=body).status_code

    for sid in sids:
        t = threading.Thread(target=upload, args=(sid,))
        t.start()
        assert api.post(f"/sessions/{sid}/messages", json={"message": "go"}).status_code == 202
        t.join(60)
    assert results == {sid: 200 for sid in sids}
    for sid in sids:
        assert (workspace(stack, sid) / "race" / "data.bin").read_bytes() == body
        told = updates(ask(api, sid, "anything new?"), "file:race/data.bin")
        assert len(told) == 1, (sid, told)
        items = ask(api, sid, "and now?")
        assert len(updates(items, "file:race/data.bin")) == 1


def test_an_upload_waiting_on_the_lock_while_a_wake_takes_the_lease_is_applied_live(
    api: httpx.Client, r: redis.Redis, stack: Stack
) -> None:
    """Deterministic: another dormant write holds the lock; the upload waits for it, a message wakes
    the session meanwhile (the runtime takes the lease and waits for the lock too). When the lock goes
    the upload sees the lease and goes to the runtime instead: applied once, told once."""
    sid = new_session(api)
    lock = keys.dormant_write(sid)
    assert r.set(lock, "test-holder", nx=True, px=8000)
    out: dict[str, httpx.Response] = {}

    def upload() -> None:
        with httpx.Client(base_url=stack.url(), headers=USER, timeout=60) as c:
            out["put"] = c.put(f"/sessions/{sid}/workspace/files/late/notes.md", content=b"# notes\n")

    t = threading.Thread(target=upload)
    t.start()
    assert api.post(f"/sessions/{sid}/messages", json={"message": "wake up"}).status_code == 202
    wait_sync(lambda: r.exists(keys.lease(sid)), timeout=30, what="the runtime's lease")
    assert "put" not in out  # still waiting for the lock
    r.delete(lock)
    t.join(60)
    assert out["put"].status_code == 200, out["put"].text
    assert isinstance(out["put"].json()["revision"], int)  # answered by the runtime: the live path
    assert (workspace(stack, sid) / "late" / "notes.md").read_bytes() == b"# notes\n"
    wait_sync(lambda: user_at(entries(api, sid), "wake up") is not None, what="the woken message recorded")
    told: list[int] = []
    for attempt in range(3):  # a live write made during the wake reaches the agent by a later turn
        told = updates(ask(api, sid, f"still there? {attempt}"), "file:late/notes.md")
        if told:
            break
    assert len(told) == 1
