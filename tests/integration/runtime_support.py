"""Helpers for driving a real runtime process through Redis, as the proxy would."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from shared import keys
from shared.contracts.inbox import InboxMessage, UserPrompt
from shared.contracts.wake import Wake


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

    def wait_event(self, sid: str, pred: Any, timeout: float = 30, what: str = "event") -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.events(sid):
                if pred(ev):
                    return ev
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; events: {[e['type'] for e in self.events(sid)][-40:]}")

    def message_users(self, sid: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events(sid) if e["type"] == "message_user"]

    def live(self, sid: str) -> bool:
        return bool(self.r.exists(keys.lease(sid)))

    def reply(self, sid: str, request_id: str, timeout: int = 15) -> dict[str, Any]:
        got = self.r.blpop([keys.reply(sid, request_id)], timeout=timeout)
        assert got is not None, f"no reply for {request_id}"
        return dict(json.loads(got[1]))
