"""Gamma documents (`sessions/{sid}/documents/{doc}.json`): decks of cards."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Card(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=128)


class Deck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = ""
    theme: dict[str, Any] | str = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    assets: list[dict[str, Any]] = Field(default_factory=list)
    cards: list[Card] = Field(default_factory=list)


class StoredDeck(Deck):
    revision: int = 0


def merge_cards(base: Deck, patch: dict[str, Any]) -> Deck:
    """PATCH semantics: top-level fields replace; cards merge by id (new ids append, `_delete` removes)."""
    data = base.model_dump()
    for key in ("title", "theme", "metadata", "assets"):
        if key in patch:
            data[key] = patch[key]
    if "cards" in patch:
        cards = {c["id"]: c for c in data["cards"]}
        order = [c["id"] for c in data["cards"]]
        for card in patch["cards"]:
            cid = card.get("id") if isinstance(card, dict) else None
            if not isinstance(cid, str):
                raise ValueError("every patched card needs a string id")
            if card.get("_delete"):
                cards.pop(cid, None)
                order = [o for o in order if o != cid]
                continue
            if cid in cards:
                cards[cid] = {**cards[cid], **card}
            else:
                cards[cid] = card
                order.append(cid)
        if "order" in patch:
            wanted = [o for o in patch["order"] if o in cards]
            order = wanted + [o for o in order if o not in wanted]
        data["cards"] = [cards[o] for o in order]
    return Deck.model_validate(data)
