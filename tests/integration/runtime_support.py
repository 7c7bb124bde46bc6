"""Helpers for driving a real runtime process through Redis, as the proxy would."""

from __future__ import annotations

import json
from typing import Any

import redis

from shared.contracts.streams.inbox import InboxMessage, UserPrompt
from shared.contracts.streams.wake import Wake
from shared.redis import keys
from tests.support.polling import wait_sync


class Driver:
    def __init__(self, url: str) -> None:
        self.r = redis.Redis.from_url(url)

    def wake(self, sid: str) -> str:
        w = Wake(session_id=sid)
        self.r.xadd(keys.WAKE, {"data": w.model_dump_json()})
        return w.wake_id

    def append(self, message: InboxMessage) -> None:
        self.r.xadd(keys.inbox(message.session_id), {"type": message.type, "data": message.model_dump_json()})

    def prompt(self, sid: str, text: str, **kw: Any) -> UserPrompt:
        p = UserPrompt(session_id=sid, message=text, **kw)
        self.append(p)
        return p

    def events(self, sid: str) -> list[dict[str, Any]]:
        return [json.loads(f[b"data"]) for _, f in self.r.xrange(keys.events(sid))]

    def wait_event(self, sid: str, pred: Any, timeout: float = 90, what: str = "event") -> dict[str, Any]:
        return wait_sync(lambda: next((ev for ev in self.events(sid) if pred(ev)), None), timeout=timeout,
                         what=what, detail=lambda: f"events: {[e['type'] for e in self.events(sid)][-40:]}")

    def message_users(self, sid: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events(sid) if e["type"] == "message_user"]

    def live(self, sid: str) -> bool:
        return bool(self.r.exists(keys.lease(sid)))

    def reply(self, sid: str, request_id: str, timeout: int = 15) -> dict[str, Any]:
        got = self.r.blpop([keys.reply(sid, request_id)], timeout=timeout)
        assert got is not None, f"no reply for {request_id}"
        return dict(json.loads(got[1]))


def script(*steps: dict[str, Any]) -> str:
    """A user message the scripted model plays back step by step (scripted/gamma.py)."""
    return "script:" + json.dumps(list(steps))


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def done(message: str = "done") -> dict[str, Any]:
    return {"tool_calls": [call("message_user", message=message, blockOnUser=True)]}


def bus_payload(fields: dict[bytes, bytes]) -> dict[str, Any]:
    """The JSON body of a FastStream-published entry (binary envelope: headers, then the payload)."""
    raw = fields.get(b"data") or fields[b"__data__"]
    start = raw.rfind(b"\n{") + 1 if raw.rfind(b"\n{") >= 0 else raw.index(b"{")
    for i in [start, *[j for j in range(len(raw)) if raw[j : j + 1] == b"{"]]:
        try:
            return dict(json.loads(raw[i:]))
        except ValueError:
            continue
    raise ValueError("no JSON payload")


def stream_payloads(r: redis.Redis, stream: str) -> list[dict[str, Any]]:
    return [bus_payload(f) for _, f in r.xrange(stream)]


def transcript(data_dir: Any, sid: str) -> list[dict[str, Any]]:
    from pathlib import Path

    path = Path(data_dir) / "sessions" / sid / "transcript.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kinds(entries: list[dict[str, Any]]) -> list[str]:
    """A compact view of a transcript: message roles, custom types, other entry types."""
    out = []
    for e in entries:
        if e["type"] == "message":
            out.append(e["message"]["role"])
        elif e["type"] == "custom_message":
            out.append(e["customType"])
        else:
            out.append(e["type"])
    return out
