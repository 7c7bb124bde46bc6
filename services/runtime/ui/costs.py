"""The UI state's cost records (seed: "The UI projection of asynchronous cost records"): one record
per model, filled from the usage every assistant message of the transcript records and priced by the
configured table (shared/catalogue/pricing.py).

The transcript is the authoritative source, so the records are a projection: rebuilt from the whole
active branch (a compaction removes nothing from it, so the records keep what came before it) after
each model reply while a run goes on (at most every `LIVE_INTERVAL_S`, docs/architecture.md "Viewable
files and cost records"), after each run and at a wake (a client's edit of `costs` does not survive
either). Pure apart from `CostProjection`, which changes the UI document only when the records changed.

The change goes to the clients (its `ui_update` event and the live `GET /ui`) but not to `state.json`
at once: the records are a projection of the transcript, rebuilt at every wake, so a crash that loses
them on disk loses nothing. The document is written whole by its next write (a client's edit, a tool,
a form) or at the session's close (liveui.py `persist_at_close`). Writing it after each reply and run
cost an atomic write (two fsyncs) and made the next snapshot store it (three more), even after a run
that wrote no file (docs/architecture.md "Viewable files and cost records").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from services.runtime.live.lease import LeaseLost
from services.runtime.ui.liveui import UiHost
from shared.catalogue.pricing import Pricer, cost_usd
from shared.contracts.records.messages import AssistantMessage
from shared.contracts.records.transcript import MessageEntry, TranscriptEntry
from shared.history.transcript_index import Usage

log = structlog.get_logger()

MAX_RECORDS = 50  # distinct models in one session's records; the rest are summed into the last
LIVE_INTERVAL_S = 2.0  # the UI document is written at most this often for replies during a run


@dataclass
class ModelUsage:
    requests: int = 0
    input: int = 0
    cached: int = 0
    written: int = 0  # input tokens written to the provider's cache (priced apart from GPT-5.6 on)
    output: int = 0
    models: set[str] = field(default_factory=set)


def usage_by_model(entries: Iterable[TranscriptEntry], before: Usage | None = None) -> dict[str, ModelUsage]:
    """`before`: the branch's usage before the live window (docs/architecture.md "How a session wakes")."""
    out: dict[str, ModelUsage] = {}
    for model, (requests, inp, cached, written, output) in (before or {}).items():
        out[model] = ModelUsage(requests, inp, cached, written, output)
    for e in entries:
        if isinstance(e, MessageEntry) and isinstance(e.message, AssistantMessage):
            m = e.message
            u = out.setdefault(m.model or "unknown", ModelUsage())
            u.requests += 1
            u.input += m.usage.input
            u.cached += m.usage.cache_read
            u.written += m.usage.cache_write
            u.output += m.usage.output
    return out


def cost_records(entries: Sequence[TranscriptEntry], prices: Pricer, before: Usage | None = None) -> list[dict[str, Any]]:
    """One `CostRecord` (shared/contracts/records/ui.py) per model, in first-use order: `settled` with its
    amount in USD when the model has a price, else `pending` with amount 0."""
    records = []
    for model, u in list(usage_by_model(entries, before).items())[:MAX_RECORDS]:
        price = prices.price(model)
        label = (f"{model}: {u.requests} model requests, {u.input} input tokens ({u.cached} cached), "
                 f"{u.output} output tokens" + ("" if price else "; no price configured"))
        amount = round(cost_usd(price, u.input, u.cached, u.output, u.written), 6) if price else 0.0
        records.append({"id": f"model:{model}"[:200], "label": label, "amount": amount,
                        "status": "settled" if price else "pending"})
    return records


class CostProjection:
    def __init__(self, entries: Any, ui: UiHost, prices: Pricer, before: Any = dict,
                 clock: Any = time.monotonic) -> None:
        self.entries = entries  # () -> the transcript's entries (its window)
        self.before = before  # () -> the branch's usage before the window
        self.ui = ui
        self.prices = prices
        self.clock = clock
        self._last = float("-inf")

    async def refresh_live(self) -> None:
        """After a model reply: refreshed unless the last live refresh is recent (the run's end catches
        up). Only live refreshes count: the wake's own refresh must not hide the run's first replies."""
        if self.clock() - self._last >= LIVE_INTERVAL_S:
            self._last = self.clock()
            await self.refresh_quietly()

    async def refresh_quietly(self) -> None:
        """After a run and at a wake: a refused or failed projection is logged, never the run's failure
        (the next refresh rebuilds it from the transcript)."""
        try:
            await self.refresh()
        except LeaseLost:
            return
        except Exception:  # noqa: BLE001 - a projection must not break the run that triggered it
            log.exception("cost_records_failed")

    async def refresh(self) -> None:
        records = cost_records(self.entries(), self.prices, self.before())
        doc = await self.ui.document()
        if doc.snapshot().get("costs") == records:
            return
        update = await doc.set_costs(records)
        await self.ui.publish_ui(update)  # not persisted here: see the module's docstring
