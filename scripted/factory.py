"""The model factory the dev/test launchers wire (GAMMA_MODEL_FACTORY=scripted.factory:model_factory):
the real OpenAI client when OPENAI_API_KEY is set, else the scripted model behind the same client
(README "Models"): the agent's ScriptedGamma for the runtime, the scripted summarizer for compaction."""

from __future__ import annotations

import asyncio

import httpx2
from openai import AsyncOpenAI

from scripted import FACTORY
from scripted.gamma import ScriptedGamma
from scripted.pacing import Timing
from scripted.settings import ScriptedSettings
from scripted.summarizer import scripted_summarizer
from scripted.transport import ScriptedTransport, scripted_client
from services.runtime.skillset.paths import skills_dir
from services.runtime.skillset.skills import load_skills
from shared.serving.model import RETRIES as REAL_RETRIES
from shared.serving.model import ModelRole, openai_client
from shared.settings import Settings

SPEC = FACTORY


def model_factory(settings: Settings, role: ModelRole) -> AsyncOpenAI:
    if settings.models.openai_api_key:
        return openai_client(settings, REAL_RETRIES[role])
    knobs = ScriptedSettings()
    if role == "summarizer":
        return scripted_client(KnobbedTransport(knobs))
    return scripted_client(ScriptedGamma(load_skills(skills_dir(settings))), Timing.from_settings(knobs))


class KnobbedTransport(ScriptedTransport):
    """The scripted summarizer, slow or failing on request (GAMMA_COMPACTION_SCRIPTED_*): a real model is
    slow and sometimes down, and fault tests and the benchmark need the scripted one to be too."""

    def __init__(self, knobs: ScriptedSettings) -> None:
        super().__init__(scripted_summarizer)
        self._delay = knobs.compaction_delay_s
        self._failures_left = knobs.compaction_failures

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._delay > 0:
            await asyncio.sleep(self._delay)
        if self._failures_left > 0:
            self._failures_left -= 1
            return httpx2.Response(503, json={"error": {"message": "scripted summarizer unavailable",
                                                       "type": "server_error", "code": "unavailable"}})
        return await super().handle_async_request(request)
