"""The Redis wire helpers, written once: what redis-py hands back (bytes or str, depending on
`decode_responses`) as text, stream entry ids as comparable numbers, and the compare-and-act Lua
scripts that let only a key's holder renew or remove it (leases and locks)."""

from __future__ import annotations

import contextlib
from typing import overload

# Only the holder (the key's value is its token) extends the key's TTL: KEYS[1] key, ARGV[1] token,
# ARGV[2] TTL in ms. 1 when extended, 0 when the key is gone or someone else's now.
COMPARE_AND_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# Only the holder removes the key (an expired lock may belong to someone else now): KEYS[1] key,
# ARGV[1] token. 1 when removed, 0 otherwise.
COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def text(value: object) -> str:
    """A reply value as str: bytes decoded as UTF-8 (a UnicodeDecodeError, a ValueError, on bad bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def lenient_text(value: object) -> str:
    """As `text`, invalid UTF-8 replaced: for logging and dead-lettering entries that may be garbage."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@overload
def optional_text(value: None) -> None: ...
@overload
def optional_text(value: bytes | str) -> str: ...
def optional_text(value: bytes | str | None) -> str | None:
    """As `text`, None (a missing key or field) kept as None."""
    return None if value is None else text(value)


def parse_id(entry_id: bytes | str | None) -> tuple[int, int]:
    """A stream entry id (`1733150000000-3`, or `1733150000000`) as (ms, seq), ordered as Redis orders
    them; None or an empty part counts as 0."""
    if entry_id is None:
        return (0, 0)
    ms, _, seq = text(entry_id).partition("-")
    return (int(ms or 0), int(seq or 0))


def id_ms(entry_id: bytes | str | None) -> int | None:
    """The millisecond time in a stream entry id, or None when it is not one."""
    if entry_id is None:
        return None
    value = text(entry_id)
    if not value or "-" not in value:
        return None
    with contextlib.suppress(ValueError):
        return int(value.split("-", 1)[0])
    return None
