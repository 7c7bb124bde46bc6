"""`GET /sessions/{id}/events` against a real stack: SSE ids are stream ids, resume with Last-Event-ID
(header or query), `0` replays, `$` starts at the newest, heartbeats while idle, and the server-side
reader goes away when the client does. Events are appended the way the runtime appends them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis

from shared import keys
from shared.contracts.events import SessionEvent
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, OTHER_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("proxy-events"),
              env_overrides={"GAMMA_SSE_HEARTBEAT_S": "1"})
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url(), headers=ALICE, timeout=httpx.Timeout(30, read=10)) as client:
        yield client


@pytest.fixture(scope="module")
def r(module_redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(module_redis_url)
    yield client
    client.close()


@dataclass
class Frame:
    id: str | None
    data: str | None
    comments: list[str]


def frames(resp: httpx.Response) -> Iterator[Frame]:
    current = Frame(None, None, [])
    for line in resp.iter_lines():
        if line == "":
            yield current
            current = Frame(None, None, [])
        elif line.startswith(":"):
            current.comments.append(line[1:].strip())
        elif line.startswith("id: "):
            current.id = line[4:]
        elif line.startswith("data: "):
            current.data = (current.data + "\n" if current.data else "") + line[6:]


def data_frames(resp: httpx.Response, n: int) -> list[Frame]:
    out = []
    for frame in frames(resp):
        if frame.data is not None:
            out.append(frame)
            if len(out) == n:
                return out
    raise AssertionError("stream ended early")


def emit(r: redis.Redis, sid: str, type_: str, **data: object) -> str:
    event = SessionEvent(type=type_, session_id=sid, data=dict(data))  # type: ignore[arg-type]
    entry = r.xadd(keys.events(sid), {"data": event.model_dump_json()}, maxlen=10_000, approximate=True)
    return entry.decode() if isinstance(entry, bytes) else str(entry)


def new_session(api: httpx.Client) -> str:
    return str(api.post("/sessions").json()["id"])


def test_replay_from_zero_and_resume(api: httpx.Client, r: redis.Redis) -> None:
    sid = new_session(api)
    ids = [emit(r, sid, "message_update", delta=f"part {i}") for i in range(3)]
    with api.stream("GET", f"/sessions/{sid}/events") as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        got = data_frames(resp, 3)
    assert [f.id for f in got] == ids
    events = [SessionEvent.model_validate_json(f.data or "") for f in got]
    assert [e.data["delta"] for e in events] == ["part 0", "part 1", "part 2"]

    with api.stream("GET", f"/sessions/{sid}/events", headers={"Last-Event-ID": ids[0]}) as resp:
        assert [f.id for f in data_frames(resp, 2)] == ids[1:]
    with api.stream("GET", f"/sessions/{sid}/events", params={"last_event_id": ids[1]}) as resp:
        assert [f.id for f in data_frames(resp, 1)] == ids[2:]


def test_dollar_starts_at_the_newest_and_heartbeats_flow(api: httpx.Client, r: redis.Redis) -> None:
    sid = new_session(api)
    emit(r, sid, "status", status="live", running=False)
    with api.stream("GET", f"/sessions/{sid}/events", headers={"Last-Event-ID": "$"}) as resp:
        stream = frames(resp)
        assert "connected" in next(stream).comments
        heartbeat = next(stream)  # nothing new yet: a comment after ~1 s (GAMMA_SSE_HEARTBEAT_S)
        assert heartbeat.data is None and "heartbeat" in heartbeat.comments
        new_id = emit(r, sid, "message_user", message="Done", block_on_user=True, tool_call_id="c1")
        frame = next(f for f in stream if f.data is not None)
    assert frame.id == new_id
    assert json.loads(frame.data or "")["data"]["message"] == "Done"


def blocked_readers(r: redis.Redis) -> int:
    """Server-side XREAD calls still blocked (flag b, last command xread): only SSE readers use plain XREAD."""
    return sum(1 for c in r.client_list() if "b" in c.get("flags", "") and c.get("cmd") == "xread")


def test_the_reader_goes_away_with_the_client(api: httpx.Client, r: redis.Redis) -> None:
    sid = new_session(api)
    with api.stream("GET", f"/sessions/{sid}/events") as resp:
        stream = frames(resp)  # keep a reference: a collected line iterator closes the connection
        assert "connected" in next(stream).comments
        wait_sync(lambda: blocked_readers(r) >= 1, timeout=10, what="a blocked XREAD for the SSE client")
    wait_sync(lambda: blocked_readers(r) == 0, timeout=15, what="the XREAD to end after the client left")
    assert api.get("/healthz").status_code == 200


def test_bad_requests(api: httpx.Client, stack: Stack) -> None:
    sid = new_session(api)
    resp = api.get(f"/sessions/{sid}/events", headers={"Last-Event-ID": "yesterday"})
    assert resp.status_code == 400 and "Last-Event-ID" in resp.json()["error"]
    assert api.get(f"/sessions/{sid}/events", headers={"Authorization": "Bearer x"}).status_code == 401
    other = httpx.get(f"{stack.url()}/sessions/{sid}/events", headers={"Authorization": f"Bearer {OTHER_TOKEN}"}, timeout=10)
    assert other.status_code == 404
    assert "Traceback" not in stack.log("proxy")
