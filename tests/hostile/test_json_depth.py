"""JSON nesting depth and number length are capped at the edge, for every JSON body of
the proxy (documents, UI, messages, sessions) and notifications: a clear 422, and nothing stored.

Before: a dormant PUT of a deck nested 250 deep was written and every later GET/PUT/PATCH of it answered
409 "recursion limit exceeded"; live, the runtime dead-lettered its own inbox entry and the client got a
500 after 37 s; a 10,000-deep array or a 5,000-digit number at the notification intake was a 500.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.contracts.records.documents import StoredDeck
from tests.integration.test_notifications_acceptance import SERVICE, USER, create_session, say
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(180)
DEPTH = 64  # GAMMA_MAX_JSON_DEPTH's default


def nest(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def deck_at_depth(depth: int) -> dict[str, Any]:
    """A deck body whose deepest value sits `depth` containers down (the deck object counts)."""
    return {"title": "deep", "metadata": nest(depth - 1)}


def refused(resp: httpx.Response, fragment: str) -> None:
    assert resp.status_code == 422, resp.text
    assert fragment in resp.json()["error"], resp.text


def seed_document(stack: Stack, sid: str, doc: str) -> Path:
    path = stack.data_dir / "sessions" / sid / "documents" / f"{doc}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(StoredDeck(title="Otters", revision=1, cards=[{"id": "c1", "title": "Intro"}]).model_dump_json())
    return path


def api(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers=USER, timeout=30)


def test_deep_documents_are_refused_dormant_and_the_deck_stays_readable(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    path = seed_document(module_stack, sid, "d1")
    before = path.read_bytes()
    with api(module_stack) as client:
        url = f"/sessions/{sid}/documents/d1"
        refused(client.put(url, json=deck_at_depth(250)), "nesting")
        refused(client.patch(url, json={"metadata": nest(DEPTH)}), "nesting")
        refused(client.put(url, content=b'{"title": "n", "metadata": {"n": ' + b"7" * 5000 + b"}}",
                           headers={"content-type": "application/json"}), "digits")
        assert path.read_bytes() == before
        assert client.get(url).status_code == 200
        # The limit is the documented one, not lower: a deck exactly DEPTH deep is stored and read back.
        at_limit = client.put(url, json=deck_at_depth(DEPTH))
        assert at_limit.status_code == 200, at_limit.text
        refused(client.put(url, json=deck_at_depth(DEPTH + 1)), "nesting")
        read = client.get(url)
        assert read.status_code == 200 and read.json()["metadata"] == nest(DEPTH - 1)


def test_deep_bodies_are_refused_live_at_once(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    seed_document(module_stack, sid, "d1")
    say(module_stack, sid, "hello")  # live: writes go to the runtime through its inbox
    with api(module_stack) as client:
        refused(client.put(f"/sessions/{sid}/documents/d1", json=deck_at_depth(250)), "nesting")
        refused(client.post(f"/sessions/{sid}/ui/sync", json={"update": "AAA=", "snapshot": {"x": nest(200)}}),
                "nesting")
        refused(client.post(f"/sessions/{sid}/messages", json={"message": "hi", "client_context": nest(300)}),
                "nesting")
        refused(client.post("/sessions", content=b"[" * 10_000 + b"]" * 10_000,
                            headers={"content-type": "application/json"}), "nesting")
        # A deck at the limit goes through the runtime's inbox (wrapped a few levels deeper) and back.
        at_limit = client.put(f"/sessions/{sid}/documents/d1", json=deck_at_depth(DEPTH))
        assert at_limit.status_code == 200, at_limit.text
        assert client.get(f"/sessions/{sid}/documents/d1").json()["metadata"] == nest(DEPTH - 1)
        # The runtime's inbox is not stuck behind anything: a normal live write is applied.
        ok = client.put(f"/sessions/{sid}/documents/d1", json={"title": "Sea otters"})
        assert ok.status_code == 200, ok.text
        assert client.get(f"/sessions/{sid}/documents/d1").json()["title"] == "Sea otters"


def test_file_contents_are_opaque(module_stack: Stack) -> None:
    """Workspace files are bytes, not JSON bodies: a deeply nested .json file is still a valid file."""
    sid = create_session(module_stack)
    workspace = module_stack.data_dir / "sessions" / sid / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "deep.json").write_text("{}")
    content = b"[" * 500 + b"]" * 500
    with api(module_stack) as client:
        resp = client.put(f"/sessions/{sid}/workspace/files/deep.json", content=content,
                          headers={"content-type": "application/json"})
        assert resp.status_code == 200, resp.text
    assert (workspace / "deep.json").read_bytes() == content


def test_notification_intake_refuses_deep_arrays_and_long_numbers(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    url = module_stack.url("notifications") + "/notifications"
    deep = httpx.post(url, content=b"[" * 10_000 + b"]" * 10_000, headers=SERVICE, timeout=30)
    refused(deep, "nesting")
    number = (b'{"session_id": "' + sid.encode() + b'", "notification": {"id": "n1", "type": "import.completed",'
              b' "payload": {"importId": ' + b"9" * 5000 + b', "sourceRef": "s"}}}')
    refused(httpx.post(url, content=number, headers=SERVICE, timeout=30), "digits")
    client = redis.Redis.from_url(module_stack.redis_url)
    try:
        assert client.keys("gamma:{" + sid + "}:ntf:*") == []
    finally:
        client.close()


def test_chunked_bodies_over_the_byte_cap_are_413_not_500(module_stack: Stack) -> None:
    """The guard reads the whole body before any route: a chunked body (no Content-Length) over
    GAMMA_MAX_BODY_BYTES (2 MiB) still gets the byte cap's 413, on both services."""
    sid = create_session(module_stack)
    seed_document(module_stack, sid, "d1")

    def chunks() -> Any:
        yield b'{"title": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    with api(module_stack) as client:
        resp = client.put(f"/sessions/{sid}/documents/d1", content=chunks(), headers={"content-type": "application/json"})
        assert resp.status_code == 413, resp.text
        assert client.get(f"/sessions/{sid}/documents/d1").json()["title"] == "Otters"
    resp = httpx.post(module_stack.url("notifications") + "/notifications", content=chunks(), headers=SERVICE, timeout=30)
    assert resp.status_code == 413, resp.text
