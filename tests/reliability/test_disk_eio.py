"""A session disk that fails (EIO, through the FUSE passthrough) or turns read-only (a remount of the
tmpfs): reads and writes answer clear 503s naming the cause (never a 500, never a hang), prompts are
kept, the runtime takes no lease while the disk cannot persist it, and everything resumes once the
disk is back, with every acknowledged write there (README "Reliability").
"""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import fresh_db_url
from tests.reliability.disk_rig import (
    Acknowledged,
    assert_refused,
    audit,
    client,
    post_prompt,
    put_file,
    readyz,
    started_stack,
    wait_disk,
)
from tests.support import slowfs, smalldisk
from tests.support.needs import needs
from tests.support.polling import wait_sync
from tests.support.sessions import ask, new_session
from tests.support.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DECK = {"title": "Plan", "cards": [{"id": "card_1", "title": "One"}]}


def _sessions(api: httpx.Client, acked: Acknowledged) -> tuple[str, str]:
    live = new_session(api)
    ask(api, live, "hello")
    dormant = new_session(api)
    for sid in (live, dormant):
        assert put_file(api, acked, sid, "keep.txt", b"kept").status_code == 200
    return live, dormant


@needs(smalldisk.available())
def test_read_only_remount_holds_wakes_and_recovers(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A real `mount -o remount,ro` of the tmpfs. Linux refuses it while a file is open for writing (a
    live session's disk fence is): the sessions are dormant first. A prompt sent meanwhile is kept and
    its wake waits (no lease the runtime could not persist); reads go on, writes answer 503."""
    with smalldisk.small_disk(tmp_path_factory.mktemp("rodisk") / "mnt") as disk:
        for stack in started_stack(fresh_db_url(redis_base), disk.mountpoint, tmp_path_factory.mktemp("logs")):
            with client(stack) as api:
                try:
                    _read_only(stack, api, disk)
                finally:
                    disk.remount("rw")


def _read_only(stack: Stack, api: httpx.Client, disk: smalldisk.SmallDisk) -> None:
    acked = Acknowledged()
    first, second = _sessions(api, acked)
    assert api.post(f"/sessions/{first}/suspend").status_code == 200
    wait_sync(lambda: api.get(f"/sessions/{first}").json()["status"] == "dormant", what="the session dormant")
    disk.remount("ro")
    wait_disk(stack, "read_only")
    assert readyz(stack)["degraded"] == ["disk"]
    for sid in (first, second):
        assert_refused(put_file(api, acked, sid, "new.txt", b"n"), 503, "disk_read_only")
        assert_refused(api.put(f"/sessions/{sid}/documents/deck", json=DECK), 503, "disk_read_only")
        assert api.get(f"/sessions/{sid}/workspace/files/keep.txt").content == b"kept"  # reads go on
        post_prompt(api, acked, sid, f"while read-only {sid}")
    assert not [s for s in (first, second) if api.get(f"/sessions/{s}").json()["status"] == "live"]
    disk.remount("rw")
    wait_disk(stack, "ok")
    for sid in (first, second):
        assert put_file(api, acked, sid, "new.txt", b"n").status_code == 200
    audit(stack, api, acked)


@needs(slowfs.available())
def test_read_only_share_under_a_live_session(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The share turns read-only under open files (EROFS from the FUSE layer): live and dormant
    writes answer 503, the live session's prompt is kept and answered once the share is writable."""
    with slowfs.slow_fs(tmp_path_factory.mktemp("erofs")) as fs:
        for stack in started_stack(fresh_db_url(redis_base), fs.mountpoint, tmp_path_factory.mktemp("logs")):
            with client(stack) as api:
                try:
                    _fault(stack, api, fs, "read_only", "disk_read_only")
                finally:
                    fs.set()


@needs(slowfs.available())
def test_eio_answers_503_never_hangs_and_recovers(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    with slowfs.slow_fs(tmp_path_factory.mktemp("eiofs")) as fs:
        for stack in started_stack(fresh_db_url(redis_base), fs.mountpoint, tmp_path_factory.mktemp("logs")):
            with client(stack) as api:
                try:
                    _fault(stack, api, fs, "io_error", "disk_io_error")
                finally:
                    fs.set()


def _fault(stack: Stack, api: httpx.Client, fs: slowfs.SlowFs, state: str, cause: str) -> None:
    acked = Acknowledged()
    live, dormant = _sessions(api, acked)
    fs.set(eio=state == "io_error", erofs=state == "read_only")
    wait_disk(stack, state)
    assert readyz(stack)["degraded"] == ["disk"]
    for sid in (live, dormant):
        assert_refused(put_file(api, acked, sid, "new.txt", b"n"), 503, cause)
        assert_refused(api.put(f"/sessions/{sid}/documents/deck", json=DECK), 503, cause)
        if state == "io_error":
            assert_refused(api.get(f"/sessions/{sid}/workspace/files/keep.txt"), 503, cause)
    post_prompt(api, acked, live, "while failing, live")
    post_prompt(api, acked, dormant, "while failing, dormant")
    assert api.get(f"/sessions/{dormant}").json()["status"] in ("waking", "dormant")  # no lease taken
    fs.set()
    wait_disk(stack, "ok")
    for sid in (live, dormant):
        assert put_file(api, acked, sid, "new.txt", b"n").status_code == 200
    audit(stack, api, acked)
