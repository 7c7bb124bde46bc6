"""Resource limits of sandboxed bash (each sandbox layer): fork bombs, memory, file size, output, quota."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from services.runtime.sandbox.host import sandbox_uid
from tests.integration.runtime_support import Driver
from tests.sandbox.conftest import MAX_PROCS, QUOTA_BYTES, QUOTA_FILES, workspace
from tests.sandbox.support import bash, new_sid
from tests.support.polling import wait_sync
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(180)


def _round_trip(stack: Stack, sid: str, text: str) -> float:
    d = Driver(stack.redis_url)
    seen = len(d.message_users(sid))
    started = time.monotonic()
    d.prompt(sid, text)
    if not d.live(sid):
        d.wake(sid)
    wait_sync(lambda: len(d.message_users(sid)) > seen, timeout=30, interval=0.01, what=f"an answer to {text!r}")
    return time.monotonic() - started


def _procs_of(uid: int) -> int:
    n = 0
    for pid in Path("/proc").iterdir():
        if pid.name.isdigit():
            try:
                if pid.stat().st_uid == uid:
                    n += 1
            except OSError:
                continue
    return n


BOMB = "bomb() { bomb | bomb & }; bomb; sleep 30"  # the caller stays, so the bomb runs until the timeout


def test_fork_bomb_is_bounded_and_other_sessions_stay_responsive(sandbox_stack: Stack) -> None:
    a, b = new_sid(sandbox_stack, "bomb"), new_sid(sandbox_stack, "calm")
    bash(sandbox_stack, a, "true")
    _round_trip(sandbox_stack, b, "warm up")  # b is live before the bomb
    bomb_done: list[dict[str, object]] = []
    thread = threading.Thread(target=lambda: bomb_done.append(bash(sandbox_stack, a, BOMB, timeout=5)))
    thread.start()
    time.sleep(1.5)  # the bomb is running
    uid = sandbox_uid(workspace(sandbox_stack, a))
    peak = _procs_of(uid) if uid is not None else 0
    trips = [_round_trip(sandbox_stack, b, f"ping {i}") for i in range(3)]
    thread.join(60)
    assert bomb_done and bomb_done[0]["details"]["timedOut"] is True, bomb_done  # type: ignore[index]
    print(f"layer={sandbox_stack.layer} round trips during the bomb: {trips} peak processes: {peak}")
    # Answered while the bomb runs (how fast is bench-sandbox's business, on a quiet machine).
    assert len(trips) == 3, trips
    if uid is not None:  # root runtime: the bomb's processes are all of the session's own uid
        assert peak <= MAX_PROCS + 4, peak
        # the kernel tears the namespace down asynchronously
        wait_sync(lambda: _procs_of(uid) == 0, timeout=10, what="the bomb's processes gone")


def test_a_4_gib_allocation_fails(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "mem")
    res = bash(sandbox_stack, sid, "python3 -c 'b = bytearray(4 * 1024**3); print(\"ALLOCATED\", len(b))'")
    assert "ALLOCATED" not in res["text"] and "MemoryError" in res["text"], res["text"]
    assert res["isError"]


def test_a_huge_sparse_write_fails(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "sparse")
    res = bash(sandbox_stack, sid, "truncate -s 8G sparse.bin; echo rc=$?; "
               "python3 -c \"import os; fd=os.open('sparse2.bin', os.O_WRONLY | os.O_CREAT); "
               "os.pwrite(fd, b'x', 8 * 1024**3)\" 2>&1; echo rc=$?")
    assert "rc=0" not in res["text"] and "File too large" in res["text"], res["text"]
    ws = workspace(sandbox_stack, sid)
    for name in ("sparse.bin", "sparse2.bin"):
        assert not (ws / name).exists() or (ws / name).stat().st_size <= QUOTA_BYTES


def test_an_output_flood_is_capped(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "flood")
    res = bash(sandbox_stack, sid, "head -c 20000000 /dev/zero | tr '\\0' y; echo; echo TAIL-MARK")
    assert len(res["text"]) < 31_000 and res["details"]["truncated"] is True
    assert "bytes cut" in res["text"] and "TAIL-MARK" in res["text"]


def test_quota_overflow_is_reported_and_the_calls_new_files_removed(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "quota")
    bash(sandbox_stack, sid, "head -c 1000 /dev/zero > keep.bin")
    chunk = QUOTA_BYTES // 3
    res = bash(sandbox_stack, sid, f"for i in 1 2 3 4; do head -c {chunk} /dev/zero > big$i.bin; done; echo wrote")
    assert res["isError"] and res["details"]["quotaExceeded"] is True, res
    assert "workspace quota exceeded" in res["text"] and "big1.bin" in res["text"]
    ws = workspace(sandbox_stack, sid)
    assert sorted(p.name for p in ws.iterdir()) == ["keep.bin"]
    many = bash(sandbox_stack, sid, f"touch f{{1..{QUOTA_FILES + 5}}}")
    assert many["isError"] and "files" in many["text"]
    assert sorted(p.name for p in ws.iterdir()) == ["keep.bin"]
    ok = bash(sandbox_stack, sid, "echo fine > small.txt")
    assert not ok["isError"] and (ws / "small.txt").read_text() == "fine\n"


def test_a_file_over_the_quota_is_stopped_while_written(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "fsize")
    res = bash(sandbox_stack, sid, f"head -c {QUOTA_BYTES + 4096} /dev/zero > huge.bin; echo rc=$?")
    assert "rc=0" not in res["text"]
    huge = workspace(sandbox_stack, sid) / "huge.bin"
    assert not huge.exists() or huge.stat().st_size <= QUOTA_BYTES
