"""shared/storage/walk.py: the one bounded, iterative walk of a workspace and the tree removal."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from shared.storage.disk import workspace_files
from shared.storage.walk import WalkLimits, remove_tree, walk

LIMITS = WalkLimits(max_entries=1000, max_depth=16, budget_s=10)


def nest(root: Path, depth: int) -> Path:
    """A chain of `depth` directories named d, made through dir fds (the path is longer than PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return root


def test_a_tree_deeper_than_the_stack_is_walked_bounded_and_removed(tmp_path: Path) -> None:
    ws = nest(tmp_path, 1200)
    got = walk(ws, LIMITS)  # no RecursionError: an explicit stack, at most max_depth fds held
    assert got.complete and got.deeper and got.too_deep == ["/".join(["d"] * 17)]
    assert [e.rel for e in got.entries] == ["/".join(["d"] * n) for n in range(1, 17)]
    assert workspace_files(ws) == []  # the projection at a wake: a bounded answer, never a crash
    parent = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removed = remove_tree(parent, "d", budget_s=30)
    finally:
        os.close(parent)
    assert removed.finished and removed.removed == 1201 and os.listdir(ws) == []


def test_the_walk_stops_past_its_entry_bound_and_never_follows_a_link(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    (outside / "x").mkdir(parents=True)
    os.symlink(outside, ws / "out")
    for i in range(30):
        (ws / f"e{i}").mkdir()
    got = walk(ws, WalkLimits(max_entries=10, max_depth=16, budget_s=10))
    assert got.stopped == "entries" and len(got.entries) == 11
    everything = walk(ws, LIMITS)
    assert everything.complete and len(everything.entries) == 31
    assert {e.kind for e in everything.entries} == {"directory", "symlink"}
    assert walk(tmp_path / "absent", LIMITS).complete


def test_special_files_are_reported_as_what_they_are(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        kinds = {e.rel: e.kind for e in walk(tmp_path, LIMITS).entries}
    finally:
        sock.close()
    assert kinds == {"fifo": "fifo", "sock": "socket"}
    assert workspace_files(tmp_path) == []


def test_remove_tree_removes_a_link_not_its_target(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "kept").write_text("k")
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    os.symlink(tmp_path / "target", tmp_path / "tree" / "sub" / "link")
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removed = remove_tree(parent, "tree", budget_s=10)
    finally:
        os.close(parent)
    assert removed.finished and removed.removed == 3
    assert (tmp_path / "target" / "kept").read_text() == "k"
