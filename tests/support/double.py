"""Requests sent straight to the scripted model's transport (the strict double), read back as the
API's parts: status, headers, SSE events or the JSON body. For the double's own tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2

from scripted.gamma import ScriptedGamma
from scripted.transport import ScriptedTransport


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    events: list[dict[str, Any]] = field(default_factory=list)  # SSE data (Responses events or Chat chunks)
    json: dict[str, Any] | None = None
    done: bool = False  # Chat's `data: [DONE]` arrived

    def types(self) -> list[str]:
        return [str(e.get("type")) for e in self.events]

    def last(self, kind: str) -> dict[str, Any]:
        return next(e for e in reversed(self.events) if e.get("type") == kind)

    @property
    def error(self) -> dict[str, Any]:
        assert self.json is not None and "error" in self.json, self.json
        return dict(self.json["error"])


async def send(transport: ScriptedTransport, api: str, body: dict[str, Any]) -> Answer:
    path = "/v1/responses" if api == "responses" else "/v1/chat/completions"
    response = await transport.handle_async_request(
        httpx2.Request("POST", "http://scripted.local" + path, content=json.dumps(body).encode()))
    raw = (await response.aread()).decode()
    headers = {k.lower(): v for k, v in response.headers.items()}
    if not headers.get("content-type", "").startswith("text/event-stream"):
        return Answer(response.status_code, headers, json=json.loads(raw))
    data = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    return Answer(response.status_code, headers, [json.loads(d) for d in data if d != "[DONE]"],
                  done="[DONE]" in data)


def gamma_transport() -> ScriptedTransport:
    return ScriptedTransport(ScriptedGamma())


def responses_body(steps: list[dict[str, Any]], model: str = "gpt-5-mini", **extra: Any) -> dict[str, Any]:
    """A first agent call of a `script:` prompt (the message_user tool present, as the runtime sends)."""
    return {"model": model, "instructions": "You are Gamma.", "stream": True, "store": False,
            "input": [{"role": "user", "content": "script:" + json.dumps(steps)}],
            "tools": [{"type": "function", "name": "message_user", "parameters": {"type": "object"}, "strict": False}],
            "include": ["reasoning.encrypted_content"], **extra}


def chat_body(steps: list[dict[str, Any]], model: str = "gpt-5-mini", **extra: Any) -> dict[str, Any]:
    return {"model": model, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": "You are Gamma."},
                         {"role": "user", "content": "script:" + json.dumps(steps)}],
            "tools": [{"type": "function", "function": {"name": "message_user", "parameters": {"type": "object"}}}],
            **extra}
