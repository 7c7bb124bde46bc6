"""Summaries through the model: `openai.AsyncOpenAI` from shared/model.py's factory.

A history summary and, for a turn cut in the middle, a turn-prefix summary run in parallel and are
joined like Pi does. File tracking is appended by the caller.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from openai import AsyncOpenAI

from shared.contracts.transcript import TranscriptEntry
from shared.summary_rules import SummarySpan

from .prompts import (
    NO_PRIOR_HISTORY,
    SPLIT_TURN_SEPARATOR,
    SUMMARIZATION_SYSTEM_PROMPT,
    summary_prompt,
    turn_prefix_prompt,
)
from .serialize import serialize_entries


class SummaryError(RuntimeError):
    """The model answered, but not with a usable summary."""


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
