"""One digest per ref, from the revision the agent saw to the current one (docs/architecture.md "The digest").

Several edits between two agent reads collapse into one diff of seen -> current content; the clients'
own digest texts (X-Gamma-Digest) come first when given; user changes an agent write landed on top of
(`Carry`) are kept. Pure functions over a `RefState` and the two contents.
"""

from __future__ import annotations

import json
from typing import Any

from services.digest.deck_diff import DIRTY_TEXT as DECK_DIRTY
from services.digest.deck_diff import deck_digest, new_deck_digest
from services.digest.file_diff import DIRTY_TEXT as FILE_DIRTY
from services.digest.file_diff import file_digest, new_file_digest
from services.digest.revisions import RefState
from shared.contracts.streams.artifacts import Actor
from shared.trust.trusted_blocks import Part, Trusted, fragment, lines, quoted

# A digest whose edits cancel out: the content is again what the agent last saw.
NO_NET_CHANGE = "Saved again with no net change: the content is the same as at from_revision."

_ACTOR_NAMES = {"user": "the user", "service": "a background service", "agent": "the agent"}


def _deck(content: bytes | None) -> dict[str, Any] | None:
    if content is None:
        return None
    try:
        value = json.loads(content)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _author(state: RefState) -> Actor:
    """Whose text a file's quoted lines are: the one actor that changed it, else the user (the least
    authority of those who may have)."""
    actors = {n.actor for n in state.notes.values()}
    return actors.pop() if len(actors) == 1 else "user"


def computed_digest(state: RefState, seen: bytes | None, current: bytes | None) -> Part | None:
    """The diff of seen -> current; None when the contents are equal."""
    old = seen if state.seen_known else None
    what = "deck" if state.kind == "document" else "file"
    if state.deleted and old is None and any(n.created for n in state.notes.values()):
        # A digest of its creation may be out already: this one replaces it (one per ref).
        return f"The {what} was added and deleted again before you saw it: it does not exist now."
    if state.deleted:
        return f"The {what} was deleted."
    if old is None and any(n.created for n in state.notes.values()):
        # New since the agent's view (an upload, a new deck): what it is, not a diff from nothing.
        return new_deck_digest(_deck(current)) if state.kind == "document" else new_file_digest(current, _author(state))
    if current is None:  # the producer sent no content: all we know is that it changed
        return DECK_DIRTY if state.kind == "document" else FILE_DIRTY
    result: tuple[str, Part] | None
    if state.kind == "document":
        result = deck_digest(_deck(old), _deck(current))
    else:
        result = file_digest(old, current, _author(state))
    return None if result is None else result[1]


def actors_line(state: RefState) -> str:
    actors = sorted({n.actor for n in state.notes.values()} or {"user"})
    names = [_ACTOR_NAMES[a] for a in actors]
    return "Changed by " + " and ".join(names) + "."


def compose(state: RefState, seen: bytes | None, current: bytes | None) -> Trusted | None:
    """The digest body, or None when the agent already has the current content.

    The clients' own texts are quoted as what their author said, never as the harness's words
    (docs/architecture.md "Trust boundaries"); the carry is a body this function rendered earlier."""
    parts: list[Part] = []
    if state.carry is not None:
        parts.append(Trusted(state.carry.text))
    notes = [n for _, n in sorted(state.notes.items())]
    said: dict[str, Actor] = {}
    for n in notes:
        if n.digest and n.digest.strip():
            said.setdefault(n.digest.strip(), n.actor)
    computed = computed_digest(state, seen, current) if notes else None
    if said:
        parts.append(fragment(lines(*[p for text, actor in said.items() for p in (
            f"{_ACTOR_NAMES[actor][0].upper()}{_ACTOR_NAMES[actor][1:]} described the change:", quoted(actor, text))])))
        if computed is not None and not all(n.digest for n in notes):
            parts.append(computed)  # some edit came without the client's text: say what it did
    elif computed is not None:
        parts.append(computed)
    if not parts:
        return None
    if notes:
        parts.insert(0 if state.carry is None else 1, actors_line(state))
    return fragment(lines(*parts, sep="\n\n"))

