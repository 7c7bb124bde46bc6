"""Deck digests (docs/architecture.md "The digest": decks by card, order, theme, assets, metadata). Pure functions.

Compares the deck the agent last saw with the current deck and says what changed at the most precise
level it can state reliably:
- inline: every change is small and fully described ('On card_3, title changed from "A" to "B".');
- scoped: the changed scopes only, for the agent to read ('Changed scope: card_3, card_5.');
- dirty: the old deck is unknown or the change is huge ('The deck changed. Read the current deck.').
Scopes are card ids, card order, theme, shared assets and metadata (title and metadata fields).

Card ids, keys and values are the deck author's: each is written with shared/trust/trusted_blocks.py's
`token` (an id or key) or `json_value` (a value), on one line, so none can start a line of the
developer-role block or pass for the harness's words (docs/architecture.md "Trust boundaries").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from shared.trust.trusted_blocks import json_value, token

Level = Literal["inline", "scoped", "dirty"]

INLINE_MAX_CHARS = 1500  # total detail text an inline digest may carry
VALUE_MAX_CHARS = 300  # one quoted value; longer values make that change "scoped"
DIRTY_MAX_SCOPES = 30  # more changed scopes than this: read the whole deck
ORDER_MAX_CARDS = 40  # list the new order only for decks up to this size

SCOPE_ORDER = "card order"
SCOPE_THEME = "theme"
SCOPE_ASSETS = "shared assets"
SCOPE_METADATA = "metadata"
DIRTY_TEXT = "The deck changed. Read the current deck."


@dataclass
class DeckDiff:
    scopes: list[str] = field(default_factory=list)
    changed_cards: list[str] = field(default_factory=list)
    details: dict[str, list[str]] = field(default_factory=dict)  # scope -> sentences
    complete: bool = True  # False when some change could not be stated in full

    def add(self, scope: str, sentence: str | None, *, card: bool = False) -> None:
        if scope not in self.scopes:
            self.scopes.append(scope)
            if card:
                self.changed_cards.append(scope)
        if sentence is None:
            self.complete = False
        else:
            self.details.setdefault(scope, []).append(sentence)

    @property
    def empty(self) -> bool:
        return not self.scopes


def _fmt(value: Any) -> str | None:
    """A value as the agent should read it, or None when too long to state."""
    text = json_value(value)
    return text if len(text) <= VALUE_MAX_CHARS else None


def _change_sentence(name: str, old: Any, new: Any, missing: object) -> str | None:
    if old is missing:
        v = _fmt(new)
        return f"{name} set to {v}" if v is not None else None
    if new is missing:
        v = _fmt(old)
        return f"{name} removed (was {v})" if v is not None else None
    a, b = _fmt(old), _fmt(new)
    if a is None or b is None:
        return None
    return f"{name} changed from {a} to {b}"


_MISSING = object()


def _cards(deck: dict[str, Any]) -> list[dict[str, Any]]:
    cards = deck.get("cards") or []
    return [c for c in cards if isinstance(c, dict) and isinstance(c.get("id"), str)]


def _diff_cards(old: dict[str, Any], new: dict[str, Any], out: DeckDiff) -> None:
    old_cards = {c["id"]: c for c in _cards(old)}
    new_list = _cards(new)
    new_cards = {c["id"]: c for c in new_list}
    for pos, card in enumerate(new_list, start=1):
        cid = card["id"]
        name = token(cid)
        if cid not in old_cards:
            body = {k: v for k, v in card.items() if k != "id"}
            v = _fmt(body)
            out.add(name, f"{name} was added at position {pos} with {v}" if v is not None else None, card=True)
            continue
        before = old_cards[cid]
        for key in sorted((set(before) | set(card)) - {"id"}):
            a, b = before.get(key, _MISSING), card.get(key, _MISSING)
            if a != b:
                out.add(name, _change_sentence(token(key), a, b, _MISSING), card=True)
    for cid in old_cards:
        if cid not in new_cards:
            out.add(token(cid), f"{token(cid)} was removed", card=True)
    old_order = [c["id"] for c in _cards(old) if c["id"] in new_cards]
    new_order = [c["id"] for c in new_list if c["id"] in old_cards]
    if old_order != new_order:
        if len(new_list) <= ORDER_MAX_CARDS:
            out.add(SCOPE_ORDER, "the card order is now " + ", ".join(token(c["id"]) for c in new_list))
        else:
            out.add(SCOPE_ORDER, None)


def _asset_key(asset: Any, index: int) -> str:
    if isinstance(asset, dict):
        for k in ("id", "src", "url", "name"):
            if isinstance(asset.get(k), str):
                return token(str(asset[k]))
    return f"#{index}"


def _diff_assets(old: list[Any], new: list[Any], out: DeckDiff) -> None:
    if old == new:
        return
    before = {_asset_key(a, i): a for i, a in enumerate(old)}
    after = {_asset_key(a, i): a for i, a in enumerate(new)}
    for key, asset in after.items():
        if key not in before:
            v = _fmt(asset)
            out.add(SCOPE_ASSETS, f"asset {key} was added: {v}" if v is not None else None)
        elif before[key] != asset:
            out.add(SCOPE_ASSETS, _change_sentence(f"asset {key}", before[key], asset, _MISSING))
    for key in before:
        if key not in after:
            out.add(SCOPE_ASSETS, f"asset {key} was removed")
    if list(before) != list(after) and set(before) == set(after):
        out.add(SCOPE_ASSETS, "the asset order is now " + ", ".join(after))


def diff_decks(old: dict[str, Any], new: dict[str, Any]) -> DeckDiff:
    out = DeckDiff()
    _diff_cards(old, new, out)
    if old.get("theme", {}) != new.get("theme", {}):
        out.add(SCOPE_THEME, _change_sentence("the theme", old.get("theme", {}), new.get("theme", {}), _MISSING))
    _diff_assets(list(old.get("assets") or []), list(new.get("assets") or []), out)
    if old.get("title", "") != new.get("title", ""):
        out.add(SCOPE_METADATA, _change_sentence("the deck title", old.get("title", ""), new.get("title", ""),
                                                 _MISSING))
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    for key in sorted(set(old_meta) | set(new_meta)):
        a, b = old_meta.get(key, _MISSING), new_meta.get(key, _MISSING)
        if a != b:
            out.add(SCOPE_METADATA, _change_sentence(f"metadata {token(str(key))}", a, b, _MISSING))
    return out


def _cap(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


def _closing(diff: DeckDiff) -> str:
    return "All other cards are unchanged." if diff.changed_cards else "No card changed."


def render(diff: DeckDiff) -> tuple[Level, str]:
    """The digest text for a non-empty diff."""
    if len(diff.scopes) > DIRTY_MAX_SCOPES:
        return "dirty", DIRTY_TEXT
    scope_line = "Changed scope: " + ", ".join(diff.scopes) + "."
    lines = [s for scope in diff.scopes for s in diff.details.get(scope, [])]
    if diff.complete and sum(len(s) for s in lines) <= INLINE_MAX_CHARS:
        if len(lines) == 1 and diff.changed_cards == diff.scopes:
            body = f"On {diff.scopes[0]}, {lines[0]}."
        else:
            blocks = []
            for scope in diff.scopes:
                items = "\n".join(f"- {_cap(s)}." for s in diff.details.get(scope, []))
                blocks.append(f"{scope}:\n{items}")
            body = "\n\n".join(blocks)
        return "inline", f"{scope_line}\n\n{body}\n\n{_closing(diff)}"
    return "scoped", f"{scope_line}\nRead the changed parts before you edit them. {_closing(diff)}"


def deck_digest(old: dict[str, Any] | None, new: dict[str, Any] | None) -> tuple[Level, str] | None:
    """None when nothing changed; a dirty marker when the old deck is unknown."""
    if new is None:
        return "dirty", "The deck was deleted."
    if old is None:
        return "dirty", DIRTY_TEXT
    diff = diff_decks(old, new)
    if diff.empty:
        return None
    return render(diff)


def new_deck_digest(deck: dict[str, Any] | None) -> str:
    """A deck that did not exist before: its title and card count (the agent reads the rest)."""
    if deck is None:
        return "A new deck was created. Read the current deck."
    cards = deck.get("cards")
    count = len(cards) if isinstance(cards, list) else 0
    title = deck.get("title")
    named = f" {_fmt(title)}" if isinstance(title, str) and title and _fmt(title) else ""
    return f"A new deck{named} was created with {count} cards. Read the current deck."
