"""OpenAI's prompt cache from GPT-5.6 on, simulated for the scripted model and the strict double
(the `breakpoints` regime: docs/cache.md; reference openai-api-rules.md §6, SDK `PromptCacheOptions`).

Matching happens only at breakpoints, never by rounding a longer prefix down: a request reads the
longest of its candidate positions (the end of each marked block and of each item, where this or an
earlier request may have written a breakpoint; the latest 80 considered) whose exact prefix some
earlier request with the same `prompt_cache_key` wrote and whose 30-minute TTL has not run out. A
request writes its implicit breakpoint (at the end of its latest user or tool message; none with
`mode: explicit`) plus its latest 3 explicit ones (4 with `mode: explicit`), each only from 1,024
tokens on. `cache_write_tokens` are the tokens written past what was read ("a longer cache write does
not bill the already cached tokens again"). The `prompt_cache_breakpoint` marker itself is not part
of the cached bytes. Tokens are estimated as 4 characters of canonical JSON, as the scripted usage is.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

MIN_TOKENS = 1024
CHARS_PER_TOKEN = 4
CONSIDERED = 80  # the latest breakpoints matching looks at (SDK PromptCacheOptions; Azure says 50)
WRITES = 4  # breakpoints one request writes: the implicit one + 3 explicit, or 4 explicit
TTL_S = 30 * 60.0  # prompt_cache_options.ttl "30m": a minimum lifetime


@dataclass
class Position:
    digest: int  # the chained hash of everything before this point
    tokens: int
    explicit: bool = False
    implicit: bool = False
    item_end: bool = False


@dataclass
class Usage:
    cached: int
    written: int


@dataclass
class _Walk:
    out: list[Position] = field(default_factory=list)
    digest: int = 0
    chars: int = 0

    def add(self, text: str) -> Position:
        self.digest = hash((self.digest, text))
        self.chars += len(text)
        pos = Position(self.digest, self.chars // CHARS_PER_TOKEN)
        self.out.append(pos)
        return pos


def _dump(x: Any) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _parts(item: dict[str, Any]) -> Iterator[tuple[str, bool]]:
    """An item's canonical text in pieces, each with whether a breakpoint marks its end."""
    content = item.get("content")
    if not isinstance(content, list):
        yield _dump(item), False
        return
    yield _dump({k: v for k, v in item.items() if k != "content"}), False
    for part in content:
        if isinstance(part, dict):
            yield _dump({k: v for k, v in part.items() if k != "prompt_cache_breakpoint"}), \
                "prompt_cache_breakpoint" in part
        else:
            yield _dump(part), False


def _latest_turn(items: list[dict[str, Any]]) -> int:
    """The index of the latest user or tool message (the implicit breakpoint's place), -1 if none."""
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        if item.get("role") in ("user", "tool") or item.get("type") == "function_call_output":
            return i
    return -1


def positions(api: str, body: dict[str, Any]) -> list[Position]:
    """The request's candidate positions in order: after the tools (and `instructions`), after each
    marked block, after each item."""
    walk = _Walk()
    walk.add(_dump({"tools": body.get("tools") or []}) + _dump({"instructions": body.get("instructions") or ""}))
    items = [i for i in (body.get("input") if api == "responses" else body.get("messages")) or [] if isinstance(i, dict)]
    implicit_at = _latest_turn(items) if (body.get("prompt_cache_options") or {}).get("mode") != "explicit" else -1
    for n, item in enumerate(items):
        for text, marked in _parts(item):
            pos = walk.add(text)
            pos.explicit = marked
        walk.out[-1].implicit = n == implicit_at
        walk.out[-1].item_end = True
    return walk.out


def head_tokens(api: str, body: dict[str, Any]) -> int:
    """The tokens of a request's head (tools and system prompt) as this simulator counts them: what a
    new session can find cached (bench/prefix_regimes.py)."""
    marks = positions(api, body)
    if api == "responses" and "instructions" in body:
        return marks[0].tokens
    return next((p.tokens for p in marks if p.item_end), marks[0].tokens)


class BreakpointCache:
    """Per key (model and prompt_cache_key), the prefixes written at breakpoints: digest -> tokens,
    with their last use (bounded: keys LRU, entries per key LRU, both dropped after the TTL)."""

    def __init__(self, max_keys: int = 512, per_key: int = 512, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._keys: OrderedDict[str, OrderedDict[int, tuple[int, float]]] = OrderedDict()
        self._max_keys, self._per_key, self._ttl_s, self._clock = max_keys, per_key, ttl_s, clock

    def __len__(self) -> int:
        return len(self._keys)

    def lookup_and_store(self, key: str, api: str, body: dict[str, Any]) -> Usage:
        now = self._clock()
        entries = self._entries(key, now)
        marks = positions(api, body)
        cached = 0
        for pos in reversed(marks[-CONSIDERED:]):  # working backward until one matches
            hit = entries.get(pos.digest)
            if hit is not None:
                cached = hit[0]
                entries[pos.digest] = (hit[0], now)
                entries.move_to_end(pos.digest)
                break
        explicit = [p for p in marks if p.explicit]
        implicit = [p for p in marks if p.implicit]
        writes = [*implicit, *explicit[-(WRITES - len(implicit)):]] if explicit or implicit else []
        written = 0
        for pos in writes:
            if pos.tokens < MIN_TOKENS:
                continue
            if pos.digest not in entries:
                written = max(written, pos.tokens - cached)
            entries[pos.digest] = (pos.tokens, now)
            entries.move_to_end(pos.digest)
        while len(entries) > self._per_key:
            entries.popitem(last=False)
        return Usage(cached, written)

    def _entries(self, key: str, now: float) -> OrderedDict[int, tuple[int, float]]:
        """The key's live entries. Keys and entries are kept in order of last use: the expired ones
        are at the front (a key's last use is its newest entry's)."""
        while self._keys:
            oldest = next(iter(self._keys.values()))
            if oldest and now - next(reversed(oldest.values()))[1] < self._ttl_s:
                break
            self._keys.popitem(last=False)
        entries = self._keys.setdefault(key, OrderedDict())
        while entries and now - next(iter(entries.values()))[1] >= self._ttl_s:
            entries.popitem(last=False)
        self._keys.move_to_end(key)
        while len(self._keys) > self._max_keys:
            self._keys.popitem(last=False)
        return entries
