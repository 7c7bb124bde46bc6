"""kill -9 in the middle of a rewind (docs/architecture.md "Snapshots, rewind and fork"): the process
doing the rewind dies after it wrote its intent, mid-restore or mid-move; the next wake (the real
runtime) finishes it, so the workspace, documents, todo and the active branch all agree afterwards,
and the leaf move is recorded once."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
import redis

from shared.redis import keys
from tests.integration.test_rewind_fork import (
    assert_state_of_turn_two_prompt,
    parent_turn,
    send,
    transcript,
    two_turns,
    user_entry,
)
from tests.support.polling import wait_sync
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("where", ["restore", "moves"])
def test_a_rewind_killed_midway_is_finished_by_the_next_wake(api: httpx.Client, r: redis.Redis,
                                                              module_stack: Stack, where: str) -> None:
    sid, turn_two = two_turns(api)
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    child = subprocess.run(
        [sys.executable, "-m", "tests.integration.rewind_child", module_stack.redis_url, str(module_stack.data_dir),
         sid, turn_two["id"], where], capture_output=True, text=True, timeout=60, env=module_stack.env)
    assert child.returncode == -9 and "armed" in child.stdout, child.stderr
    assert (module_stack.data_dir / "sessions" / sid / ".snapshots" / "rewind.json").exists(), "cut short"
    wait_sync(lambda: not r.exists(keys.lease(sid)), timeout=15, what="the dead holder's lease to lapse")
    send(api, sid, "after the crash")  # wakes the real runtime, which finishes the rewind first
    assert not (module_stack.data_dir / "sessions" / sid / ".snapshots" / "rewind.json").exists()
    assert parent_turn(api, sid, user_entry(api, sid, "after the crash")) == turn_two["id"]
    moves = [e for e in transcript(api, sid, tree=True) if e["type"] == "leaf"]
    assert len(moves) == 1 and moves[0]["targetId"] == turn_two["id"], "the move is recorded once"
    assert_state_of_turn_two_prompt(api, sid)
    active = [e["id"] for e in transcript(api, sid)]
    assert turn_two["id"] in active and active.index(turn_two["id"]) < len(active) - 1, "rewind point, then the new turn"
