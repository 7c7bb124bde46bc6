"""One stream entry on the bus: decoding it (FastStream's envelope or a plain XADD), and moving an
entry that cannot be handled to `gamma:deadletter`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from faststream.redis.parser.binary import BinaryMessageFormatV1

from shared.contracts.streams.deadletter import DeadLetter
from shared.redis import keys
from shared.redis.redis_wire import lenient_text, text

log = structlog.get_logger()

UNPARSABLE = "__gamma_unparsable__"
BATCH_ENTRIES = "gamma_entries"


async def dead_letter(
    client: aioredis.Redis, stream: str, group: str, entry_id: str, fields: dict[Any, Any], error: str, deliveries: int
) -> None:
    readable = {lenient_text(k): lenient_text(v)[:10_000] for k, v in fields.items()}
    if "__data__" in readable:
        # FastStream's binary envelope is unreadable as text: keep its JSON body beside it when it decodes.
        with contextlib.suppress(ValueError, TypeError):
            readable["__body__"] = json.dumps(decode_fields(fields)[0], ensure_ascii=False)[:10_000]
    record = DeadLetter(
        stream=stream,
        group=group,
        entry_id=entry_id,
        fields=readable,
        error=error[:2000],
        deliveries=deliveries,
    )
    await client.xadd(keys.DEADLETTER, {"data": record.model_dump_json()})
    log.error("dead_letter", stream=stream, group=group, entry_id=entry_id, error=error[:500], deliveries=deliveries)


def decode_entry(raw: dict[Any, Any], body: Any) -> Any:
    """FastStream decodes its own envelope to the JSON body; a plain XADD with a `data` field is accepted too."""
    if isinstance(body, dict) and UNPARSABLE in body:
        raise ValueError(f"entry could not be parsed: {body[UNPARSABLE]}")
    if isinstance(body, dict) and set(body) == {"data"} and isinstance(body["data"], str | bytes):
        return json.loads(body["data"])
    return body


async def stash_batch_parser(msg: Any, original: Callable[[Any], Awaitable[Any]]) -> Any:
    """Hand the batch's raw entries to the handler untouched (see `decode_fields`)."""
    return await original({**msg, "data": [], BATCH_ENTRIES: msg.get("data", [])})


def decode_fields(fields: dict[Any, Any]) -> tuple[Any, dict[str, Any]]:
    """One stream entry -> (JSON body, headers): a FastStream envelope in `__data__` (what `publish`
    writes), or a plain XADD (`data` = JSON, or the fields themselves). Raises ValueError if invalid."""
    envelope = fields.get(b"__data__", fields.get("__data__"))
    if envelope is not None:
        body, headers = BinaryMessageFormatV1.parse(envelope if isinstance(envelope, bytes) else envelope.encode())
        return json.loads(body), headers
    plain = {text(k): text(v) for k, v in fields.items()}  # UnicodeDecodeError is a ValueError
    if set(plain) == {"data"}:
        return json.loads(plain["data"]), {}
    return plain, {}


async def safe_parser(msg: Any, original: Callable[[Any], Awaitable[Any]]) -> Any:
    """FastStream's parser raises on some entries (e.g. a plain XADD with non-UTF-8 bytes); the error
    then escapes our handler, so the entry is never acked nor dead-lettered and the claimer retries it
    forever. Parse such an entry as a marked, UTF-8-safe dict instead: `decode_entry` rejects it and
    the handler dead-letters it at once like any other invalid entry."""
    try:
        return await original(msg)
    except Exception as exc:  # noqa: BLE001 - any parse failure means "invalid entry"
        fields = msg.get("data") if isinstance(msg, dict) else None
        safe: dict[bytes, bytes] = {UNPARSABLE.encode(): repr(exc)[:500].encode()}
        if isinstance(fields, dict):
            for key, value in fields.items():
                name = lenient_text(key)
                safe[(name if name != "__data__" else "__data_unparsable__").encode()] = lenient_text(value).encode()
        return await original({**msg, "data": safe})
