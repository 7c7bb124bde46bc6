"""shared/streams/bus.py decoding, without Redis: every entry shape a stream can hold decodes to the same
body or fails with a ValueError (which the consumers turn into a dead letter)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from faststream.redis.parser.binary import BinaryMessageFormatV1

from shared.streams.bus import (
    UNPARSABLE,
    consumer_name,
    decode_entry,
    decode_fields,
    safe_parser,
    stash_batch_parser,
)

BODY = {"session_id": "s1", "wake_id": "w1", "reason": "message"}


def envelope(body: bytes, headers: dict[str, str] | None = None) -> bytes:
    return asyncio.run(BinaryMessageFormatV1.encode(
        message=body, reply_to=None, headers={"content-type": "application/json", **(headers or {})},
        correlation_id="c1",
    ))


def test_faststream_envelope_decodes_with_its_headers() -> None:
    body, headers = decode_fields({b"__data__": envelope(json.dumps(BODY).encode(), {"traceparent": "00-ab-cd-01"})})
    assert body == BODY
    assert headers["traceparent"] == "00-ab-cd-01" and headers["correlation_id"] == "c1"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({b"data": json.dumps(BODY).encode()}, BODY),  # the plain `XADD data <json>` form
        ({"data": json.dumps(BODY)}, BODY),
        ({b"session_id": b"s1", b"reason": b"message"}, {"session_id": "s1", "reason": "message"}),
    ],
)
def test_plain_entries_decode(fields: dict[Any, Any], expected: dict[str, Any]) -> None:
    assert decode_fields(fields) == (expected, {})


@pytest.mark.parametrize(
    "fields",
    [
        {b"data": b"{not json"},
        {b"data": b"\xff\xfe"},
        {b"session_id": b"\xff"},
        {b"__data__": envelope(b"{truncated")},
    ],
)
def test_undecodable_entries_raise_value_error(fields: dict[Any, Any]) -> None:
    with pytest.raises(ValueError):
        decode_fields(fields)


def test_decode_entry_rejects_what_the_safe_parser_marked() -> None:
    with pytest.raises(ValueError, match="could not be parsed"):
        decode_entry({}, {UNPARSABLE: "UnicodeDecodeError(...)"})
    assert decode_entry({}, {"data": json.dumps(BODY)}) == BODY
    assert decode_entry({}, BODY) == BODY


async def test_safe_parser_turns_a_parser_crash_into_a_marked_entry() -> None:
    seen: list[Any] = []

    async def original(msg: Any) -> Any:
        seen.append(msg)
        data = msg["data"]
        if any(isinstance(v, bytes) and v.startswith(b"\xff") for v in data.values()):
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return msg

    msg = {"type": "stream", "channel": "s", "message_ids": [b"1-0"], "data": {b"data": b"\xff junk"}}
    parsed = await safe_parser(msg, original)
    assert parsed["message_ids"] == [b"1-0"]
    assert UNPARSABLE.encode() in parsed["data"] and b"UnicodeDecodeError" in parsed["data"][UNPARSABLE.encode()]
    assert parsed["data"][b"data"].decode() == "\ufffd junk"
    good = {"type": "stream", "channel": "s", "message_ids": [b"2-0"], "data": {b"data": b"{}"}}
    assert await safe_parser(good, original) is good


async def test_batch_parser_hands_over_the_raw_entries() -> None:
    async def original(msg: Any) -> Any:
        assert msg["data"] == []  # FastStream decodes nothing: one bad entry cannot spoil the batch
        return msg

    entries = [{b"data": b"{}"}, {b"data": b"\xff"}]
    parsed = await stash_batch_parser({"message_ids": [b"1-0", b"2-0"], "data": entries}, original)
    assert parsed["gamma_entries"] == entries


def test_consumer_names_are_stable_per_process_and_distinct_per_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMMA_INSTANCE", "pod-7")
    assert consumer_name("digest") == consumer_name("digest")
    assert consumer_name("digest").startswith("digest-pod-7-")
    assert consumer_name("digest") != consumer_name("runtime")
