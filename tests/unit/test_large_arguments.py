"""A large tool call argument costs the worker's loop once, not at every model call (docs/architecture.md
"Bounded work"): its JSON text is kept on the call (shared/contracts/records/messages.py), long texts are
tokenized on threads (shared/history/tokens.py `TextTokens.prepare`, model/openai_stream.py
`PieceTokens.prepare`), the counts the same as on the loop."""

from __future__ import annotations

import asyncio
import json
from unittest import mock

from scripted.responses import to_chat
from services.runtime.model.openai_stream import PieceTokens
from shared.contracts.records.messages import AssistantMessage, ToolCall
from shared.history.tokens import (
    OFF_LOOP_CHARS,
    TextTokens,
    TokenCounter,
    context_tokens,
    count_text_tokens,
    message_texts,
)

BIG = {"v": [{"a": i, "é": "x"} for i in range(2_000)]}


def test_arguments_json_is_the_json_and_kept_only_when_large() -> None:
    call = ToolCall(id="c1", name="put", arguments=BIG)
    for sort_keys in (False, True):
        assert call.arguments_json(sort_keys) == json.dumps(BIG, ensure_ascii=False, sort_keys=sort_keys)
    with mock.patch("shared.contracts.records.messages.json.dumps") as dumps:
        call.arguments_json()
        call.arguments_json(sort_keys=True)
    dumps.assert_not_called()
    small = ToolCall(id="c2", name="put", arguments={"v": 1})
    assert small.arguments_json() == '{"v": 1}'
    assert not small._json


def test_a_kept_text_changes_neither_equality_nor_copies() -> None:
    a, b = ToolCall(id="c1", name="put", arguments=BIG), ToolCall(id="c1", name="put", arguments=BIG)
    a.arguments_json()
    assert a == b
    assert [a] == [b]  # lists compare their items with __eq__
    assert a != ToolCall(id="c1", name="put", arguments={"v": 2})
    other = a.model_copy(update={"arguments": {"v": 2}})
    assert other.arguments_json() == '{"v": 2}'
    assert a.model_dump() == b.model_dump()


def test_text_tokens_prepare_counts_long_texts_as_the_loop_would() -> None:
    long, short = json.dumps(BIG), "short text"
    assert len(long) >= OFF_LOOP_CHARS
    counts = TextTokens()
    asyncio.run(counts.prepare([long, short, long]))
    assert len(counts) == 1  # the short one is counted on the loop when asked
    assert counts(long) == count_text_tokens(long)
    message = AssistantMessage(content=[ToolCall(id="c1", name="put", arguments=BIG)])
    fresh = TextTokens()
    asyncio.run(fresh.prepare(message_texts([message])))
    assert context_tokens([message], count=fresh) == context_tokens([message])


def test_piece_tokens_prepare_gives_the_same_tokens() -> None:
    counter = TokenCounter()
    pieces = ["head", json.dumps(BIG), "a short piece", json.dumps(BIG, sort_keys=True)]
    prepared = PieceTokens(counter)
    asyncio.run(prepared.prepare(pieces))
    assert list(prepared.encode(pieces)) == list(PieceTokens(counter).encode(pieces))


def test_the_double_reads_a_string_message_without_walking_it() -> None:
    body = {"input": [{"type": "message", "role": "user", "content": "x" * 10_000}]}
    assert to_chat(body)["messages"][1] == {"role": "user", "content": "x" * 10_000}
    parts = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"},
                                                            {"type": "input_image", "image_url": "u"}]}
    assert to_chat({"input": [parts]})["messages"][1]["image_params"] == ["input[0].content[1]"]
