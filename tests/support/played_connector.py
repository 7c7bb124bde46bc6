"""The test as a connector (docs/architecture.md "Connectors"): it registers over HTTP with the
service token, reads the calls the runtime sends on `gamma:connectors:{name}:calls`, and answers
over HTTP when the test chooses."""

from __future__ import annotations

import json
from typing import Any

import httpx
import redis

from shared.redis import keys
from tests.support.polling import wait_sync
from tests.support.stack import SERVICE_TOKEN, Stack


class PlayedConnector:
    """Registers `name` with one tool `echo` (one required string argument `prop`)."""

    def __init__(self, stack: Stack, name: str, timeout_s: float, prop: str = "a", description: str = "played by the test",
                 workspaces: list[str] | None = None, tool_description: str = "echo its argument") -> None:
        self.name = name
        self.description = description
        self.tool_description = tool_description
        self.workspaces = workspaces
        self.r = redis.Redis.from_url(stack.redis_url)
        self.http = httpx.Client(base_url=stack.url("notifications"),
                                 headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}, timeout=30)
        self.register(timeout_s, prop)

    def register(self, timeout_s: float, prop: str) -> int:
        body: dict[str, Any] = {"description": self.description, "tools": [{
            "name": "echo", "description": self.tool_description, "timeout_s": timeout_s, "parameters": {
                "type": "object", "properties": {prop: {"type": "string"}}, "required": [prop],
                "additionalProperties": False}}]}
        if self.workspaces is not None:
            body["workspaces"] = self.workspaces
        resp = self.http.put(f"/connectors/{self.name}", json=body)
        assert resp.status_code == 200, resp.text
        return int(resp.json()["version"])

    def delete(self) -> None:
        assert self.http.delete(f"/connectors/{self.name}").status_code == 204

    def calls(self, sid: str) -> list[dict[str, Any]]:
        found = [json.loads(f[b"data"]) for _, f in self.r.xrange(keys.connector_calls(self.name))]
        return [c for c in found if c["session_id"] == sid]

    def wait_call(self, sid: str, n: int = 1) -> dict[str, Any]:
        return wait_sync(lambda: self.calls(sid)[n - 1] if len(self.calls(sid)) >= n else None, timeout=60,
                         what=f"call {n} of {self.name}")

    def answer(self, c: dict[str, Any], content: str) -> httpx.Response:
        return self.http.post(f"/connectors/{self.name}/results", json={
            "call_id": c["call_id"], "session_id": c["session_id"], "status": "ok", "content": content})
