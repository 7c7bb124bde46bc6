"""A sparse file stays sparse through snapshots and forks (shared/storage/sparse.py): a fork costs the disk
its data, not its apparent size (a dense copy of a 90 MB file of holes takes 90 MB per fork)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.integration.test_rewind_fork import send
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(300)
SIZE = 20 * 1024 * 1024


def _big_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size >= SIZE]


def test_a_sparse_file_forks_sparse(api: httpx.Client, module_stack: Stack) -> None:
    sid = str(api.post("/sessions").json()["id"])
    command = f"truncate -s {SIZE} sparse.bin && printf end >> sparse.bin && du -k sparse.bin"
    steps = [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}]
    send(api, sid, "script:" + json.dumps(steps))
    resp = api.post(f"/sessions/{sid}/fork", json={})
    assert resp.status_code == 201, resp.text
    new = resp.json()["id"]
    sessions = Path(module_stack.data_dir) / "sessions"
    forked = sessions / new / "workspace" / "sparse.bin"
    assert forked.stat().st_size == SIZE + 3 and forked.read_bytes()[-3:] == b"end"
    copies = _big_files(sessions / sid) + _big_files(sessions / new)
    assert len(copies) >= 3, copies  # the source's file, its snapshot object, the fork's file
    dense = {str(p): p.stat().st_blocks * 512 for p in copies if p.stat().st_blocks * 512 > 1024 * 1024}
    assert not dense, f"copied dense: {dense}"
