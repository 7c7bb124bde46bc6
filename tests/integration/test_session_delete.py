"""DELETE /sessions/{id} against the real services (docs/architecture.md "Session lifecycle"): a
dormant and a live session (mid-run) leave no file and no Redis key behind; later writes and
notifications are refused and recreate nothing; a proxy killed mid-delete leaves a state its
successor's sweep completes."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.support.polling import wait_sync
from tests.support.stack import OTHER_TOKEN, SERVICE_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)
SERVICE = {"authorization": f"Bearer {SERVICE_TOKEN}"}


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_DELETE_SWEEP_INTERVAL_S": "1", "GAMMA_DELETE_FINAL_PASS_S": "3"}


def session_dir(stack: Stack, sid: str) -> Path:
    return stack.data_dir / "sessions" / sid


def leftovers(r: redis.Redis, stack: Stack, sid: str) -> list[str]:
    """Every Redis key naming the session, and its files (the session dir or a trash copy)."""
    found = [k.decode() for k in r.scan_iter(match=f"*{sid}*", count=1000)]
    found += [str(p) for p in (stack.data_dir / "sessions").glob(f"{sid}*")]
    found += [str(p) for p in (stack.data_dir / ".trash").glob(f"{sid}*")]
    return found


def notify(stack: Stack, sid: str, nid: str) -> httpx.Response:
    body = {"session_id": sid, "notification": {"id": nid, "type": "import.completed", "payload": {
        "importId": "imp_" + nid, "sourceRef": "file:uploads/q3.pdf", "outputRefs": ["file:imports/q3.md"]}}}
    return httpx.post(stack.url("notifications") + "/notifications", json=body, headers=SERVICE, timeout=30)


def replied(api: httpx.Client, sid: str, fragment: str) -> bool:
    return any(fragment in e["text"] for e in api.get(f"/sessions/{sid}/preview").json()["transcript"]
               if e["kind"] == "message_user")


def with_history(api: httpx.Client, module_stack: Stack) -> str:
    """A session that was live once (transcript, events, usage, digest state) and is dormant now,
    with a workspace file, a document and a pending notification."""
    sid = str(api.post("/sessions").json()["id"])
    assert api.put(f"/sessions/{sid}/workspace/files/notes/a.md", content=b"hello").status_code in (200, 201)
    assert api.post(f"/sessions/{sid}/messages", json={"message": "first"}).status_code == 202
    wait_sync(lambda: replied(api, sid, "first"), timeout=60, what="the reply")
    wait_sync(lambda: not api.get(f"/sessions/{sid}").json()["running"], timeout=30, what="the run's end")
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    assert api.put(f"/sessions/{sid}/workspace/files/notes/b.md", content=b"dormant write").status_code in (200, 201)
    assert notify(module_stack, sid, "n-pending").status_code == 202
    return sid


def assert_gone(api: httpx.Client, r: redis.Redis, module_stack: Stack, sid: str) -> None:
    assert leftovers(r, module_stack, sid) == []
    assert sid not in [s["id"] for s in api.get("/sessions").json()["sessions"]]
    assert r.zscore(keys.user_sessions("alice"), sid) is None  # the quota counts it no more
    assert r.zscore(keys.SESSIONS_DELETED, sid) is not None
    assert api.get(f"/sessions/{sid}").status_code == 404
    # later writes and notifications: refused, nothing recreated
    assert api.delete(f"/sessions/{sid}").status_code == 404
    assert api.post(f"/sessions/{sid}/messages", json={"message": "again"}).status_code == 404
    assert api.put(f"/sessions/{sid}/workspace/files/x.md", content=b"x").status_code == 404
    late = notify(module_stack, sid, "n-late")
    assert late.status_code == 410 and "deleted" in late.json()["error"]
    assert leftovers(r, module_stack, sid) == []


def test_delete_a_dormant_session(api: httpx.Client, r: redis.Redis, module_stack: Stack) -> None:
    sid = with_history(api, module_stack)
    assert leftovers(r, module_stack, sid), "the session left nothing to delete"
    bob = httpx.delete(f"{module_stack.url()}/sessions/{sid}", headers={"Authorization": f"Bearer {OTHER_TOKEN}"})
    assert bob.status_code == 404 and session_dir(module_stack, sid).exists()
    started = time.monotonic()
    res = api.delete(f"/sessions/{sid}")
    print(f"\ndelete of a dormant session: {(time.monotonic() - started) * 1000:.0f} ms")
    assert res.status_code == 204, res.text
    assert_gone(api, r, module_stack, sid)


def pids_running(marker: str) -> list[int]:
    found = []
    for pid in Path("/proc").iterdir():
        try:
            cmd = (pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (pid / "stat").read_text().split(")")[-1].split()[0]
        except (OSError, NotADirectoryError):
            continue
        if marker in cmd and "bash -c" not in cmd and state != "Z":
            found.append(int(pid.name))
    return found


def script(*steps: dict[str, Any]) -> str:
    return "script:" + json.dumps(list(steps))


def running_bash(api: httpx.Client, sleep: str) -> str:
    """A live session whose run is inside a long bash call."""
    sid = str(api.post("/sessions").json()["id"])
    assert api.put(f"/sessions/{sid}/workspace/files/a.txt", content=b"a").status_code in (200, 201)
    step = {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo hi > made.txt; {sleep}", "timeout": 120}}]}
    assert api.post(f"/sessions/{sid}/messages", json={"message": script(step, {"content": "x"})}).status_code == 202
    wait_sync(lambda: pids_running(sleep), timeout=60, interval=0.05, what="the bash call")
    return sid


def test_delete_a_live_session_mid_run(api: httpx.Client, r: redis.Redis, module_stack: Stack) -> None:
    sid = running_bash(api, "sleep 40.113")
    assert api.get(f"/sessions/{sid}").json()["running"] is True
    started = time.monotonic()
    res = api.delete(f"/sessions/{sid}")
    print(f"\ndelete of a live session mid-run: {(time.monotonic() - started) * 1000:.0f} ms")
    assert res.status_code == 204, res.text
    assert not pids_running("sleep 40.113")
    assert_gone(api, r, module_stack, sid)


def test_a_proxy_killed_mid_delete_is_finished_by_the_next(api: httpx.Client, r: redis.Redis,
                                                           module_stack: Stack) -> None:
    sid = running_bash(api, "sleep 40.227")
    module_stack.kill("runtime", signal.SIGSTOP)  # the delete waits for the runtime's release
    try:
        out: list[Any] = []
        thread = threading.Thread(target=lambda: out.append(_delete_quietly(api, sid)), daemon=True)
        thread.start()
        wait_sync(lambda: r.hget(keys.session_row(sid), "status") == b"deleting", timeout=10, interval=0.01,
                  what="the delete under way")
        module_stack.kill("proxy")  # kill -9 in the middle
        thread.join(timeout=30)
        # what a client sees meanwhile: gone from the listing, nothing served
        assert r.zscore(keys.user_sessions("alice"), sid) is None
        assert r.zscore(keys.SESSIONS_DELETING, sid) is not None
    finally:
        module_stack.kill("runtime", signal.SIGCONT)
    module_stack.start("proxy")
    wait_sync(lambda: not leftovers(r, module_stack, sid), timeout=60, interval=0.2, what="the resumed erase")
    assert not pids_running("sleep 40.227")
    assert_gone(api, r, module_stack, sid)
    # the final pass forgets the id (tombstone kept)
    wait_sync(lambda: r.zscore(keys.SESSIONS_DELETING, sid) is None, timeout=90, interval=0.5, what="the final pass")


def _delete_quietly(api: httpx.Client, sid: str) -> object:
    try:
        return api.delete(f"/sessions/{sid}")
    except httpx.HTTPError as exc:
        return exc


def test_an_open_event_stream_ends_when_its_session_is_deleted(api: httpx.Client, module_stack: Stack) -> None:
    sid = str(api.post("/sessions").json()["id"])
    lines: list[str] = []

    def follow() -> None:
        with api.stream("GET", f"/sessions/{sid}/events", timeout=httpx.Timeout(60)) as res:
            assert res.status_code == 200
            for line in res.iter_lines():
                lines.append(line)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    wait_sync(lambda: ": connected" in lines, timeout=10, interval=0.02, what="the stream open")
    assert api.delete(f"/sessions/{sid}").status_code == 204
    thread.join(timeout=10)
    assert not thread.is_alive() and ": closed (deleted)" in lines
