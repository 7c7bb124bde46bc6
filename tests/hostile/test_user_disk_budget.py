"""One user's sessions share a disk budget (services/proxy/dormant/disk_budget.py): a fork or an upload past
it is refused with 507 and creates nothing; blocks count, each inode once."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from tests.integration.test_rewind_fork import send
from tests.support.stack import OTHER_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)
MB = 1_000_000
BUDGET = 13 * MB


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_USER_DISK_BYTES": str(BUDGET)}


def _count(api: httpx.Client) -> int:
    return len(api.get("/sessions", params={"limit": 100}).json()["sessions"])


def test_forks_and_uploads_stop_at_the_users_disk_budget(api: httpx.Client, module_stack: Stack) -> None:
    sid = str(api.post("/sessions").json()["id"])
    steps = [{"tool_calls": [{"name": "bash", "arguments": {"command": "head -c 5000000 /dev/urandom > a.bin"}}]}]
    send(api, sid, "script:" + json.dumps(steps))  # ~5 MB in the workspace and ~5 MB in its snapshot objects
    sessions = _count(api)
    fork = api.post(f"/sessions/{sid}/fork", json={})
    assert fork.status_code == 507 and "GAMMA_USER_DISK_BYTES" in fork.json()["error"], fork.text
    assert _count(api) == sessions, "a refused fork creates nothing"
    statuses = [api.put(f"/sessions/{sid}/workspace/files/up{i}.bin", content=os.urandom(MB)).status_code
                for i in range(4)]
    assert statuses[0] in (200, 201) and statuses[-1] == 507, statuses
    refused = statuses.index(507)
    assert all(s == 507 for s in statuses[refused:])
    assert api.get(f"/sessions/{sid}/workspace/files/up{refused}.bin").status_code == 404
    with httpx.Client(base_url=module_stack.url(), headers={"Authorization": f"Bearer {OTHER_TOKEN}"},
                      timeout=30) as bob:  # another user's budget is their own
        bobs = str(bob.post("/sessions").json()["id"])
        assert bob.put(f"/sessions/{bobs}/workspace/files/x.bin", content=os.urandom(MB)).status_code in (200, 201)
