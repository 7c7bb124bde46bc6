"""Per-user session quota, per-user creation rate, and paging of GET /sessions.

Before: 3,000 sessions for one user in 6.6 s were all accepted and the listing stopped at 200.
The proxy alone is enough here (sessions are created dormant), against a real Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.stack import Stack

TOKENS = "alice:tok-alice,bob:tok-bob,carol:tok-carol,dave:tok-dave"


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer tok-{user}"}


def proxy_only(redis_url: str, data_dir: Path, **env: str) -> Stack:
    stack = Stack(redis_url=redis_url, data_dir=data_dir, env_overrides={"GAMMA_API_TOKENS": TOKENS, **env})
    return stack.start("proxy")


@pytest.fixture
def quota_stack(redis_url: str, data_dir: Path) -> Iterator[Stack]:
    stack = proxy_only(redis_url, data_dir, GAMMA_MAX_SESSIONS_PER_USER="5", GAMMA_SESSION_CREATES_PER_MINUTE="1000")
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def rate_stack(redis_url: str, data_dir: Path) -> Iterator[Stack]:
    stack = proxy_only(redis_url, data_dir, GAMMA_SESSION_CREATES_PER_MINUTE="8")
    try:
        yield stack
    finally:
        stack.stop()


def listed(client: httpx.Client, user: str, **params: str | int) -> dict:
    resp = client.get("/sessions", headers=auth(user), params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.timeout(60)
def test_session_quota_is_enforced_atomically_per_user(quota_stack: Stack) -> None:
    with httpx.Client(base_url=quota_stack.url(), timeout=20) as client:
        for _ in range(5):
            assert client.post("/sessions", headers=auth("alice")).status_code == 201
        refused = client.post("/sessions", headers=auth("alice"))
        assert refused.status_code == 403
        assert "at most 5 sessions" in refused.json()["error"]
        assert len(listed(client, "alice")["sessions"]) == 5  # the refusal created nothing
        # Another user's quota is their own.
        assert client.post("/sessions", headers=auth("bob")).status_code == 201

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=quota_stack.url(), timeout=20) as client:
            replies = await asyncio.gather(*(client.post("/sessions", headers=auth("carol")) for _ in range(20)))
            return [r.status_code for r in replies]

    statuses = asyncio.run(burst())
    assert sorted(statuses) == [201] * 5 + [403] * 15  # concurrent creations never overshoot
    with httpx.Client(base_url=quota_stack.url(), timeout=20) as client:
        assert len(listed(client, "carol")["sessions"]) == 5


@pytest.mark.timeout(60)
def test_creation_rate_is_limited_per_user(rate_stack: Stack) -> None:
    # Fixed one-minute windows: do not start right before a boundary, where the count starts again.
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)
    with httpx.Client(base_url=rate_stack.url(), timeout=20) as client:
        for _ in range(8):
            assert client.post("/sessions", headers=auth("alice")).status_code == 201
        refused = client.post("/sessions", headers=auth("alice"))
        assert refused.status_code == 429
        assert "at most 8 per minute" in refused.json()["error"]
        assert 1 <= int(refused.headers["Retry-After"]) <= 61
        assert len(listed(client, "alice")["sessions"]) == 8
        assert client.post("/sessions", headers=auth("bob")).status_code == 201


@pytest.mark.timeout(60)
def test_session_listing_pages_with_a_stable_cursor(rate_stack: Stack) -> None:
    with httpx.Client(base_url=rate_stack.url(), timeout=20) as client:
        created = []
        for _ in range(7):
            resp = client.post("/sessions", headers=auth("dave"))
            assert resp.status_code == 201
            created.append(resp.json()["id"])
            time.sleep(0.002)  # distinct creation times: the listing is newest first
        everything = listed(client, "dave")
        assert [s["id"] for s in everything["sessions"]] == created[::-1]
        assert everything.get("next_cursor") is None

        first = listed(client, "dave", limit=3)
        assert [s["id"] for s in first["sessions"]] == created[::-1][:3]
        # A session created between two pages goes to the front and shifts nothing behind the cursor.
        newer = client.post("/sessions", headers=auth("dave")).json()["id"]
        second = listed(client, "dave", limit=3, cursor=first["next_cursor"])
        assert [s["id"] for s in second["sessions"]] == created[::-1][3:6]
        last = listed(client, "dave", limit=3, cursor=second["next_cursor"])
        assert [s["id"] for s in last["sessions"]] == created[::-1][6:]
        assert last.get("next_cursor") is None
        assert listed(client, "dave", limit=1)["sessions"][0]["id"] == newer

        for bad in ("not-a-cursor!", "bm9jb2xvbg"):
            resp = client.get("/sessions", headers=auth("dave"), params={"cursor": bad})
            assert resp.status_code == 400 and "invalid cursor" in resp.json()["error"]
        for limit in (0, 501):
            assert client.get("/sessions", headers=auth("dave"), params={"limit": limit}).status_code == 422
        # A cursor is only a position: another user's cursor shows nothing of dave's.
        assert listed(client, "alice", cursor=first["next_cursor"])["sessions"] == []
