"""Every path that adds to a user's disk checks their budget (shared/costs/user_disk.py), not only a fork
and an upload: a bash call, the agent's write and edit, a document write, each refused with 507 and
nothing changed once the user's sessions are past it; a dormant session's upload too."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.integration.test_rewind_fork import send, transcript
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(300)
MB = 1_000_000
BUDGET = 13 * MB


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_USER_DISK_BYTES": str(BUDGET)}


def _steps(*calls: dict[str, Any]) -> str:
    return "script:" + json.dumps([{"tool_calls": [c]} for c in calls])


def _bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


def _results(api: httpx.Client, sid: str, tool: str) -> list[dict[str, Any]]:
    return [e["message"] for e in transcript(api, sid) if e.get("type") == "message"
            and e["message"]["role"] == "toolResult" and e["message"]["toolName"] == tool]


def _text(message: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in message["content"])


def test_agent_writes_bash_and_documents_stop_at_the_users_disk_budget(api: httpx.Client, module_stack: Stack) -> None:
    sid = str(api.post("/sessions").json()["id"])
    # ~5 MB each in the workspace and in its snapshot: the second call starts under the budget and ends past it
    send(api, sid, _steps(_bash("head -c 5000000 /dev/urandom > a.bin")))
    send(api, sid, _steps(_bash("head -c 5000000 /dev/urandom > b.bin")))
    assert not _results(api, sid, "bash")[-1]["isError"]
    send(api, sid, _steps(_bash("echo x > marker.txt"),
                          {"name": "write", "arguments": {"path": "note.txt", "content": "hello"}}))
    refused_bash, refused_write = _results(api, sid, "bash")[-1], _results(api, sid, "write")[-1]
    for message in (refused_bash, refused_write):
        assert message["isError"] and "GAMMA_USER_DISK_BYTES" in _text(message), message
    assert "507" in _text(refused_bash)
    for name in ("marker.txt", "note.txt"):
        assert api.get(f"/sessions/{sid}/workspace/files/{name}").status_code == 404, name
    deck = api.put(f"/sessions/{sid}/documents/d1", json={"title": "T", "cards": []})
    assert deck.status_code == 507 and "GAMMA_USER_DISK_BYTES" in deck.json()["error"], deck.text
    assert api.get(f"/sessions/{sid}/documents/d1").status_code == 404
    dormant = str(api.post("/sessions").json()["id"])  # never woken: the proxy writes its disk itself
    up = api.put(f"/sessions/{dormant}/workspace/files/x.bin", content=b"x" * 1000)
    assert up.status_code == 507, up.text
    assert api.get(f"/sessions/{dormant}/workspace/files/x.bin").status_code == 404
