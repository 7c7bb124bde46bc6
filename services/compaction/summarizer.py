"""Summaries through the model: `openai.AsyncOpenAI` from shared/serving/model.py's factory.

A history summary and, for a turn cut in the middle, a turn-prefix summary run in parallel and are
joined like Pi does. File tracking is appended by the caller. Each call carries the most recent images
of the entries it summarizes as image parts (summary_images.py), read from the session's `.images/`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from openai import AsyncOpenAI

from services.compaction.prompts import (
    NO_PRIOR_HISTORY,
    SPLIT_TURN_SEPARATOR,
    SUMMARIZATION_SYSTEM_PROMPT,
    summary_prompt,
    turn_prefix_prompt,
)
from services.compaction.serialize import serialize_entries
from services.compaction.summary_images import SummaryImage, image_parts, load_summary_images, numbers
from shared.catalogue import Capabilities, Catalogue, catalogue
from shared.contracts.records.messages import Usage
from shared.contracts.records.spend import Attempt, UsageRow
from shared.contracts.records.transcript import TranscriptEntry
from shared.costs.usage import chat_usage, responses_usage
from shared.history.summary_rules import SummarySpan


def _cap(max_tokens: int, caps: Capabilities) -> int:
    """At least 256 (reasoning counts against it), at most the model's own maximum (reference §2.2)."""
    wanted = max(256, max_tokens)
    return min(wanted, caps.max_output) if caps.max_output is not None else wanted


def usage_row(model: str, usage: Usage, attempt: Attempt) -> UsageRow:
    return UsageRow(model=model, kind="compaction", attempt=attempt, input_tokens=usage.input,
                    cached_tokens=usage.cache_read, cache_write_tokens=usage.cache_write, output_tokens=usage.output,
                    reasoning_tokens=usage.reasoning)


def _raw_usage(response: Any) -> Any:
    """The reply's usage as a dict (None when the server sent none): read as leniently as the streams do."""
    usage: Any = getattr(response, "usage", None)
    dump = getattr(usage, "model_dump", None)
    return dump() if callable(dump) else usage


def _count(rows: list[UsageRow] | None, row: UsageRow) -> None:
    if rows is not None:
        rows.append(row)


class SummaryError(RuntimeError):
    """The model answered, but not with a usable summary."""


@dataclass
class Summarizer:
    client: AsyncOpenAI
    model: str
    api: Literal["responses", "chat"] = "chat"  # the server's API (GAMMA_MODEL_API): one plain call
    max_images: int = 4  # image parts per call (GAMMA_COMPACTION_SUMMARY_IMAGES)
    # What each model takes (docs/models.md): the call's API, roles, images and output cap follow it.
    models: Catalogue = field(default_factory=catalogue)

    def _user_content(self, prompt: str, images: list[SummaryImage], api: Literal["responses", "chat"]) -> str | list[Any]:
        if not images:
            return prompt
        text = "input_text" if api == "responses" else "text"
        return [*image_parts(images, api), {"type": text, "text": prompt}]

    async def complete(self, prompt: str, max_tokens: int, model: str | None = None,
                       images: list[SummaryImage] | None = None, rows: list[UsageRow] | None = None) -> str:
        """The summary text; each call's usage goes to `rows` (docs/costs.md), a failed one marked so."""
        name = model or self.model
        caps = self.models.resolve(name).caps
        api = self.api if self.api in caps.apis else caps.apis[0]  # a Responses-only model never on Chat
        content = self._user_content(prompt, images if images and caps.vision else [], api)
        if api == "responses":
            return await self._respond(content, _cap(max_tokens, caps), name, rows)
        # o1-mini and o1-preview take neither system nor developer (reference §2.2): the prompt goes as user text.
        system: Any = {"role": "system" if caps.developer_role else "user", "content": SUMMARIZATION_SYSTEM_PROMPT}
        response = await self.client.chat.completions.create(
            model=name,
            messages=[system, {"role": "user", "content": content}],
            max_completion_tokens=_cap(max_tokens, caps),
        )
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice else ""
        _count(rows, usage_row(name, chat_usage(_raw_usage(response)),
                               "ok" if text.strip() else "failed"))
        if not text.strip():
            reason = choice.finish_reason if choice else "no choices"
            raise SummaryError(f"the model returned an empty summary (finish_reason={reason})")
        return text.strip()

    async def _respond(self, content: str | list[Any], max_tokens: int, model: str,
                       rows: list[UsageRow] | None = None) -> str:
        response = await self.client.responses.create(
            model=model,
            instructions=SUMMARIZATION_SYSTEM_PROMPT,
            input=[{"role": "user", "content": content}],
            max_output_tokens=max_tokens,
            store=False,
        )
        text = response.output_text
        _count(rows, usage_row(model, responses_usage(_raw_usage(response)),
                               "ok" if text.strip() else "failed"))
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
        session_root: Path | None = None,
        rows: list[UsageRow] | None = None,
    ) -> str:
        """The summary text (without file tracking) for the entries a compaction removes; with
        `session_root`, their recent images go along as image parts."""

        async def images_of(entries: list[TranscriptEntry]) -> list[SummaryImage]:
            if session_root is None or self.max_images <= 0:
                return []
            return await asyncio.to_thread(load_summary_images, session_root, entries, self.max_images)

        async def history(entries: list[TranscriptEntry]) -> str:
            if not entries:
                return previous_summary or NO_PRIOR_HISTORY
            images = await images_of(entries)
            prompt = summary_prompt(serialize_entries(entries, numbers(images)), previous_summary, custom_instructions)
            return await self.complete(prompt, int(0.8 * reserve_tokens), model, images, rows)

        async def prefix(entries: list[TranscriptEntry]) -> str:
            images = await images_of(entries)
            prompt = turn_prefix_prompt(serialize_entries(entries, numbers(images)))
            return await self.complete(prompt, int(0.5 * reserve_tokens), model, images, rows)

        if not span.turn_prefix:
            return await history(span.history)
        if not span.history:
            # One long turn and nothing before it: unlike Pi ("No prior history." + a prefix summary)
            # the prefix gets the full structured summary, so every summary has the same sections.
            return await history(span.turn_prefix)
        main, turn = await asyncio.gather(history(span.history), prefix(span.turn_prefix))
        return f"{main}{SPLIT_TURN_SEPARATOR}{turn}"
