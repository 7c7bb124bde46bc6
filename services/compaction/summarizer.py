"""Summaries through the model: `openai.AsyncOpenAI`, the scripted summarizer when offline.

A history summary and, for a turn cut in the middle, a turn-prefix summary run in parallel and are
joined like Pi does. File tracking is appended by the caller.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

import httpx
from openai import AsyncOpenAI
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.compaction_rules import SummarySpan
from shared.contracts.transcript import TranscriptEntry
from shared.model import ScriptedTransport, openai_client
from shared.settings import Settings

from .prompts import (
    NO_PRIOR_HISTORY,
    SPLIT_TURN_SEPARATOR,
    SUMMARIZATION_SYSTEM_PROMPT,
    summary_prompt,
    turn_prefix_prompt,
)
from .scripted import scripted_summarizer
from .serialize import serialize_entries


class SummaryError(RuntimeError):
    """The model answered, but not with a usable summary."""


class ScriptedKnobs(BaseSettings):
    """Offline only: model latency and failures of the scripted summarizer, for fault tests and the
    benchmark (a real model is slow and sometimes down; the scripted one should be able to be too)."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)
    delay_s: float = Field(0.0, validation_alias="GAMMA_COMPACTION_SCRIPTED_DELAY_S")
    failures: int = Field(0, validation_alias="GAMMA_COMPACTION_SCRIPTED_FAILURES")


class _KnobbedTransport(ScriptedTransport):
    def __init__(self, knobs: ScriptedKnobs) -> None:
        super().__init__(scripted_summarizer)
        self._delay = knobs.delay_s
        self._failures_left = knobs.failures

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._delay > 0:
            await asyncio.sleep(self._delay)
        if self._failures_left > 0:
            self._failures_left -= 1
            return httpx.Response(503, json={"error": {"message": "scripted summarizer unavailable",
                                                       "type": "server_error", "code": "unavailable"}})
        return await super().handle_async_request(request)


def make_client(settings: Settings, knobs: ScriptedKnobs | None = None) -> AsyncOpenAI:
    knobs = knobs or ScriptedKnobs()
    if settings.openai_api_key or (knobs.delay_s <= 0 and knobs.failures <= 0):
        return openai_client(settings, scripted=scripted_summarizer)
    http = httpx.AsyncClient(transport=_KnobbedTransport(knobs), base_url="http://scripted.local/v1")
    return AsyncOpenAI(api_key="scripted", base_url="http://scripted.local/v1", http_client=http, max_retries=0)


@dataclass
class Summarizer:
    client: AsyncOpenAI
    model: str
    api: Literal["responses", "chat"] = "chat"  # the server's API (GAMMA_MODEL_API): one plain call

    async def complete(self, prompt: str, max_tokens: int, model: str | None = None) -> str:
        if self.api == "responses":
            return await self._respond(prompt, max_tokens, model)
        response = await self.client.chat.completions.create(
            model=model or self.model,
            messages=[
                {"role": "system", "content": SUMMARIZATION_SYSTEM_PROMPT},
                {"role": "user", "content": prompt},
            ],
            max_completion_tokens=max(256, max_tokens),
        )
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice else ""
        if not text.strip():
            reason = choice.finish_reason if choice else "no choices"
            raise SummaryError(f"the model returned an empty summary (finish_reason={reason})")
        return text.strip()

    async def _respond(self, prompt: str, max_tokens: int, model: str | None) -> str:
        response = await self.client.responses.create(
            model=model or self.model,
            instructions=SUMMARIZATION_SYSTEM_PROMPT,
            input=[{"role": "user", "content": prompt}],
            max_output_tokens=max(256, max_tokens),
            store=False,
        )
        text = response.output_text
        if not text.strip():
            reason = response.incomplete_details.reason if response.incomplete_details else response.status
            raise SummaryError(f"the model returned an empty summary (status={reason})")
        return text.strip()

    async def summarize(
        self,
        span: SummarySpan,
        *,
        previous_summary: str | None,
        custom_instructions: str | None,
        reserve_tokens: int,
        model: str | None = None,
    ) -> str:
        """The summary text (without file tracking) for the entries a compaction removes."""

        async def history(entries: list[TranscriptEntry]) -> str:
            if not entries:
                return previous_summary or NO_PRIOR_HISTORY
            prompt = summary_prompt(serialize_entries(entries), previous_summary, custom_instructions)
            return await self.complete(prompt, int(0.8 * reserve_tokens), model)

        if not span.turn_prefix:
            return await history(span.history)
        if not span.history:
            # One long turn and nothing before it: unlike Pi ("No prior history." + a prefix summary)
            # the prefix gets the full structured summary, so every summary has the same sections.
            return await history(span.turn_prefix)
        prefix_prompt = turn_prefix_prompt(serialize_entries(span.turn_prefix))
        main, prefix = await asyncio.gather(history(span.history), self.complete(prefix_prompt, int(0.5 * reserve_tokens), model))
        return f"{main}{SPLIT_TURN_SEPARATOR}{prefix}"
