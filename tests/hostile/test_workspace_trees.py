"""A workspace shaped against the harness by the agent's own (prompt-injectable) bash: a tree nested
far past Python's recursion limit, tens of thousands of empty directories, sockets and FIFOs
(docs/architecture.md "Trust boundaries"; shared/storage/walk.py). Each on every sandbox layer that works here.

Before (recursive walks): one bash call nesting 1,200 directories made every later call, and every
wake, fail with RecursionError; 40,000 empty directories passed the quota and each later `bash true`
walked them on the runtime's event loop (4.8-7.3 s; another session's round trip up to 2.6 s).
"""

from __future__ import annotations

import socket
import statistics
import threading
import time

import pytest

from tests.hostile.trees_support import (
    MAX_DEPTH,
    MAX_ENTRIES,
    api,
    bash,
    nest,
    suspend,
    tools,
    tree_stack,
    workspace,
)
from tests.integration.runtime_support import call
from tests.support.sessions import new_session
from tests.support.stack import Stack

__all__ = ["tree_stack"]  # the fixture, imported for pytest

DEEP = 1200


@pytest.mark.timeout(400)
def test_a_tree_nested_1200_deep_is_cut_and_the_session_keeps_working(tree_stack: Stack) -> None:
    with api(tree_stack) as client:
        sid = new_session(client)
        # A hundred levels per `cd`: bash's logical `cd` costs time in the depth of the path it leaves, so
        # one level per step is quadratic (12 s of system time at 1,200 on an idle machine, past the
        # 60 s command limit under the suite's load), and the bound is the point here, not bash.
        hundred = "d/" * 100
        made = bash(client, sid, f"for i in $(seq {DEEP // 100}); do mkdir -p {hundred} && cd {hundred} || exit 1; done;"
                                 " echo made")
        assert "made" in made["text"] and f"deeper than {MAX_DEPTH} levels were removed" in made["text"], made["text"]
        nxt = bash(client, sid, "rm -rf d && echo removed")
        assert not nxt["isError"] and "removed" in nxt["text"], nxt["text"]
        # A tree past the depth bound left on disk (made before the bound existed, or a lowered bound):
        # the wake and the next call must not depend on walking all of it.
        suspend(client, sid)
        nest(workspace(tree_stack, sid), "left", DEEP)
        woke = bash(client, sid, "ls && echo woke")
        assert "woke" in woke["text"] and "deeper than" in woke["text"], woke["text"]
        assert bash(client, sid, "rm -rf left; ls -A | wc -l")["text"].strip().startswith("0")


@pytest.mark.timeout(600)
def test_40000_directories_are_stopped_by_the_entry_quota_without_stalling_others(tree_stack: Stack) -> None:
    with api(tree_stack) as client:
        flood, other = new_session(client), new_session(client)
        bash(client, other, "true")
        times: list[float] = []
        stop = threading.Event()

        def round_trips() -> None:
            with api(tree_stack) as mine:
                while not stop.is_set():
                    started = time.monotonic()
                    tools(mine, other, call("bash", command="true"))
                    times.append(time.monotonic() - started)

        watcher = threading.Thread(target=round_trips)
        watcher.start()
        try:
            result = bash(client, flood, "mkdir -p x/{1..40000} && echo made")
            for _ in range(3):
                assert not bash(client, flood, "true")["isError"]
        finally:
            stop.set()
            watcher.join(timeout=300)
        # Stopped while it runs at the entry quota (the sandbox's watchdog), or, had it finished first,
        # refused after it: either way over quota, and what it created removed.
        assert ("[stopped:" in result["text"] or "made" in result["text"]) and "quota exceeded" in result["text"], \
            result["text"]
        assert "were removed: x" in result["text"] and "still over" not in result["text"]
        assert not (workspace(tree_stack, flood) / "x").exists()
        # Recorded, not asserted (a shared 2-core machine): the other session's round trips meanwhile.
        print(f"[{tree_stack.env_overrides['GAMMA_SANDBOX']}] other session's round trip during the flood: "
              f"n={len(times)} median={statistics.median(times):.3f}s max={max(times):.3f}s")
        assert times


@pytest.mark.timeout(600)
def test_a_100000_entry_attempt_leaves_the_workspace_within_its_bounds(tree_stack: Stack) -> None:
    with api(tree_stack) as client:
        sid = new_session(client)
        bash(client, sid, "echo kept > keep.txt")
        # Files and directories at the top level: each is a name the removal must find and remove.
        result = bash(client, sid, "mkdir -p many && cd many && seq 100000 | xargs touch; cd .. && "
                      "seq 20000 | sed 's/^/t/' | xargs mkdir; echo made", timeout=120)
        assert "quota exceeded" in result["text"] and "still over" not in result["text"], result["text"]
        names = sorted(p.name for p in workspace(tree_stack, sid).iterdir())
        assert names == ["keep.txt"]
        assert "kept" in bash(client, sid, "cat keep.txt")["text"]


@pytest.mark.timeout(300)
def test_sockets_and_fifos_are_not_regular_files_on_any_read_path(tree_stack: Stack) -> None:
    with api(tree_stack) as client:
        sid = new_session(client)
        ws = workspace(tree_stack, sid)
        made = bash(client, sid, "mkfifo fifo && echo ok")
        assert "ok" in made["text"]
        sock = socket.socket(socket.AF_UNIX)  # planted from outside: a socket a command left behind
        sock.bind(str(ws / "sock"))
        try:
            for name in ("fifo", "sock"):
                resp = client.get(f"/sessions/{sid}/workspace/files/{name}")
                assert resp.status_code == 409 and "not a regular file" in resp.json()["error"], resp.text
            listing = {e["name"]: e["type"] for e in client.get(f"/sessions/{sid}/workspace/files/").json()["entries"]}
            assert listing == {"fifo": "fifo", "sock": "socket"}
            read_fifo, read_sock, show = tools(client, sid, call("read", path="fifo"), call("read", path="sock"),
                                               call("show_file", path="sock"))
            for result in (read_fifo, read_sock, show):
                assert result["isError"] and "not a regular file" in result["text"], result["text"]
        finally:
            sock.close()


@pytest.mark.timeout(300)
def test_recursive_delete_removes_a_tree_live_and_dormant_within_bounds(tree_stack: Stack) -> None:
    with api(tree_stack) as client:
        sid = new_session(client)
        bash(client, sid, "mkdir -p t/a/b && echo x > t/a/b/f && echo y > t/g && mkfifo t/p")
        url = f"/sessions/{sid}/workspace/files/t"
        assert client.delete(url).status_code == 409  # a directory without ?recursive=1
        live = client.delete(url, params={"recursive": "1"})
        assert live.status_code == 200, live.text
        assert sorted(f["path"] for f in live.json()["files"]) == ["t/a/b/f", "t/g"]
        assert not (workspace(tree_stack, sid) / "t").exists()
        suspend(client, sid)
        assert client.put(f"/sessions/{sid}/workspace/files/u/v/w.txt", content=b"w").status_code == 200
        dormant = client.delete(f"/sessions/{sid}/workspace/files/u", params={"recursive": "1"})
        assert dormant.status_code == 200 and [f["path"] for f in dormant.json()["files"]] == ["u/v/w.txt"]
        assert client.get(f"/sessions/{sid}").json()["status"] == "dormant"
        # Past the bounds: refused, nothing removed.
        big = workspace(tree_stack, sid) / "big"
        for i in range(MAX_ENTRIES + 1):
            (big / str(i)).mkdir(parents=True)
        refused = client.delete(f"/sessions/{sid}/workspace/files/big", params={"recursive": "1"})
        assert refused.status_code == 409 and str(MAX_ENTRIES) in refused.json()["error"]
        assert sum(1 for _ in big.iterdir()) == MAX_ENTRIES + 1
        too_deep = client.put(f"/sessions/{sid}/workspace/files/" + "/".join(["d"] * MAX_DEPTH) + "/f", content=b"")
        assert too_deep.status_code == 400 and "levels deep" in too_deep.json()["error"]
