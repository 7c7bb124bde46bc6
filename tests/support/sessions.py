"""A session as a test drives it over the public API: create it, prompt it, read its transcript."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.polling import wait_sync


def new_session(api: httpx.Client) -> str:
    resp = api.post("/sessions", json={})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def entries(api: httpx.Client, sid: str) -> list[dict[str, Any]]:
    """The whole transcript, every page of GET /transcript."""
    out: list[dict[str, Any]] = []
    cursor = "0"
    while True:
        resp = api.get(f"/sessions/{sid}/transcript", params={"cursor": cursor})
        assert resp.status_code == 200, resp.text
        page = resp.json()
        out.extend(page["entries"])
        if not page["has_more"]:
            return out
        cursor = page["next_cursor"]


def tool_results(items: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [e["message"] for e in items if e["type"] == "message" and e["message"]["role"] == "toolResult"
            and e["message"]["toolName"] == tool]


def ask(api: httpx.Client, sid: str, text: str, timeout_s: float = 90) -> list[dict[str, Any]]:
    """Post a prompt and wait until its run has answered it (its user entry, then a blocking
    message_user, and the run over); the transcript then."""
    resp = api.post(f"/sessions/{sid}/messages", json={"message": text})
    assert resp.status_code == 202, resp.text
    prompt_id = resp.json()["prompt_id"]

    def answered() -> list[dict[str, Any]] | None:
        items = entries(api, sid)
        at = next((i for i, e in enumerate(items) if e.get("promptId") == prompt_id), None)
        if at is None:
            return None
        yielded = any((r.get("details") or {}).get("blockOnUser") for r in tool_results(items[at:], "message_user"))
        return items if yielded and not api.get(f"/sessions/{sid}").json().get("running") else None

    return wait_sync(answered, timeout=timeout_s, interval=0.2, what=f"an answer to {text[:40]!r}")
