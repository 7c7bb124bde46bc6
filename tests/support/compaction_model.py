"""An OpenAI-compatible model server in the test process that records every request.

The runtime and the compaction service run as real processes with `OPENAI_API_KEY` and
`OPENAI_BASE_URL` pointing here, so their real `openai` clients send real HTTP. Summarization calls
(recognized by their system prompt) are answered by the compaction service's scripted summarizer;
agent calls by the steps a test queues (a reply, an error, or a function of the request body).
Replies are rendered by `scripted.transport.ScriptedTransport`, the same wire format the offline default
uses, streamed or not.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response

from scripted.summarizer import scripted_summarizer
from scripted.transport import ScriptedTransport
from scripted.types import ScriptedError, ScriptedReply, ScriptedToolCall
from services.compaction.prompts import SUMMARIZATION_SYSTEM_PROMPT
from tests.support.ports import free_port
from tests.support.threaded_server import ThreadedServer

Step = ScriptedReply | ScriptedError | Callable[[dict[str, Any]], ScriptedReply]


def call(tool: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(name=tool, arguments=arguments)


def reply(*calls: ScriptedToolCall, content: str = "") -> ScriptedReply:
    return ScriptedReply(content=content, tool_calls=list(calls))


def done(message: str = "All done.") -> ScriptedReply:
    return reply(call("message_user", message=message, blockOnUser=True))


def system_and_tools(body: dict[str, Any]) -> str:
    """The static part of a request: system prompt and tool schemas, canonical."""
    system = [m for m in body.get("messages", []) if m.get("role") == "system"]
    return json.dumps({"system": system, "tools": body.get("tools", [])}, sort_keys=True)


def text_of(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


def conversation_of(body: dict[str, Any]) -> str:
    """The messages after the system prompt: the static prefix defines every harness tag once
    (services/runtime/prompts/blocks.txt), so a tag counted here is one the harness sent."""
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") != "system")


@dataclass
class RecordingModel:
    port: int = field(default_factory=free_port)
    steps: list[Step] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)  # agent requests, in order
    summaries: list[dict[str, Any]] = field(default_factory=list)  # summarization requests
    summary_delay_s: float = 0.0
    agent_delay_s: float = 0.0  # a model that takes time per step, so a run does not outpace compaction
    summary_failures: int = 0  # the next N summarization calls answer 503
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _http: ThreadedServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        return {"OPENAI_API_KEY": "recording-model", "OPENAI_BASE_URL": self.base_url}

    def script(self, *steps: Step) -> None:
        with self._lock:
            self.steps = list(steps)
            self.requests.clear()
            self.summaries.clear()

    def _agent(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            self.requests.append(body)
            step: Step = self.steps.pop(0) if self.steps else done()
        if isinstance(step, ScriptedError):
            raise step
        return step(body) if callable(step) else step

    def _summarize(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            self.summaries.append(body)
            if self.summary_failures > 0:
                self.summary_failures -= 1
                raise ScriptedError(503, "server_error", "the summarization model is overloaded")
        return scripted_summarizer(body)

    def app(self) -> FastAPI:
        app = FastAPI()
        agent, summarize = ScriptedTransport(self._agent), ScriptedTransport(self._summarize)

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> Response:
            raw = await request.body()
            body = json.loads(raw)
            system = next((m.get("content") for m in body.get("messages", []) if m.get("role") == "system"), "")
            is_summary = system == SUMMARIZATION_SYSTEM_PROMPT
            delay = self.summary_delay_s if is_summary else self.agent_delay_s
            if delay:
                await asyncio.sleep(delay)
            transport = summarize if is_summary else agent
            answer = await transport.handle_async_request(
                httpx.Request("POST", "http://model.local/v1/chat/completions", content=raw))
            content = await answer.aread()
            return Response(content=content, status_code=answer.status_code,
                            media_type=answer.headers.get("content-type", "application/json"))

        return app

    def start(self) -> RecordingModel:
        self._http = ThreadedServer(self.app(), self.port)
        self._http.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()
