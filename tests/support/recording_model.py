"""A stand-in OpenAI-compatible model server that records every request it receives, byte for byte.

The services run as real processes with `OPENAI_API_KEY`, `OPENAI_BASE_URL` (and `GAMMA_MODEL_API`)
from `RecordingModel.env()`, so their real `openai` clients send real HTTP here: a test asserts on
what a provider would actually read (the Responses `input` items or the Chat Completions
`messages`), not on the runtime's in-process bookkeeping. Agent calls are answered by the runtime's
own scripted model (`scripted/gamma.py`: a `script:` prompt plays its steps back, other
prompts get its usual behaviour); summarization calls (recognized by their system prompt) by the
compaction service's scripted summarizer. Serves POST /v1/responses and /v1/chat/completions.

    model = RecordingModel().start()
    stack = Stack(..., env_overrides=model.env())
    ...
    assert "<system_guidance>" not in model.agent_text()
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from fastapi import FastAPI, Request, Response

from scripted import responses as scripted_responses
from scripted.gamma import ScriptedGamma
from scripted.strict import Strictness
from scripted.summarizer import scripted_summarizer
from scripted.transport import ScriptedTransport
from services.compaction.prompts import SUMMARIZATION_SYSTEM_PROMPT
from services.runtime.skillset.paths import skills_dir
from services.runtime.skillset.skills import load_skills
from tests.support.ports import free_port
from tests.support.threaded_server import ThreadedServer


@dataclass(frozen=True)
class Recorded:
    api: Literal["responses", "chat"]
    body: dict[str, Any]
    summary: bool  # a summarization call (the compaction service), not an agent turn

    def text(self) -> str:
        """Every string the model reads in this request, in order (instructions, messages, items)."""
        return "\n".join(_strings(self.body.get("instructions")) + _strings(self.body.get("input"))
                         + _strings(self.body.get("messages")))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in ("type", "role", "id", "call_id", "status")
                for s in _strings(v)]
    return []


@dataclass
class RecordingModel:
    api: Literal["responses", "chat"] = "responses"
    port: int = field(default_factory=free_port)
    recorded: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _http: ThreadedServer | None = None
    # the strict double's rule groups (GAMMA_SCRIPTED_STRICT when None); a test standing for a
    # non-OpenAI server's model drops `models` (the OpenAI rule table does not know its names)
    strict: Strictness | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        return {"OPENAI_API_KEY": "recording-model", "OPENAI_BASE_URL": self.base_url, "GAMMA_MODEL_API": self.api}

    def agent_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.recorded if not r.summary]

    def summary_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.recorded if r.summary]

    def agent_text(self) -> str:
        return "\n".join(r.text() for r in self.agent_requests())

    def app(self) -> FastAPI:
        app = FastAPI()
        agent = ScriptedTransport(ScriptedGamma(load_skills(skills_dir())), strict=self.strict)
        summarize = ScriptedTransport(scripted_summarizer, strict=self.strict)

        async def answer(request: Request, api: Literal["responses", "chat"]) -> Response:
            raw = await request.body()
            body = json.loads(raw)
            chat = scripted_responses.to_chat(body) if api == "responses" else body
            system = next((m.get("content") for m in chat.get("messages", []) if m.get("role") == "system"), "")
            is_summary = system == SUMMARIZATION_SYSTEM_PROMPT
            with self._lock:
                self.recorded.append(Recorded(api=api, body=body, summary=is_summary))
            transport = summarize if is_summary else agent
            # the strict double (scripted/strict/) checks the request as the real API would
            out = await transport.handle_async_request(httpx2.Request("POST", str(request.url), content=raw))
            headers = {k: v for k, v in out.headers.items()
                       if k.lower() in ("x-request-id", "retry-after", "retry-after-ms", "x-should-retry")
                       or k.lower().startswith("x-ratelimit-")}
            return Response(content=await out.aread(), status_code=out.status_code, headers=headers,
                            media_type=out.headers.get("content-type", "application/json"))

        @app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            return await answer(request, "responses")

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> Response:
            return await answer(request, "chat")

        return app

    def start(self) -> RecordingModel:
        self._http = ThreadedServer(self.app(), self.port)
        self._http.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()

