"""The session disk's faults as the code classifies them (README "Reliability"): full -> 507, failing
or read-only -> 503, each naming its cause; an append the disk refuses part way leaves the file as it
was; the health probe's states."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from services.runtime.inbox.failures import disk_fault, refusal, transient
from shared.serving.diskhealth import probe
from shared.storage.disk import DiskFull, DiskUnavailable, append_jsonl, iter_jsonl, storage_fault
from shared.storage.leftovers import discard_temp, leftover_temps, sweep_leftover_temps
from shared.storage.workspace_fs import disk_error
from tests.support import smalldisk
from tests.support.needs import needs


@pytest.mark.parametrize(("code", "status", "cause"), [
    (errno.ENOSPC, 507, "disk_full"), (errno.EDQUOT, 507, "disk_full"),
    (errno.EROFS, 503, "disk_read_only"), (errno.EIO, 503, "disk_io_error"), (errno.ESTALE, 503, "disk_io_error"),
])
def test_storage_faults_name_their_cause(code: int, status: int, cause: str) -> None:
    fault = storage_fault(OSError(code, os.strerror(code), "/srv/data/sessions/s_1/transcript.jsonl"))
    assert fault is not None and fault.status == status and fault.cause == cause
    assert "/srv/data" not in str(fault) and "disk" in str(fault)
    mapped = disk_error(OSError(code, os.strerror(code)), "a.txt")
    assert mapped is not None and mapped.status == status


@pytest.mark.parametrize("code", [errno.ENOENT, errno.EACCES, errno.EISDIR])
def test_other_os_errors_are_not_storage_faults(code: int) -> None:
    assert storage_fault(OSError(code, os.strerror(code))) is None
    assert storage_fault(ValueError("no")) is None


def test_a_lost_mount_is_a_storage_fault_and_a_socket_is_not() -> None:
    """ENOTCONN names a lost network mount when a file op raised it, and a socket otherwise (a Redis
    connection going away must not be retried as a failing disk, forever)."""
    lost = storage_fault(OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), "/srv/data/sessions/s_1/t"))
    assert lost is not None and lost.status == 503
    assert storage_fault(OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN))) is None


def test_runtime_retries_disk_faults_and_answers_them() -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    assert transient(full) and transient(DiskFull("full")) and transient(DiskUnavailable("eio"))
    assert isinstance(disk_fault(full), DiskFull)
    assert refusal(full)[0] == 507 and refusal(OSError(errno.EIO, "Input/output error"))[0] == 503
    assert disk_fault(OSError(errno.ENOENT, "gone")) is None


def test_probe_states(tmp_path: Path) -> None:
    ok = probe(tmp_path, "test", 0)
    assert ok.state == "ok" and (ok.free_bytes or 0) > 0 and ok.free_inodes is not None
    assert probe(tmp_path, "test", 1 << 62).state == "full"  # under the free-space floor


@needs(smalldisk.available())
def test_a_refused_append_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    with smalldisk.small_disk(tmp_path / "mnt", size_mb=1, inodes=64) as disk:
        path = disk.mountpoint / "t.jsonl"
        append_jsonl(path, [{"n": 1}])
        before = path.read_bytes()
        disk.fill_bytes()
        with pytest.raises(OSError) as raised:
            append_jsonl(path, [{"n": i, "pad": "x" * 2000} for i in range(2, 200)])
        assert raised.value.errno == errno.ENOSPC
        assert path.read_bytes() == before  # no torn line, no partial batch
        assert probe(disk.mountpoint, "test", 0).state == "full"
        disk.free()
        append_jsonl(path, [{"n": 2}])
        assert [r["n"] for r in iter_jsonl(path)] == [1, 2]
        assert json.loads(path.read_bytes().splitlines()[-1]) == {"n": 2}


@needs(smalldisk.available())
def test_a_temp_file_the_disk_keeps_is_swept_when_it_is_back(tmp_path: Path) -> None:
    """A write that fails after its temp file exists, on a disk that then refuses the removal too
    (read-only): the temp file is remembered and removed by the sweep once the disk takes writes."""
    with smalldisk.small_disk(tmp_path / "mnt", size_mb=1, inodes=64) as disk:
        target = disk.mountpoint / "state.json"
        temp = disk.mountpoint / ".state.json.x.tmp"
        temp.write_bytes(b"half")
        disk.remount("ro")
        try:
            discard_temp(temp, temp.unlink)
            assert temp.exists() and leftover_temps() >= 1
        finally:
            disk.remount("rw")
        assert sweep_leftover_temps() == 0 and not temp.exists() and not target.exists()
