"""Cost records (services/runtime/ui/costs.py, shared/catalogue/pricing.py): the usage the transcript records,
priced per model by the configured table."""

from __future__ import annotations

import pytest

from services.runtime.ui.costs import CostProjection, cost_records
from services.runtime.ui.uistate import UiDoc
from shared.catalogue import Catalogue
from shared.catalogue.pricing import Pricer, parse_prices
from shared.contracts.records.messages import AssistantMessage, Usage
from shared.contracts.records.transcript import MessageEntry
from shared.contracts.records.ui import SessionUIState
from shared.ui.uirules import default_snapshot

CATALOGUE = Pricer(Catalogue.load())


def reply(i: int, model: str, inp: int, cached: int, out: int) -> MessageEntry:
    return MessageEntry(id=f"m{i}", timestamp="2026-01-01T00:00:00.000Z",
                        message=AssistantMessage(model=model, usage=Usage(input=inp, cache_read=cached, output=out)))


def test_records_sum_the_usage_per_model_and_price_it() -> None:
    entries = [reply(1, "gpt-5-mini", 10_000, 4_000, 500), reply(2, "gpt-5-mini-2025-08-07", 2_000, 0, 100),
               reply(3, "local-llama", 1_000, 0, 10)]
    records = cost_records(entries, CATALOGUE)
    assert [r["id"] for r in records] == ["model:gpt-5-mini", "model:gpt-5-mini-2025-08-07", "model:local-llama"]
    # 6,000 fresh input at 0.25, 4,000 cached at 0.025, 500 output at 2.0 (USD per million tokens)
    assert records[0]["amount"] == pytest.approx((6_000 * 0.25 + 4_000 * 0.025 + 500 * 2.0) / 1e6)
    assert records[0]["status"] == "settled" and "1 model requests, 10000 input tokens (4000 cached)" in records[0]["label"]
    assert records[1]["amount"] == pytest.approx((2_000 * 0.25 + 100 * 2.0) / 1e6)  # a dated snapshot: its family
    assert records[2] == {"id": "model:local-llama", "amount": 0.0, "status": "pending",
                          "label": "local-llama: 1 model requests, 1000 input tokens (0 cached), 10 output tokens; "
                                   "no price configured"}
    SessionUIState.model_validate({"costs": records})  # valid UI state


def test_the_price_table_is_configuration() -> None:
    table = Pricer(Catalogue.load(), parse_prices('{"local-llama": {"input": 0, "cachedInput": 0, "output": 0.1}}'))
    price = table.price("local-llama")
    assert price is not None and price.output == 0.1 and table.price("gpt-5") is not None
    assert cost_records([reply(1, "local-llama", 0, 0, 1_000_000)], table)[0]["amount"] == pytest.approx(0.1)
    for bad in ('{"m": {"input": -1, "cachedInput": 0, "output": 0}}', '{"m": {"input": 1}}', "[1]", "{"):
        with pytest.raises(ValueError):
            parse_prices(bad)


class Host:
    """A UiHost (services/runtime/ui/liveui.py) that counts its writes and events."""

    def __init__(self) -> None:
        self.doc = UiDoc.from_snapshot(default_snapshot())
        self.persisted = 0
        self.published: list[bytes] = []

    async def document(self) -> UiDoc:
        return self.doc

    async def persist_ui(self) -> None:
        self.persisted += 1

    async def publish_ui(self, update: bytes) -> None:
        self.published.append(update)


async def test_a_rebuild_reaches_the_clients_and_leaves_the_disk_to_the_next_write() -> None:
    """The records are rebuilt from the transcript at every wake: a rebuild is published, not written
    (the document's next write or the close stores it), so a run's end costs no fsync nor snapshot."""
    entries = [reply(1, "gpt-5-mini", 1_000, 0, 10)]
    host = Host()
    costs = CostProjection(lambda: entries, host, CATALOGUE)
    await costs.refresh()
    assert host.doc.snapshot()["costs"][0]["id"] == "model:gpt-5-mini"
    assert len(host.published) == 1 and host.persisted == 0
    await costs.refresh()  # unchanged: nothing to send
    assert len(host.published) == 1
