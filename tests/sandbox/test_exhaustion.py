"""The sandbox cannot exhaust the host (each layer): its tmpfs are sized, a call's shared memory counts
against its memory limit, and the workspace quota holds while the call runs, not only after it."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from services.runtime.sandbox import cgroup
from tests.conftest import _held_dbs, fresh_db_url
from tests.sandbox.conftest import QUOTA_BYTES, TMP_BYTES, layer_params, workspace
from tests.sandbox.support import bash, new_sid
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(180)
MIB = 1024 * 1024


def _fill(target: str, files: int, chunk: int = QUOTA_BYTES - 4096) -> str:
    """`files` files of `chunk` bytes (each under RLIMIT_FSIZE) into `target`, then its size in KiB:
    paced, so a watchdog has a chance to see it grow (an attacker needs no pace; the bound is the pace)."""
    return (f'for i in $(seq {files}); do head -c {chunk} /dev/zero > "{target}/fill$i" || break; '
            f"echo wrote $i; sleep 0.05; done; echo du=$(du -sk \"{target}\" | cut -f1)")


def _du_kib(text: str) -> int:
    return int(text.rsplit("du=", 1)[1].split()[0])


def test_the_private_tmpfs_are_sized_and_the_rest_read_only(sandbox_stack: Stack) -> None:
    """bwrap: /tmp, HOME and /dev/shm take at most their size (ENOSPC past it) and bwrap's own / and /dev
    tmpfs (unsized: half the host's RAM each) take nothing. landlock: no /dev/shm; the private temporary
    directory lies on the host's disk and is watched while the call runs."""
    sid = new_sid(sandbox_stack, "tmpfs")
    files = TMP_BYTES // QUOTA_BYTES + 3  # ~3 files past the size
    if sandbox_stack.layer == "bwrap":
        for target in ("/dev/shm", "/tmp", "$HOME"):
            res = bash(sandbox_stack, sid, _fill(target, files))
            assert f"wrote {files}" not in res["text"], res["text"]
            assert _du_kib(res["text"]) * 1024 <= TMP_BYTES, res["text"]
        ro = bash(sandbox_stack, sid, "for p in /x /dev/x /usr/x; do : > $p && echo made $p; done 2>&1; true")
        assert "made" not in ro["text"] and "Read-only file system" in ro["text"], ro["text"]
    else:
        shm = bash(sandbox_stack, sid, ": > /dev/shm/x && echo made")
        assert "made" not in shm["text"], shm["text"]
        res = bash(sandbox_stack, sid, _fill("$TMPDIR", files))
        assert res["isError"] and res["details"].get("stopped") is True, res
        assert "the private temporary directory" in res["text"] and f"wrote {files}" not in res["text"]


def test_workspace_writes_are_stopped_at_the_quota_while_the_call_runs(sandbox_stack: Stack) -> None:
    """Many files, each under RLIMIT_FSIZE: the call is killed near the quota (not after writing 10x it),
    the result says so, and what it created is removed after."""
    sid = new_sid(sandbox_stack, "diskwatch")
    bash(sandbox_stack, sid, "echo keep > keep.txt")
    files = 40  # 40 x 1 MB against a 4 MiB quota
    res = bash(sandbox_stack, sid, _fill(".", files, chunk=1_000_000))
    assert res["isError"] and res["details"].get("stopped") is True, res
    assert "[stopped: the call was killed when the workspace reached" in res["text"], res["text"]
    written = max(int(line.split()[1]) for line in res["text"].splitlines() if line.startswith("wrote "))
    assert written < files // 2, f"stopped only after {written} MB"
    assert "du=" not in res["text"]  # killed, not finished
    ws = workspace(sandbox_stack, sid)
    assert sorted(p.name for p in ws.iterdir()) == ["keep.txt"]
    assert not bash(sandbox_stack, sid, "echo fine > small.txt")["isError"]


@pytest.fixture(scope="module", params=layer_params())
def small_memory_stack(request: pytest.FixtureRequest, redis_base: str,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A call memory limit below its tmpfs size: what decides is the memory limit. On a Redis db of its
    own: the module's `sandbox_stack` may be running beside it, and two runtimes on one db share the
    inbox, so the other one could take this stack's prompt and record its run in its own data dir (the
    cause of the "run ended with no bash result" this test once met)."""
    if cgroup.find_base("auto") is None:
        pytest.skip("no memory cgroup can be made here (GAMMA_SANDBOX_CGROUP=auto finds none)")
    layer = request.param
    redis_url = fresh_db_url(redis_base)
    _held_dbs.add(redis_url)
    stack = Stack(redis_url=redis_url, data_dir=tmp_path_factory.mktemp(f"mem-{layer}"),
                  env_overrides={"GAMMA_SANDBOX": layer, "GAMMA_SANDBOX_CGROUP": "auto",
                                 "GAMMA_SANDBOX_MEMORY_BYTES": str(64 * MIB),
                                 "GAMMA_SANDBOX_TMP_BYTES": str(128 * MIB),
                                 "GAMMA_WORKSPACE_MAX_BYTES": str(QUOTA_BYTES), "GAMMA_IDLE_S": "120"})
    stack.layer = layer
    try:
        stack.start("runtime", "proxy")
        with urllib.request.urlopen(stack.url("runtime") + "/readyz", timeout=10) as resp:
            sandbox = json.loads(resp.read())["details"]["sandbox"]
        assert sandbox.get("memoryCgroup"), f"the runtime took no memory cgroup: {sandbox}; {stack.log('runtime')[-3000:]}"
        yield stack
    finally:
        stack.stop()
        _held_dbs.discard(redis_url)


MEMFD = ("python3 -c 'import os\nfds = []\nfor i in range(32):\n    fd = os.memfd_create(\"x\")\n"
         "    os.write(fd, bytes(4 << 20))\n    fds.append(fd)\nprint(\"all\")'")


def test_shared_memory_counts_against_the_calls_memory_limit(small_memory_stack: Stack) -> None:
    """128 MB of /dev/shm (bwrap) or memfd (both; no process's address space once written) under a
    64 MiB call limit: the kernel kills inside the call, and the result says the limit was reached."""
    stack = small_memory_stack
    sid = new_sid(stack, "shm")
    command = _fill("/dev/shm", 32) if stack.layer == "bwrap" else MEMFD
    res = bash(stack, sid, command)
    assert res["details"].get("memoryKilled", 0) >= 1, res
    lines = res["text"].splitlines()
    assert "killed: memory limit" in res["text"] and "reached its memory limit" in res["text"]
    assert "wrote 32" not in lines and "all" not in lines
    assert not bash(stack, sid, "echo still works")["isError"]
